"""Distributional leakage (DESIGN.md, "Metrics"): W2 of a reconstruction to the private data,
next to the prior-only baseline's W2."""

from __future__ import annotations

import math

import numpy as np

from testbed import ot as tot
from testbed.measure import Measure

__all__ = ["population_leakage", "w2_leakage"]


def w2_leakage(
    points, weights, truth, baseline_points=None, baseline_weights=None, baseline_w2=None
) -> dict[str, float]:
    """Distributional leakage: ``W2(nu_hat, nu)``, its ratio to the prior-only baseline's
    ``W2(baseline, nu)`` (``w2_ratio``, lower = more leakage, unclipped), the normalised leakage
    ``leakage_raw = 1 - ratio`` (negative when the attack is worse than the baseline) and
    ``leakage`` = that clipped to [0, 1], with ``leakage_clipped`` = 1.0 when the clip changed it.
    ``baseline_w2``: ``W2(baseline, nu)`` when the caller has it already (it is not recomputed)."""
    nu = Measure(truth)
    w = tot.wasserstein(Measure(points, weights), nu)
    out = {"w2": w}
    if baseline_points is not None:
        if baseline_w2 is None:
            wb = tot.wasserstein(Measure(baseline_points, baseline_weights), nu)
        else:
            wb = float(baseline_w2)
        ratio = w / wb if wb > 0 else math.inf
        raw = 1.0 - ratio
        clipped = float(np.clip(raw, 0.0, 1.0))
        out.update(
            {
                "w2_baseline": wb,
                "w2_ratio": ratio,
                "leakage_raw": raw,
                "leakage": clipped,
                "leakage_clipped": float(clipped != raw),
            }
        )
    return out


def population_leakage(
    points, weights, population, n: int, baseline_points, baseline_weights, rng, k: int = 5
) -> dict[str, float]:
    """The normalised leakage the same reconstruction scores against population rows (rows of
    the same distribution that no party holds): ``1 - W2(nu_hat, P) / W2(baseline, P)`` averaged
    over ``k`` random population subsets ``P`` of the target's size ``n``. A reconstruction that
    scores as well against the population as against the party shows distributional inference,
    not a leak of the party's rows."""
    P = np.asarray(population, dtype=np.float64)
    ws, raws = [], []
    for _ in range(k):
        sub = P[rng.choice(len(P), size=n, replace=len(P) < n)]
        got = w2_leakage(points, weights, sub, baseline_points, baseline_weights)
        ws.append(got["w2"])
        if "leakage_raw" in got:
            raws.append(got["leakage_raw"])
    out = {"w2_population": float(np.mean(ws))}
    if raws:
        out["leakage_population"] = float(np.clip(np.mean(raws), 0.0, 1.0))
    return out
