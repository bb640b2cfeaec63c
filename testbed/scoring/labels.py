"""Label-distribution leakage (DESIGN.md, "Metrics"): total-variation distance between label
histograms."""

from __future__ import annotations

import numpy as np

from testbed.scoring.errors import MetricError

__all__ = ["tv_distance"]


def tv_distance(p, q) -> float:
    """Total-variation distance :math:`\\frac12 \\sum_i |p_i - q_i|` between two histograms.

    Both are normalised to sum 1; the shorter one is padded with zeros."""
    p = np.asarray(p, dtype=np.float64).ravel()
    q = np.asarray(q, dtype=np.float64).ravel()
    for name, h in (("p", p), ("q", q)):
        if np.any(h < 0) or not np.all(np.isfinite(h)) or h.sum() <= 0:
            raise MetricError(f"tv_distance: {name} must be a nonnegative histogram with mass")
    n = max(p.size, q.size)
    p = np.pad(p, (0, n - p.size)) / p.sum()
    q = np.pad(q, (0, n - q.size)) / q.sum()
    return float(np.clip(0.5 * np.abs(p - q).sum(), 0.0, 1.0))
