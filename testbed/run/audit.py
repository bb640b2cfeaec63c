"""Empirical privacy auditing of a defended protocol by a canary distinguishing game.

The game (Jagielski et al. 2020; Nasr et al. 2021) matches the neighbouring relation of the
defenses' claims: two datasets of the audited party that differ in one row, ``D`` and ``D'`` =
``D`` with one row replaced by a *canary* on the clip sphere, in a direction the data do not
point to. Each trial runs the real protocol, bus and defenses on ``D`` or on ``D'`` with fresh
defense noise (the protocol's own randomness, e.g. FedWAD's server-drawn ξ⁽⁰⁾, is known to the
server and held fixed); the observer (the server; a client when the server holds the audited rows,
as FedBary's validation set) scores every numeric field of what the holder of the rows sent it
(:mod:`testbed.run.audit_fields`) — e.g. the largest projection of any released atom on the
canary's direction, minus the atom the observer itself sent — and a threshold chosen on the first
half of the trials is evaluated on the second half. The operating point's TPR/FPR, with Clopper–Pearson bounds,
give an ε lower bound (:func:`testbed.scoring.metrics.epsilon_lower_bound`) that a correct claim can never
be below: ``audited ε <= claimed ε`` or the claim (or its assumption) is wrong.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from testbed.errors import TestbedError
from testbed.exchange.bus import SERVER, Bus, visible_to
from testbed.exchange.ledger import PrivacyLedger
from testbed.run.audit_fields import counterparts, numeric_fields, projections
from testbed.run.audit_one_run import audit_observers, claim_epsilon_of_mu, data_holder
from testbed.run.audit_verdict import judge
from testbed.run.roster import Roster
from testbed.scoring.audit_bounds import held_out_bound, held_out_ceiling
from testbed.scoring.metrics import epsilon_lower_bound, gdp_epsilon, gdp_mu_lower_bound
from testbed.seeding import component_rng

__all__ = [
    "AUDIT_METHOD",
    "AuditResult",
    "canary_audit",
    "canary_score",
    "trials_ceiling",
    "trials_needed",
]


#: how :func:`canary_audit` turns scores into bounds (printed with every result)
AUDIT_METHOD = (
    "canary distinguishing game over many runs; statistic (max or sum of the projections on "
    "the canary direction of every row of the data's width the party sent, each minus the "
    "message it answers; each other numeric field of payload and meta; their linear "
    "combination) and threshold chosen on the first half of the trials, "
    "bounds computed on the second half only; one-sided Clopper-Pearson bounds on TPR (lower) "
    "and FPR (upper); two tests (an (epsilon, delta) bound and a mu-GDP bound against the "
    "Gaussian noise the ledger records), each at confidence 1 - (1 - c)/2 so both hold together "
    "at c"
)


@dataclass(frozen=True)
class AuditResult:
    """The audit's outcome. ``audited_epsilon``: (ε, δ) lower bound from the held-out operating
    point; ``mu_lower``: μ-GDP lower bound, beside ``claimed_mu`` (the ledger's Gaussian noise,
    ``None`` when its events are not all full-batch Gaussian); ``epsilon_gdp``: the ε at δ of
    the tightest Gaussian mechanism consistent with ``mu_lower`` (shown, not used to decide)."""

    party: str
    trials: int
    claimed_epsilon: float
    delta: float
    audited_epsilon: float
    tpr: float
    fpr: float
    threshold: float
    canary_norm: float
    mu_lower: float = 0.0
    claimed_mu: float | None = None
    epsilon_gdp: float = 0.0
    statistic: str = "max"
    confidence: float = 0.95
    method: str = AUDIT_METHOD
    ceiling_epsilon: float = float("inf")  # the largest claimed ε these trials could refute
    observer: str = SERVER

    def verdict(self, advice: str = "the mechanism audit"):
        """This result's :class:`~testbed.run.audit_verdict.AuditVerdict` (protocol scope)."""
        return judge(
            self.party,
            "protocol",
            self.claimed_epsilon,
            self.audited_epsilon,
            self.ceiling_epsilon,
            self.violated,
            self.confidence,
            advice=advice,
        )

    @property
    def violated(self) -> bool:
        """The claim is refuted: the audited ε exceeds the claimed ε, or the μ-GDP bound exceeds
        the μ the claimed Gaussian noise implies (the claimed ε is computed from that noise)."""
        if self.audited_epsilon > self.claimed_epsilon:
            return True
        return self.claimed_mu is not None and self.mu_lower > self.claimed_mu

    @property
    def consistent(self) -> bool:
        return not self.violated


def canary_score(
    envelopes, party: str, direction: np.ndarray, how: str = "max", observer=(SERVER,)
) -> float:
    """Projection on ``direction`` of the rows of the data's width (any field, payload and meta)
    in the messages ``party`` (the holder of the audited rows) sent that ``observer`` saw, each
    minus the message it answers (:func:`testbed.run.audit_fields.counterparts`): the largest
    (``how="max"``: a canary that moves one atom) or their sum (``"sum"``: a canary that moves
    every atom; the sufficient statistic for a common Gaussian shift)."""
    return _features(list(envelopes), party, direction, observer).get(how, -np.inf)


def _features(envelopes, holder: str, direction: np.ndarray, observer) -> dict[str, float]:
    """The many-run game's statistics of one trial: ``max`` and ``sum`` of the centred
    projections, and one ``field:<kind>/<path>`` per other numeric field (its mean, summed over
    the rounds) of every message ``holder`` sent that ``observer`` saw."""
    proj = projections(envelopes, direction[None, :])
    match = counterparts(envelopes, proj)
    vals, out = [], {}
    for i, e in enumerate(envelopes):
        if e.sender != holder or e.sender in observer or not visible_to(e, observer):
            continue
        if proj[i] is not None:
            j = match[i]
            vals.append(proj[i][:, 0] - (proj[j][:, 0] if j is not None else 0.0))
        d = direction.shape[0]
        for path, a in numeric_fields(e):
            if path.endswith("weights") or a.ndim == 0 or a.shape[-1] != d:
                key = f"field:{getattr(e, 'kind', '')}/{path}"
                out[key] = out.get(key, 0.0) + (float(np.mean(a)) if a.size else 0.0)
    if vals:
        v = np.concatenate(vals)
        out["max"], out["sum"] = float(np.max(v)), float(np.sum(v))
    return out


def _add_linear(fit0, fit1, ev0, ev1) -> None:
    """Add the statistic ``"linear"``: the combination Σ_k w_k·s_k of the finite statistics with
    w_k = (mean with canary − mean without) / pooled variance, all estimated on the fit trials
    only (the Gaussian-optimal weights for independent releases: the support's projection and
    the distances), so choosing it costs the held-out bound nothing."""
    keys = [
        k
        for k in fit0
        if np.all(np.isfinite(fit0[k]))
        and np.all(np.isfinite(fit1[k]))
        and np.var(np.concatenate([fit0[k], fit1[k]])) > 0
    ]
    if len(keys) < 2:
        return
    w = {}
    for k in keys:
        var = (np.var(fit0[k]) + np.var(fit1[k])) / 2
        w[k] = (np.mean(fit1[k]) - np.mean(fit0[k])) / var if var > 0 else 0.0
    for d in (fit0, fit1, ev0, ev1):
        d["linear"] = sum(w[k] * np.where(np.isfinite(d[k]), d[k], 0.0) for k in keys)


def _canary(X: np.ndarray, clip_norm: float) -> tuple[np.ndarray, np.ndarray, int]:
    """A row on the clip sphere pointing away from the data (public construction), and the
    private row it replaces: the one farthest from it (the largest change a neighbour makes)."""
    m = X.mean(axis=0)
    u = -m / np.linalg.norm(m) if np.linalg.norm(m) > 1e-12 else np.eye(X.shape[1])[0]
    c = clip_norm * u
    return c, u, int(np.argmax(np.linalg.norm(X - c, axis=1)))


def canary_audit(
    world,
    party: str,
    trials: int = 200,
    delta: float = 1e-5,
    confidence: float = 0.95,
    null: bool = False,
    progress=None,
    run: int = 0,
) -> AuditResult:
    """Run the distinguishing game ``trials`` times per world on ``world`` (from
    ``testbed.run.execute(scenario, until="world")``) and return the audited bounds beside the
    claimed ones (method: :data:`AUDIT_METHOD`). ``null=True``: the second world is the first
    (the canary is never inserted), for calibration; ``progress``: called after each trial;
    ``run`` selects independent noise draws."""
    if party not in world.parties:
        raise TestbedError(f"audit: unknown party {party!r}; parties: {', '.join(world.parties)}")
    if trials < 20:
        raise TestbedError("audit: trials must be at least 20")
    X = np.asarray(world.parties[party].X)
    clip = max(
        [float(getattr(d.config, "clip_norm", 0.0)) for d in world.defenses]
        + [float(np.max(np.linalg.norm(X, axis=1)))]
    )
    canary, u, row = _canary(X, clip)
    X1 = X.copy()
    if not null:
        X1[row] = canary  # replace-one neighbour: the relation the Gaussian defense assumes
    worlds = {0: world.parties, 1: {**world.parties, party: replace(world.parties[party], X=X1)}}
    seed = world.scenario.seed
    holder, observer = data_holder(world, party), audit_observers(world, party)[0]
    trial_features: dict[int, list[dict[str, float]]] = {0: [], 1: []}
    ledger = PrivacyLedger()
    for i in range(trials):
        for b in (0, 1):
            ledger = PrivacyLedger()
            defs = [
                (d, component_rng(seed, "audit", "defense", *((run,) if run else ()), i, b, k))
                for k, d in enumerate(world.defenses)
            ]
            bus = Bus(defs, ledger=ledger, parties=worlds[b])
            # the protocol's own randomness (e.g. FedWAD's xi^(0)) is the server's choice, so the
            # observer knows it: it is the same in every trial; only the defenses' noise is fresh
            roster = Roster.of(worlds[b])
            world.protocol.run(roster, bus, component_rng(seed, "audit", "protocol"))
            trial_features[b].append(_features(list(bus.transcript), holder, u, observer))
        if progress is not None:
            progress(i)
    claimed, claimed_mu = float(ledger.epsilon(party, delta)), ledger.gdp_mu(party)
    stats = sorted({k for b in (0, 1) for f in trial_features[b] for k in f})
    if not stats:
        raise TestbedError(
            f"audit: {'+'.join(observer)} saw no numeric field of a message {holder} sent"
        )
    scores = {(b, k): [f.get(k, 0.0) for f in trial_features[b]] for b in (0, 1) for k in stats}
    half, n = trials // 2, trials - trials // 2
    fit0 = {k: np.asarray(scores[(0, k)][:half]) for k in stats}
    fit1 = {k: np.asarray(scores[(1, k)][:half]) for k in stats}
    ev0 = {k: np.asarray(scores[(0, k)][half:]) for k in stats}
    ev1 = {k: np.asarray(scores[(1, k)][half:]) for k in stats}
    _add_linear(fit0, fit1, ev0, ev1)
    each = 1.0 - (1.0 - confidence) / 2  # two tests, Bonferroni

    def eps_bound(t, f):
        return epsilon_lower_bound(t, f, n, n, delta, each)

    stat, thr, audited, tpr, fpr = held_out_bound(fit0, fit1, ev0, ev1, eps_bound)

    def mu_bound(t, f):
        return gdp_mu_lower_bound(t, f, n, n, each)

    # the Gaussian-DP bound of the same game (Nasr et al. 2023), held out too: on these trial
    # counts it is tighter than a Bonferroni over every threshold of all trials
    # (scoring.audit_bounds.gdp_mu_from_scores), e.g. 0.59 vs 0.45 at 400 trials and mu = 1
    _, _, mu_lo, _, _ = held_out_bound(fit0, fit1, ev0, ev1, mu_bound)
    ceiling = trials_ceiling(trials, delta, confidence, claimed_mu, ledger.accountant)
    return AuditResult(
        party,
        trials,
        claimed,
        delta,
        audited,
        tpr,
        fpr,
        thr,
        clip,
        mu_lower=mu_lo,
        claimed_mu=claimed_mu,
        epsilon_gdp=gdp_epsilon(mu_lo, delta),
        statistic=stat,
        confidence=confidence,
        ceiling_epsilon=ceiling,
        observer="+".join(observer),
    )


def trials_ceiling(
    trials: int, delta: float, confidence: float, claimed_mu: float | None, accountant="rdp"
) -> float:
    """The largest claimed ε the game over ``trials`` runs per world could refute: TPR = 1 and
    FPR = 0 on the held-out half, by the (ε, δ) test or, for a μ-GDP claim, the μ test (its
    μ ceiling read as the claim's ε)."""
    eps, mu = held_out_ceiling(trials - trials // 2, delta, confidence)
    if claimed_mu is None:
        return eps
    return max(eps, claim_epsilon_of_mu(mu, delta, accountant))


@functools.lru_cache(maxsize=256)  # parties of one scenario share claims
def trials_needed(
    claimed: float,
    delta: float,
    confidence: float,
    gaussian: bool,
    accountant: str = "rdp",
    start: int = 20,
    cap: int = 1 << 16,
) -> int | None:
    """The smallest trial count (doubling from ``start``, at most ``cap``) whose ceiling
    exceeds ``claimed``; None when none up to the cap does."""
    t = max(20, start)
    while t <= cap:
        if trials_ceiling(t, delta, confidence, 0.0 if gaussian else None, accountant) > claimed:
            return t
        t *= 2
    return None
