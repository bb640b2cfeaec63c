"""Attacks for any protocol on whatever numbers it released (our attacks; issue 51).

Neither reads a protocol's message kinds or payload layout, so both apply to every protocol,
a third-party one included, and give a new protocol's scorecard a measured figure from its
first run.

**What they read** (:func:`release_points`): every numeric array the observer (or a colluder)
saw in any message a target sent, of any kind, in the payload and in the numeric ``meta``
fields: a Measure's support (its weights are not points), arrays, numeric lists. Each array
whose trailing dimension is the data's dimension ``public.dim`` gives its rows as candidate
points (an array of shape ``(..., d)`` is read as ``(-1, d)``; a vector of length ``d`` is one
point, e.g. a mean); non-finite rows are dropped. Cost matrices whose width happens to be ``d``
are read as points too: the attacks do not know which numbers are rows, and the scorer's
population comparison keeps such noise from reading as a record leak.

``release_points`` (reconstruction, kind ``points``): the candidate points of each target. A
target that released fewer points than ``d + 1`` (too few to show a spread: a mean, a few
moments) gets the public prior sample moved onto their centroid, so the guess has the spread
of the domain and the centre the release gives away. Scored like any reconstruction
(distributional leakage against the prior-only attacker, coverage and the population
comparison that decides a record leak).

``release_membership`` (membership, kind ``scores``): a reference-model test in the manner of
LiRA and RMIA, on the release itself instead of shadow models. The public prior sample plays the
reference population: for a candidate row :math:`c` of the testbed's membership pool,

.. math:: s(c) = \\frac{\\mu_c - \\log(\\epsilon + d(c, R))}{\\sigma_c}

with :math:`d(\\cdot, R)` the distance to the nearest released point and :math:`\\mu_c,
\\sigma_c` the mean and standard deviation of :math:`\\log(\\epsilon + d(z, R))` over the
``neighbours`` reference draws :math:`z` nearest :math:`c`: how much closer the release comes to
the candidate than it comes, by chance, to population points where the candidate lies (an
offline LiRA with a Gaussian fit of the non-member statistic per candidate). :math:`\\epsilon` is
a thousandth of the reference sample's median nearest-neighbour distance. Baseline: chance.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from pydantic import Field

from attacks._base import (
    POINTS_FLOOR,
    POINTS_PER_ROW,
    Attack,
    AttackConfig,
    AttackOutput,
    _targets,
    observed,
)
from attacks._base import membership_candidates as _candidates
from testbed.exchange.bus import PublicInfo, View
from testbed.measure import Measure
from testbed.registry import ATTACKS

__all__ = [
    "ReleaseMembership",
    "ReleaseMembershipConfig",
    "ReleasePoints",
    "ReleasePointsConfig",
    "reference_scores",
    "release_points",
]

_MAX_DEPTH = 32


def _numeric(obj: Any, depth: int = 0) -> Iterator[np.ndarray]:
    """Every numeric array in a payload or meta value (Measure weights left out)."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(obj, Measure):
        yield np.asarray(obj.support)
    elif isinstance(obj, np.ndarray):
        if obj.ndim >= 1 and obj.dtype.kind in "iuf":
            yield obj
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from _numeric(v, depth + 1)
    elif isinstance(obj, (list, tuple)) and obj:
        try:
            a = np.asarray(obj)
        except (ValueError, TypeError, OverflowError):
            a = None
        if a is not None and a.dtype.kind in "iuf":
            yield a
        elif a is None or a.dtype.kind == "O":
            for v in obj:
                yield from _numeric(v, depth + 1)


def release_points(view: View, target: str, dim: int) -> np.ndarray | None:
    """The candidate points ``target`` released to the observer (or its colluders): the rows of
    every numeric array of trailing dimension ``dim`` in the payloads and numeric meta of the
    messages it sent, in message order; None when there is none."""
    if dim < 1:
        return None
    rows = []
    for e in observed(view):
        if e.sender != target:
            continue
        for a in (*_numeric(e.payload), *_numeric(dict(e.meta))):
            if a.shape[-1] == dim and a.size:
                rows.append(np.asarray(a, dtype=np.float64).reshape(-1, dim))
    if not rows:
        return None
    P = np.vstack(rows)
    P = P[np.all(np.isfinite(P), axis=1)]
    return P if P.shape[0] else None


def _cap(points: np.ndarray, public: PublicInfo, target: str) -> np.ndarray:
    """At most the rows a reconstruction may have (:data:`attacks._base.POINTS_PER_ROW` per
    row of the target, :data:`~attacks._base.POINTS_FLOOR` in any case): the latest kept, as a
    protocol's later messages are the ones closest to convergence."""
    n = (public.extra.get("sizes") or {}).get(target)
    limit = POINTS_FLOOR if n is None else max(POINTS_PER_ROW * int(n), POINTS_FLOOR)
    return points[-limit:]


class ReleasePointsConfig(AttackConfig):
    spread: bool = Field(
        True,
        description="when a target released fewer than d + 1 points, move the public prior "
        "sample onto their centroid (the spread of the domain, the centre of the release)",
    )


@ATTACKS.register
class ReleasePoints(Attack):
    """Guess a party's rows as every point-shaped number it released (any protocol)."""

    name = "release_points"
    Config = ReleasePointsConfig
    protocols = ("*",)
    output_kinds = ("points",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        out = []
        for target in _targets(view, public):
            P = release_points(view, target, int(public.dim))
            if P is None:
                continue
            filled = self.config.spread and P.shape[0] <= public.dim and public.prior is not None
            if filled:
                prior = np.asarray(public.prior, dtype=np.float64)
                P = prior - prior.mean(axis=0) + P.mean(axis=0)
            out.append(
                AttackOutput(
                    kind="points",
                    target=target,
                    points=_cap(P, public, target),
                    meta={"released_points": int(P.shape[0]), "prior_spread": bool(filled)},
                )
            )
        return out


def _knn(A: np.ndarray, B: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.neighbors import NearestNeighbors  # sklearn: validate imports attack modules

    return NearestNeighbors(n_neighbors=k).fit(B).kneighbors(A)


def reference_scores(
    candidates: np.ndarray, release: np.ndarray, reference: np.ndarray, neighbours: int = 20
) -> np.ndarray:
    """Per candidate: how many standard deviations closer the release comes to it than to the
    ``neighbours`` reference draws nearest it (log distances; module docstring)."""
    C = np.asarray(candidates, dtype=np.float64)
    R = np.asarray(release, dtype=np.float64)
    Z = np.asarray(reference, dtype=np.float64)
    if len(Z) < 3:
        raise ValueError(f"the reference sample has {len(Z)} rows; at least 3 are needed")
    scale = float(np.median(_knn(Z, Z, 2)[0][:, 1]))
    eps = 1e-3 * (scale if scale > 0 else 1.0)
    log_c = np.log(eps + _knn(C, R, 1)[0][:, 0])
    log_z = np.log(eps + _knn(Z, R, 1)[0][:, 0])
    _, idx = _knn(C, Z, min(int(neighbours), len(Z)))
    near = log_z[idx]
    sd = near.std(axis=1)
    floor = max(float(log_z.std()), 1e-12) * 1e-3  # neighbours all at one distance
    return (near.mean(axis=1) - log_c) / np.maximum(sd, floor)


class ReleaseMembershipConfig(AttackConfig):
    neighbours: int = Field(
        20,
        ge=2,
        le=10_000,
        description="reference draws nearest each candidate that calibrate its score",
    )


@ATTACKS.register
class ReleaseMembership(Attack):
    """Membership scores of pool candidates from any release: a reference-calibrated test."""

    name = "release_membership"
    Config = ReleaseMembershipConfig
    protocols = ("*",)
    output_kinds = ("scores",)
    contract_scenario = "contract_tiny_membership.yaml"

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        if public.prior is None or len(public.prior) < 3:
            return []
        out = []
        for t in public.parties:
            cand = _candidates(public, t)
            if cand is None or t == view.observer or t in view.colluders:
                continue
            R = release_points(view, t, cand.shape[1])
            if R is None:
                continue
            out.append(
                AttackOutput(
                    kind="scores",
                    target=t,
                    scores=reference_scores(cand, R, public.prior, self.config.neighbours),
                    meta={"candidates": cand, "released_points": int(R.shape[0])},
                )
            )
        return out
