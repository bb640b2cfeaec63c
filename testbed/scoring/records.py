"""Record-level leakage (DESIGN.md, "Metrics"): coverage@r and the exact-recovery rate of a
reconstruction against private rows."""

from __future__ import annotations

import math

import numpy as np

from testbed.scoring.errors import MetricError

__all__ = [
    "EXACT_RECOVERY_REL_TOL",
    "coverage_at_r",
    "exact_recovery_rate",
    "exact_recovery_tolerance",
    "median_loo_nn_distance",
]


def median_loo_nn_distance(X) -> float:
    """Median leave-one-out nearest-neighbour distance inside ``X`` (the radius of coverage@r)."""
    from sklearn.neighbors import NearestNeighbors

    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] < 2:
        raise MetricError(f"median leave-one-out distance needs >= 2 rows, got {X.shape[0]}")
    dist, _ = NearestNeighbors(n_neighbors=2).fit(X).kneighbors(X)
    return float(np.median(dist[:, 1]))


def _nn_distance(truth, recon, k: int = 4) -> np.ndarray:
    """Distance from every row of ``truth`` to its nearest row of ``recon``.

    The neighbour search (sklearn) may use the expansion |x|² − 2x·y + |y|², whose rounding
    error (~1e-8 relative to |x|², i.e. ~1e-6 for rows of norm 60) depends on the BLAS and its
    thread count. The ``k`` nearest candidates it returns are therefore re-measured as
    ``‖x − y‖`` from the difference, which is exact to the rows' own rounding and the same for
    any number of threads."""
    from sklearn.neighbors import NearestNeighbors

    truth = np.asarray(truth, dtype=np.float64)
    recon = np.asarray(recon, dtype=np.float64)
    if recon.ndim != 2 or recon.shape[0] == 0:
        return np.full(truth.shape[0], math.inf)
    if recon.shape[1] != truth.shape[1]:
        raise MetricError(
            f"reconstruction has dimension {recon.shape[1]}, private data {truth.shape[1]}"
        )
    finite = np.all(np.isfinite(recon), axis=1)
    if not finite.any():
        return np.full(truth.shape[0], math.inf)
    R = recon[finite]
    kk = min(k, R.shape[0])
    _, idx = NearestNeighbors(n_neighbors=kk).fit(R).kneighbors(truth)
    diff = truth[:, None, :] - R[idx]
    return np.sqrt(np.einsum("ikd,ikd->ik", diff, diff)).min(axis=1)


def coverage_at_r(recon, truth, r: float | None = None) -> dict[str, float]:
    """coverage@r: share of private rows with a reconstructed point within ``r``.

    ``r`` defaults to the median leave-one-out nearest-neighbour distance inside ``truth``
    (DESIGN.md), so a reconstruction as good as "another private row" covers about half.
    """
    radius = median_loo_nn_distance(truth) if r is None else float(r)
    d = _nn_distance(truth, recon)
    return {"coverage": float(np.mean(d <= radius)), "coverage_r": radius}


#: exact recovery: a private row counts as recovered when a reconstructed point lies within
#: this fraction of the private data's median row norm (DESIGN.md, Metrics)
EXACT_RECOVERY_REL_TOL = 1e-6


def exact_recovery_tolerance(truth, rel_tol: float = EXACT_RECOVERY_REL_TOL) -> float:
    """``rel_tol`` × the median Euclidean row norm of ``truth`` (the data's scale); when every
    row is zero, ``rel_tol`` itself (an absolute floor, so the tolerance is never 0)."""
    med = float(np.median(np.linalg.norm(np.asarray(truth, dtype=np.float64), axis=1)))
    return rel_tol * (med if med > 0 else 1.0)


def exact_recovery_rate(recon, truth, rel_tol: float = EXACT_RECOVERY_REL_TOL) -> float:
    """Share of private rows with a reconstructed point within
    :func:`exact_recovery_tolerance` (``rel_tol`` × median private row norm), with distances
    computed from differences (independent of BLAS threads; see :func:`_nn_distance`)."""
    tol = exact_recovery_tolerance(truth, rel_tol)
    return float(np.mean(_nn_distance(truth, recon) <= tol))
