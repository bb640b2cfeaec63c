"""One-run privacy audit (Steinke, Nasr and Jagielski 2023; f-DP version: Mahloujifar et al.
2024), per observer and per round.

The audited party's data get m extra rows, the canary *slots*. Slot i holds the canary
``+C·u_i`` (included, probability ½, independently) or its mirror image ``−C·u_i`` (excluded):
``C`` is the clip norm the defense assumes and ``u_1..u_m`` are orthonormal null directions of
the party's data, orthogonal to its top principal components and its mean (random unit vectors
beyond the data's dimension). Flipping one
slot replaces one row, the neighbouring relation the Gaussian defense is calibrated to
(Steinke et al. state the game with add/remove; their proof only needs flipping one inclusion
bit to give neighbouring datasets — that is the one deviation). The protocol runs **once** with
its real bus and defenses; each observer (never the holder of the audited rows) scores canary i
by the projections on ``u_i`` of every row of the data's width in every field it saw
(:mod:`testbed.run.audit_fields`; the largest one, their sum, the signed largest magnitude; raw:
a baseline subtracted was measured to cost power, see :func:`_centred`), guesses "included" for the k+ highest scores and
"excluded" for the k− lowest, abstains on the rest, and
:func:`testbed.scoring.audit_bounds.one_run_bounds` turns the correct guesses into an (ε, δ)
and a μ-GDP lower bound with the choice of statistic and (k+, k−) paid for by Bonferroni.

``null=True`` runs the same code with every slot holding the origin whatever the inclusion
bit: nothing about the bits is released, so a calibrated audit reports ε̂ > 0 in at most
α = 1 − confidence of such runs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np

from testbed.errors import TestbedError
from testbed.exchange.bus import EAVESDROPPER, SERVER, Bus, visible_to
from testbed.exchange.ledger import MechanismEvent, PrivacyLedger
from testbed.run.audit_fields import counterparts, projections
from testbed.run.audit_verdict import judge
from testbed.run.roster import Roster
from testbed.scoring.audit_bounds import (
    OneRunBound,
    default_guess_grid,
    one_run_bounds,
    one_run_ceiling,
)
from testbed.seeding import component_rng

__all__ = [
    "ONE_RUN_METHOD",
    "OneRunAudit",
    "audit_observers",
    "canaries_needed",
    "canary_directions",
    "canary_run",
    "ceiling_epsilon",
    "claim_epsilon_of_mu",
    "data_holder",
    "one_run_audit",
]

ONE_RUN_METHOD = (
    "one run, m canary slots each holding +C*u_i (probability 1/2) or -C*u_i; scores = max, "
    "sum and signed largest-magnitude of the projections on u_i of every row of the data's "
    "width in any field (payload and meta), canaries in null directions of the data at the "
    "clip norm; guesses: k+ highest 'in', k- lowest 'out', abstain otherwise; (epsilon, delta) bound of Steinke-Nasr-Jagielski 2023 and mu-GDP bound "
    "of Mahloujifar et al. 2024 (f-DP, Gaussian trade-off), each at confidence 1 - (1-c)/2, "
    "Bonferroni over the statistics x guess rules tried"
)


@dataclass(frozen=True)
class OneRunAudit:
    """One observer's one-run bounds for one scope of rounds, beside the claim for the same
    releases (``claimed_mu`` is ``None`` unless every release is a full-batch Gaussian)."""

    party: str
    observer: str
    rounds: str  # "all", "k" (that round's messages only) or "<=k" (cumulative)
    bound: OneRunBound
    claimed_epsilon: float
    claimed_mu: float | None
    ceiling_epsilon: float = math.inf  # the largest claimed ε these canaries could refute
    runs: int = 1
    null: bool = False
    method: str = ONE_RUN_METHOD

    @property
    def violated(self) -> bool:
        if self.bound.epsilon > self.claimed_epsilon:
            return True
        return self.claimed_mu is not None and self.bound.mu > self.claimed_mu

    def row(self) -> dict:
        """A flat row for results.csv / results.json."""
        b = self.bound
        return {
            "party": self.party,
            "observer": self.observer,
            "rounds": self.rounds,
            "canaries": b.m,
            "runs": self.runs,
            "confidence": b.confidence,
            "delta": b.delta,
            "eps_lower": b.epsilon,
            "mu_lower": b.mu,
            "eps_lower_gdp": b.epsilon_gdp,
            "guesses": b.guesses,
            "correct": b.correct,
            "rule": "{}:k+={},k-={}".format(*b.rule) if b.rule[0] else "none",
            "candidates": b.candidates,
            "epsilon_claimed": self.claimed_epsilon,
            "mu_claimed": self.claimed_mu,
            "violated": self.violated,
            "null": self.null,
            "scope": "protocol",
            "ceiling_epsilon": self.ceiling_epsilon,
            "ceiling_mu": b.ceiling_mu,
            "verdict": self.verdict().verdict,
        }

    def verdict(self, advice: str = "the mechanism audit"):
        """This row's :class:`~testbed.run.audit_verdict.AuditVerdict` (protocol scope)."""
        return judge(
            self.party,
            "protocol",
            self.claimed_epsilon,
            self.bound.epsilon,
            self.ceiling_epsilon,
            self.violated,
            self.bound.confidence,
            advice=advice,
        )


def canary_directions(X: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` unit directions (rows): null directions of the data first — the right singular
    vectors of the (uncentred) rows with the smallest singular values, orthogonal to the data's
    top principal components and to their mean, so a canary ±C·u is equally far from every row
    whichever its sign — then random unit vectors when ``m`` exceeds the dimension."""
    X = np.asarray(X, float)
    d = X.shape[1]
    _, _, vt = np.linalg.svd(np.vstack([X - X.mean(axis=0), X.mean(axis=0)]), full_matrices=True)
    U = vt[::-1][: min(m, d)]
    if m > d:
        extra = rng.normal(size=(m - d, d))
        U = np.vstack([U, extra / np.linalg.norm(extra, axis=1, keepdims=True)])
    return U


class _RoundLedger(PrivacyLedger):
    """A ledger that also remembers which message (transcript index) each event came from, so
    the claim can be composed over the releases of chosen rounds."""

    def __init__(self):
        super().__init__()
        self.bus: Bus | None = None
        self.seq: list[int] = []

    def record(self, event) -> None:
        super().record(event)
        self.seq.append(len(self.bus.transcript) if self.bus is not None else -1)

    def claim_for(self, party: str, rounds_of: list[int], keep, delta: float):
        sub = PrivacyLedger(accountant=self.accountant)
        for e, s in zip(self.events, self.seq):
            if keep(rounds_of[s]):
                sub.record(e)
        return float(sub.epsilon(party, delta)), sub.gdp_mu(party)


def data_holder(world, party: str) -> str:
    """Who holds ``party``'s rows: the server for a party whose role is the server's (FedBary's
    validation set, "server (validation set, never sent)"), else the party itself."""
    role = str(world.protocol.roles(world.parties).get(party, ""))
    return SERVER if role.startswith("server") else party


def audit_observers(world, party: str) -> list[tuple[str, ...]]:
    """The threat models of the scenario that can see something of ``party``: the server, each
    other party, the eavesdropper, and the declared coalition (observer + colluders) — never the
    holder of the party's rows (the server, for a validation set it holds) nor a coalition with
    it, and never a party whose rows the server holds (it takes no part in the protocol)."""
    holder = data_holder(world, party)
    silent = {p for p in world.parties if p != party and data_holder(world, p) == SERVER}
    out = [(SERVER,)] + [(p,) for p in world.parties if p != party and p not in silent]
    out.append((EAVESDROPPER,))
    tm = world.scenario.threat_model
    if tm.colluders:
        coalition = tuple(dict.fromkeys([tm.observer, *tm.colluders]))
        if party not in coalition and coalition not in out:
            out.append(coalition)
    return [who for who in out if holder not in who]


def _reference(world, party, X, U, seed, protocol_rng) -> list:
    """Projections of a noiseless run with every slot at the origin and the same protocol
    randomness: the fallback baseline of a message that answers none the observer saw (exact
    until the first noisy release)."""
    parties = {**world.parties, party: _with_slots(world.parties[party], X, np.zeros_like(U))}
    bus = Bus([], parties=parties)
    world.protocol.run(Roster.of(parties), bus, component_rng(seed, *protocol_rng))
    return projections(list(bus.transcript), U)


def _centred(envelopes, proj: list, ref: list | None, baseline: str = "none") -> list:
    """Each message's projections minus its baseline, the observer's prediction of it from what
    it knows: the message it answers (:func:`testbed.run.audit_fields.counterparts`, which the
    observer sent or saw) and the noiseless reference run's message at the same position. With
    ``baseline="fit"`` (the default) the prediction is their least-squares combination over the
    message's entries (FedWAD's ξ_μ = (1 − t)·ξ + t·T(ξ): the ξ the server sent, scaled, and
    the reference's T where it has not drifted); ``"previous"`` or ``"reference"`` use one
    alone; ``"none"`` (the audit's) subtracts nothing. Each is a function of the transcript,
    which without canaries does not depend on the inclusion bits: calibration holds for all.
    Measured (docs/reference/attacks.md, "Baselines, measured"): with canaries in null directions the
    raw projections get the most canary signs right; every baseline adds an earlier release's
    noise."""
    if baseline == "none":
        return list(proj)
    out = []
    pairs = counterparts(envelopes, proj) if baseline != "reference" else [None] * len(proj)
    for i, j in enumerate(pairs):
        p = proj[i]
        r = ref[i] if ref is not None and i < len(ref) and baseline != "previous" else None
        cols = [c for c in (None if j is None else proj[j], r) if c is not None]
        cols = [c for c in cols if p is not None and c.shape == p.shape]
        if not cols:
            out.append(p)
        elif baseline != "fit":
            out.append(p - cols[0])
        else:
            A = np.stack([c.ravel() for c in cols], axis=1)
            coef, *_ = np.linalg.lstsq(A, p.ravel(), rcond=None)
            out.append(p - (A @ coef).reshape(p.shape))
    return out


def _with_slots(data, X: np.ndarray, slots: np.ndarray):
    """The party's data with the canary slots appended (a slot carries the party's first
    label: a fixed, public choice)."""
    y = data.y
    return replace(
        data,
        X=np.vstack([X, slots]),
        y=None if y is None else np.concatenate([y, np.full(len(slots), y[0])]),
        source_index=None,
    )


def _scores(envelopes, proj, holder, who, keep_round) -> dict[str, np.ndarray] | None:
    """The observer ``who``'s canary scores from the messages it saw in the kept rounds: those
    the holder of the audited rows sent when it saw any, else every message it did not send.
    Scores: the largest centred projection of any row, their sum, and the projection of largest
    magnitude with its sign (a canary moves one atom by +C*lambda or -C*lambda)."""
    seen = [
        i
        for i, e in enumerate(envelopes)
        if proj[i] is not None
        and keep_round(e.round)
        and visible_to(e, who)
        and e.sender not in who
    ]
    own = [i for i in seen if envelopes[i].sender == holder]
    idx = own or seen
    if not idx:
        return None
    P = np.vstack([proj[i] for i in idx])
    signed = P[np.argmax(np.abs(P), axis=0), np.arange(P.shape[1])]
    return {"max": P.max(axis=0), "sum": P.sum(axis=0), "signed": signed}


def _scopes(rounds: list[int], per_round: bool):
    last = max(rounds) if rounds else 0
    out = [("all", lambda r: True)]
    if per_round:
        for k in sorted(set(rounds)):
            out.append((f"{k}", lambda r, k=k: r == k))
            if k != last:
                out.append((f"<={k}", lambda r, k=k: r <= k))
    return out


def claim_epsilon_of_mu(mu: float, delta: float, accountant: str = "rdp") -> float:
    """The ε the ledger's accountant claims for a μ-GDP Gaussian release (one full-batch
    release with noise multiplier 1/μ: the same RDP as any composition of that μ), so that a
    μ-GDP ceiling reads on the claim's own ε scale."""
    if mu <= 0:
        return 0.0
    ledger = PrivacyLedger(accountant=accountant)
    ledger.record(MechanismEvent("ceiling", "gaussian", 1.0 / mu))
    return float(ledger.epsilon("ceiling", delta))


def ceiling_epsilon(bound: OneRunBound, claimed_mu: float | None, accountant: str) -> float:
    """The largest ε this audit could refute: the (ε, δ) test's ceiling and, for a μ-GDP claim
    (refuted when μ̂ > the claimed μ), the claim's ε at the f-DP test's μ ceiling."""
    if claimed_mu is None:
        return bound.ceiling_epsilon
    return max(
        bound.ceiling_epsilon, claim_epsilon_of_mu(bound.ceiling_mu, bound.delta, accountant)
    )


@functools.lru_cache(maxsize=256)  # parties of one scenario share claims
def canaries_needed(
    claimed: float,
    delta: float,
    confidence: float,
    gaussian: bool,
    accountant: str = "rdp",
    start: int = 2,
    cap: int = 1 << 14,
) -> int | None:
    """The smallest m (doubling from ``start``, at most ``cap``) whose one-run ceiling exceeds
    ``claimed`` (``gaussian``: the claim is μ-GDP, so the f-DP test's ceiling counts); None when
    no m up to the cap reaches it (the (ε, δ) test's ceiling peaks near 3.4 at δ = 1e-5)."""
    m = max(2, start)
    while m <= cap:
        grid = default_guess_grid(m)
        top = max(kp + km for kp, km in grid)
        eps, mu = one_run_ceiling(
            m, delta, confidence, 3 * len(grid), [g for g in grid if sum(g) >= top // 2]
        )
        if eps > claimed or (gaussian and claim_epsilon_of_mu(mu, delta, accountant) > claimed):
            return m
        m *= 2
    return None


def canary_run(
    world, party: str, canaries: int, null: bool = False, run: int = 0, baseline: str = "none"
):
    """The protocol run once with ``canaries`` slots in ``party``'s data: its envelopes, their
    centred projections on the canary directions (``baseline``: see :func:`_centred`;
    ``"reference"`` is the noiseless run alone, the baseline before the observer's own messages
    were used), the inclusion bits and the ledger."""
    seed = world.scenario.seed
    X = np.asarray(world.parties[party].X, float)
    clip = max(
        [float(getattr(d.config, "clip_norm", 0.0)) for d in world.defenses]
        + [float(np.max(np.linalg.norm(X, axis=1)))]
    )
    U = canary_directions(X, canaries, component_rng(seed, "audit", "one_run", "directions"))
    include = component_rng(seed, "audit", "one_run", "include", run).random(canaries) < 0.5
    signs = np.where(include, 1.0, -1.0)
    slots = np.zeros_like(U) if null else clip * signs[:, None] * U
    data = _with_slots(world.parties[party], X, slots)
    parties = {**world.parties, party: data}
    ledger = _RoundLedger()
    defs = [
        (d, component_rng(seed, "audit", "one_run", "defense", run, k))
        for k, d in enumerate(world.defenses)
    ]
    bus = Bus(defs, ledger=ledger, parties=parties)
    ledger.bus = bus
    protocol_rng = ("audit", "one_run", "protocol", run)
    world.protocol.run(Roster.of(parties), bus, component_rng(seed, *protocol_rng))
    envelopes = list(bus.transcript)
    ref = _reference(world, party, X, U, seed, protocol_rng) if baseline != "none" else None
    raw = projections(envelopes, U)
    proj = _centred(envelopes, raw, ref, baseline)
    return envelopes, proj, include, ledger


def one_run_audit(
    world,
    party: str,
    canaries: int = 256,
    delta: float = 1e-5,
    confidence: float = 0.95,
    observers: list[tuple[str, ...]] | None = None,
    per_round: bool = False,
    null: bool = False,
    run: int = 0,
) -> list[OneRunAudit]:
    """Run the protocol once on ``world`` (``testbed.run.execute(scenario, until="world")``)
    with ``canaries`` canary slots added to ``party``'s data and return, per observer (default:
    :func:`audit_observers`) and per scope of rounds, the one-run bounds beside the claim.
    ``run`` selects independent draws (inclusion bits, defense noise, protocol randomness)."""
    if party not in world.parties:
        raise TestbedError(f"audit: unknown party {party!r}; parties: {', '.join(world.parties)}")
    if canaries < 2:
        raise TestbedError("audit: canaries must be at least 2")
    envelopes, proj, include, ledger = canary_run(world, party, canaries, null, run)
    rounds_of = [e.round for e in envelopes] + [envelopes[-1].round if envelopes else 0]
    out = []
    scopes = _scopes([e.round for e in envelopes], per_round)
    claims = {label: ledger.claim_for(party, rounds_of, keep, delta) for label, keep in scopes}
    holder = data_holder(world, party)
    for who in observers if observers is not None else audit_observers(world, party):
        for label, keep in scopes:
            scores = _scores(envelopes, proj, holder, who, keep)
            if scores is None:
                continue
            claimed, mu = claims[label]
            bound = one_run_bounds(scores, include, delta, confidence)
            ceiling = ceiling_epsilon(bound, mu, ledger.accountant)
            out.append(
                OneRunAudit(party, "+".join(who), label, bound, claimed, mu, ceiling, null=null)
            )
    return out
