"""One-run privacy audit (Steinke, Nasr and Jagielski 2023; f-DP version: Mahloujifar et al.
2024), per observer and per round.

The audited party's data get m extra rows, the canary *slots*. Slot i holds the canary
``+C·u_i`` (included, probability ½, independently) or its mirror image ``−C·u_i`` (excluded):
``C`` is the clip norm the defense assumes and ``u_1..u_m`` are orthonormal directions of least
variance of the party's data (random unit vectors beyond the data's dimension). Flipping one
slot replaces one row, the neighbouring relation the Gaussian defense is calibrated to
(Steinke et al. state the game with add/remove; their proof only needs flipping one inclusion
bit to give neighbouring datasets — that is the one deviation). The protocol runs **once** with
its real bus and defenses; each observer scores canary i by the released rows' projections on
``u_i`` (the largest one, and their sum), guesses "included" for the k+ highest scores and
"excluded" for the k− lowest, abstains on the rest, and
:func:`testbed.scoring.audit_bounds.one_run_bounds` turns the correct guesses into an (ε, δ)
and a μ-GDP lower bound with the choice of statistic and (k+, k−) paid for by Bonferroni.

``null=True`` runs the same code with every slot holding the origin whatever the inclusion
bit: nothing about the bits is released, so a calibrated audit reports ε̂ > 0 in at most
α = 1 − confidence of such runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from testbed.errors import TestbedError
from testbed.exchange.bus import EAVESDROPPER, SERVER, Bus, iter_arrays, visible_to
from testbed.exchange.ledger import PrivacyLedger
from testbed.measure import Measure
from testbed.run.roster import Roster
from testbed.scoring.audit_bounds import OneRunBound, one_run_bounds
from testbed.seeding import component_rng

__all__ = [
    "ONE_RUN_METHOD",
    "OneRunAudit",
    "audit_observers",
    "canary_directions",
    "one_run_audit",
]

ONE_RUN_METHOD = (
    "one run, m canary slots each holding +C*u_i (probability 1/2) or -C*u_i; scores = max, "
    "sum and signed largest-magnitude of the released rows' projections on u_i (minus a "
    "noiseless reference run's); guesses: k+ highest 'in', k- lowest 'out', "
    "abstain otherwise; (epsilon, delta) bound of Steinke-Nasr-Jagielski 2023 and mu-GDP bound "
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
        }


def canary_directions(X: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` unit directions (rows): the right singular vectors of the centred data with the
    smallest singular values first (directions the data do not point to), then random unit
    vectors when ``m`` exceeds the dimension."""
    Xc = np.asarray(X, float) - np.mean(X, axis=0)
    d = Xc.shape[1]
    _, _, vt = np.linalg.svd(Xc, full_matrices=True)
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


def audit_observers(world, party: str) -> list[tuple[str, ...]]:
    """The threat models of the scenario that can see something of ``party``: the server, each
    other party, the eavesdropper, and the declared coalition (observer + colluders)."""
    out = [(SERVER,)] + [(p,) for p in world.parties if p != party] + [(EAVESDROPPER,)]
    tm = world.scenario.threat_model
    if tm.colluders:
        coalition = tuple(dict.fromkeys([tm.observer, *tm.colluders]))
        if party not in coalition and coalition not in out:
            out.append(coalition)
    return out


def _projections(envelopes, U: np.ndarray) -> list[np.ndarray | None]:
    """Per envelope: its data-width rows projected on each direction (rows x m), or None when
    it carries no such rows (Measure weights are skipped)."""
    d = U.shape[1]
    out = []
    for e in envelopes:
        p = e.payload
        arrays = (
            [p.support]
            if isinstance(p, Measure)
            else [a for path, a in iter_arrays(p) if not path.endswith("weights")]
        )
        rows = [np.asarray(a, float) for a in arrays if a.ndim == 2 and a.shape[1] == d]
        out.append(np.vstack(rows) @ U.T if rows else None)
    return out


def _reference(world, party, X, U, seed, protocol_rng) -> list:
    """Projections of a noiseless run with every slot at the origin and the same protocol
    randomness: what the observer expects to see whatever the inclusion bits (it knows the
    protocol, its own randomness and, as an auditor, the rest of the data)."""
    parties = {**world.parties, party: _with_slots(world.parties[party], X, np.zeros_like(U))}
    bus = Bus([], parties=parties)
    world.protocol.run(Roster.of(parties), bus, component_rng(seed, *protocol_rng))
    return _projections(list(bus.transcript), U)


def _centred(proj: list, ref: list) -> list:
    """Subtract the reference run's projections row by row where the reference has a message
    of the same shape at the same position; otherwise keep the projection as it is."""
    out = []
    for i, p in enumerate(proj):
        r = ref[i] if i < len(ref) else None
        out.append(p - r if p is not None and r is not None and r.shape == p.shape else p)
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


def _scores(envelopes, proj, party, who, keep_round) -> dict[str, np.ndarray] | None:
    """The observer ``who``'s canary scores from the messages it saw in the kept rounds: the
    audited party's own messages when it saw any, else every message it did not send. Scores:
    the largest centred projection of any row, their sum, and the projection of largest
    magnitude with its sign (a canary moves one atom by +C*lambda or -C*lambda)."""
    seen = [
        i
        for i, e in enumerate(envelopes)
        if proj[i] is not None
        and keep_round(e.round)
        and visible_to(e, who)
        and e.sender not in who
    ]
    own = [i for i in seen if envelopes[i].sender == party]
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
    proj = _centred(_projections(envelopes, U), _reference(world, party, X, U, seed, protocol_rng))
    rounds_of = [e.round for e in envelopes] + [envelopes[-1].round if envelopes else 0]
    out = []
    scopes = _scopes([e.round for e in envelopes], per_round)
    claims = {label: ledger.claim_for(party, rounds_of, keep, delta) for label, keep in scopes}
    for who in observers if observers is not None else audit_observers(world, party):
        for label, keep in scopes:
            scores = _scores(envelopes, proj, party, who, keep)
            if scores is None:
                continue
            claimed, mu = claims[label]
            bound = one_run_bounds(scores, include, delta, confidence)
            out.append(OneRunAudit(party, "+".join(who), label, bound, claimed, mu, null=null))
    return out
