"""Empirical privacy auditing of a defended protocol by a canary distinguishing game.

The game (Jagielski et al. 2020; Nasr et al. 2021) matches the neighbouring relation of the
defenses' claims: two datasets of the audited party that differ in one row, ``D`` and ``D'`` =
``D`` with one row replaced by a *canary* on the clip sphere, in a direction the data do not
point to. Each trial runs the real protocol, bus and defenses on ``D`` or on ``D'`` with fresh
defense noise (the protocol's own randomness, e.g. FedWAD's server-drawn ξ⁽⁰⁾, is known to the
server and held fixed); the observer (the server) scores what the party sent — the largest projection of any
released atom on the canary's direction — and a threshold chosen on the first half of the trials
is evaluated on the second half. The operating point's TPR/FPR, with Clopper–Pearson bounds,
give an ε lower bound (:func:`testbed.metrics.epsilon_lower_bound`) that a correct claim can never
be below: ``audited ε <= claimed ε`` or the claim (or its assumption) is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from testbed.bus import SERVER, Bus, iter_arrays
from testbed.errors import TestbedError
from testbed.ledger import PrivacyLedger
from testbed.measure import Measure
from testbed.metrics import epsilon_lower_bound
from testbed.seeding import component_rng

__all__ = ["AuditResult", "canary_audit", "canary_score"]


@dataclass(frozen=True)
class AuditResult:
    party: str
    trials: int
    claimed_epsilon: float
    delta: float
    audited_epsilon: float
    tpr: float
    fpr: float
    threshold: float
    canary_norm: float

    @property
    def consistent(self) -> bool:
        return self.audited_epsilon <= self.claimed_epsilon


def canary_score(envelopes, party: str, direction: np.ndarray) -> float:
    """Largest projection on ``direction`` of any atom ``party`` sent to the server."""
    best = -np.inf
    for e in envelopes:
        if e.sender != party or e.receiver != SERVER:
            continue
        p = e.payload
        arrays = (
            [p.support]
            if isinstance(p, Measure)
            else [a for path, a in iter_arrays(p) if not path.endswith("weights")]
        )
        for a in arrays:
            if a.ndim == 2 and a.shape[1] == direction.shape[0]:
                best = max(best, float(np.max(a @ direction)))
    return best


def _canary(X: np.ndarray, clip_norm: float) -> tuple[np.ndarray, np.ndarray]:
    """A row on the clip sphere pointing away from the data (public construction)."""
    m = X.mean(axis=0)
    u = -m / np.linalg.norm(m) if np.linalg.norm(m) > 1e-12 else np.eye(X.shape[1])[0]
    return clip_norm * u, u


def _choose_threshold(s0: np.ndarray, s1: np.ndarray, delta: float) -> float:
    """Threshold maximising the ε bound on these scores (``s1``: canary present)."""
    best_t, best = float(np.max(s0)), -1.0
    for t in np.unique(np.concatenate([s0, s1])):
        tpr, fpr = float(np.mean(s1 >= t)), float(np.mean(s0 >= t))
        eps = epsilon_lower_bound(tpr, fpr, len(s1), len(s0), delta)
        if eps > best:
            best_t, best = float(t), eps
    return best_t


def canary_audit(world, party: str, trials: int = 200, delta: float = 1e-5) -> AuditResult:
    """Run the distinguishing game ``trials`` times per world on ``world`` (from
    :func:`testbed.runner.build_world`) and return the audited ε beside the claimed one."""
    if party not in world.parties:
        raise TestbedError(f"audit: unknown party {party!r}; parties: {', '.join(world.parties)}")
    if trials < 20:
        raise TestbedError("audit: trials must be at least 20")
    X = np.asarray(world.parties[party].X)
    clip = max(
        [float(getattr(d.config, "clip_norm", 0.0)) for d in world.defenses]
        + [float(np.max(np.linalg.norm(X, axis=1)))]
    )
    canary, u = _canary(X, clip)
    X1 = X.copy()
    X1[0] = canary  # replace-one neighbour: the relation the Gaussian defense is calibrated to
    worlds = {0: world.parties, 1: {**world.parties, party: replace(world.parties[party], X=X1)}}
    seed = world.scenario.seed
    scores = {0: [], 1: []}
    claimed = np.inf
    for i in range(trials):
        for b in (0, 1):
            ledger = PrivacyLedger()
            defs = [
                (d, component_rng(seed, "audit", "defense", i, b, k))
                for k, d in enumerate(world.defenses)
            ]
            bus = Bus(defs, ledger=ledger, parties=worlds[b])
            # the protocol's own randomness (e.g. FedWAD's xi^(0)) is the server's choice, so the
            # observer knows it: it is the same in every trial; only the defenses' noise is fresh
            world.protocol.run(worlds[b], bus, component_rng(seed, "audit", "protocol"))
            scores[b].append(canary_score(bus.transcript, party, u))
            claimed = ledger.epsilon(party, delta)
    s0, s1 = np.asarray(scores[0]), np.asarray(scores[1])
    half = trials // 2
    thr = _choose_threshold(s0[:half], s1[:half], delta)
    tpr, fpr = float(np.mean(s1[half:] >= thr)), float(np.mean(s0[half:] >= thr))
    n = trials - half
    audited = epsilon_lower_bound(tpr, fpr, n, n, delta)
    return AuditResult(party, trials, float(claimed), delta, audited, tpr, fpr, thr, clip)
