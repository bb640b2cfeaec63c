"""Pinned metric definitions (DESIGN.md, "Metrics"). Accuracy metrics live here; leakage metrics
are added beside them and are the only code that sees ground truth."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["mean_ci", "relative_error"]


def relative_error(estimate: float, exact: float) -> float:
    """:math:`|\\hat W - W| / W` (``inf`` when W = 0 and the estimate is not)."""
    if exact == 0:
        return 0.0 if estimate == 0 else math.inf
    return abs(estimate - exact) / abs(exact)


def mean_ci(values, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and a Student-t ``level`` interval over seeds: ``(mean, low, high)``."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return (math.nan, math.nan, math.nan)
    m = float(v.mean())
    if v.size == 1:
        return (m, m, m)
    from scipy import stats

    half = float(stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return (m, m - half, m + half)


# ----------------------------------------------------------------------------- leakage
def w2_leakage(
    points, weights, truth, baseline_points=None, baseline_weights=None
) -> dict[str, float]:
    """Distributional leakage: ``W2(nu_hat, nu)``, its ratio to the prior-only baseline's
    ``W2(baseline, nu)`` (lower = more leakage) and ``1 - ratio`` clipped to [0, 1]."""
    from testbed import ot as tot
    from testbed.measure import Measure

    nu = Measure(truth)
    w = tot.wasserstein(Measure(points, weights), nu)
    out = {"w2": w}
    if baseline_points is not None:
        wb = tot.wasserstein(Measure(baseline_points, baseline_weights), nu)
        ratio = w / wb if wb > 0 else math.inf
        out.update(
            {"w2_baseline": wb, "w2_ratio": ratio, "leakage": float(np.clip(1.0 - ratio, 0.0, 1.0))}
        )
    return out


def score_attack(output, baseline, world) -> dict:
    """Score one :class:`~attacks.AttackOutput` against ground truth (held by ``world``)."""
    truth = world.parties[output.target]
    if output.kind == "points":
        return w2_leakage(
            output.points,
            output.weights,
            truth.X,
            None if baseline is None else baseline.points,
            None if baseline is None else baseline.weights,
        )
    raise NotImplementedError(f"no scorer for attack output kind {output.kind!r}")
