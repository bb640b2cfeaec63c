"""Record-level leakage (DESIGN.md, "Metrics"): coverage@r and the exact-recovery rate of a
reconstruction against private rows, the same up to a transformation, and the same against
population rows (rows of the same distribution that no party holds) with the test that decides
whether a record leak is claimed."""

from __future__ import annotations

import math

import numpy as np

from testbed.scoring.errors import MetricError
from testbed.scoring.transforms import TRANSFORMS, best_fit

__all__ = [
    "EXACT_RECOVERY_REL_TOL",
    "PERMUTATIONS",
    "RECORD_ALPHA",
    "population_comparison",
    "transform_recovery",
    "coverage_at_r",
    "exact_recovery_rate",
    "exact_recovery_tolerance",
    "median_loo_nn_distance",
]


def median_loo_nn_distance(X) -> float:
    """Median leave-one-out nearest-neighbour distance inside ``X`` (the radius of coverage@r)."""
    from sklearn.neighbors import NearestNeighbors  # sklearn: report and transcript import scoring

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
    from sklearn.neighbors import NearestNeighbors  # sklearn: report and transcript import scoring

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


# ----------------------------------------------------------------------------- vs the population
#: permutations of the record-level test, and its level (DESIGN.md: record-level leakage vs the
#: population); the permutations are drawn from a fixed seed, so the same run scores the same
PERMUTATIONS = 999
RECORD_ALPHA = 0.05
#: population subsets (of the target's size) the transform fits are repeated on
TRANSFORM_SUBSETS = 3
#: at most this many private rows (and 10 x as many reconstructed points) enter a transform fit
TRANSFORM_MAX_ROWS = 200


def _excess(value, population) -> float:
    """How much ``value`` (a share of the party's rows) exceeds the same figure on population
    rows, clipped to [0, 1]: the share of rows recovered beyond what rows no party holds get.
    Absolute, not normalised by what was left to gain, so a fit that covers 0.94 of population
    rows and all of the party's reads 0.06, not 1."""
    if value is None or population is None:
        return 0.0
    return float(np.clip(value - population, 0.0, 1.0))


def _subsets(rng, m: int, n: int, k: int) -> list[np.ndarray]:
    return [rng.choice(m, size=n, replace=m < n) for _ in range(k)]


def _nn_tree(truth, recon) -> np.ndarray:
    """Distance from every row of ``truth`` to its nearest finite row of ``recon`` by a k-d tree
    (scipy: distances from differences, no BLAS; used inside the transform fits, which call it
    many times on small arrays)."""
    from scipy.spatial import cKDTree  # scipy: report and transcript import scoring

    R = np.asarray(recon, dtype=np.float64)
    R = R[np.all(np.isfinite(R), axis=1)]
    if len(R) == 0:
        return np.full(len(truth), math.inf)
    return cKDTree(R).query(np.asarray(truth, dtype=np.float64))[0]


def _transform_rates(recon, truth, radius: float, tol: float) -> dict[str, float | None]:
    """Exact recovery and coverage of ``recon`` against ``truth`` after each transform's best
    fit (:func:`testbed.scoring.transforms.best_fit`); None where it cannot be computed."""
    out: dict[str, float | None] = {}
    cache: dict = {}  # one set of matchings of (recon, truth) serves every transform
    for kind in TRANSFORMS:
        exact, mapped, _ = best_fit(
            recon, truth, kind, lambda M: float(np.mean(_nn_tree(truth, M) <= tol)), cache
        )
        out[f"exact_recovery_{kind}"] = exact
        out[f"coverage_{kind}"] = (
            None if mapped is None else float(np.mean(_nn_tree(truth, mapped) <= radius))
        )
    return out


def transform_recovery(recon, truth, radius: float | None = None, rng=None) -> dict:
    """Exact recovery and coverage@r up to a similarity transform and up to an affine map
    (:mod:`testbed.scoring.transforms`), from at most :data:`TRANSFORM_MAX_ROWS` private rows
    (drawn with ``rng``, default a fixed seed) and 10 × as many reconstructed points."""
    rng = np.random.default_rng(0) if rng is None else rng
    X = np.asarray(truth, dtype=np.float64)
    R = np.asarray(recon, dtype=np.float64)
    radius = median_loo_nn_distance(X) if radius is None else float(radius)
    tol = exact_recovery_tolerance(X)
    if R.ndim != 2 or len(R) > 10 * TRANSFORM_MAX_ROWS:
        return _transform_rates(np.empty((0, X.shape[1])), X, radius, tol)
    if len(X) > TRANSFORM_MAX_ROWS:
        X = X[np.sort(rng.choice(len(X), TRANSFORM_MAX_ROWS, replace=False))]
    return _transform_rates(R, X, radius, tol)


def population_comparison(recon, truth, population, row: dict, rng=None) -> dict:
    """The record-level figures of ``row`` (coverage, exact recovery, and up to each transform)
    computed again against population rows — rows of the same distribution that no party holds
    (:mod:`testbed.data.population`) — and the test of a record leak.

    Population figures are means over subsets of the population of the target's size (the radius
    and tolerance stay the target's). ``record_p``: one-sided permutation p-value of the mean
    truncated distance ``mean_i min(d_i, r)`` from the private rows to the reconstruction, against
    random subsets of the pooled private and population rows (:data:`PERMUTATIONS`, fixed seed).
    ``record_leak`` = 1 when that p-value is below :data:`RECORD_ALPHA` or a transform's exact
    recovery exceeds the largest it reaches on any population subset; ``record_leakage`` = the
    largest excess of a record figure over its population figure (:func:`_excess`) when
    ``record_leak``, else 0."""
    rng = np.random.default_rng(0) if rng is None else rng
    X = np.asarray(truth, dtype=np.float64)
    P = np.asarray(population, dtype=np.float64)
    n, r, tol = len(X), row["coverage_r"], row["exact_recovery_tol"]
    dx, dp = _nn_distance(X, recon), _nn_distance(P, recon)
    subs = np.stack(_subsets(rng, len(P), n, PERMUTATIONS))
    cov_p = (dp[subs] <= r).mean(axis=1)
    out: dict = {
        "population_rows": float(len(P)),
        "coverage_population": float(cov_p.mean()),
        "coverage_population_hi": float(np.quantile(cov_p, 0.975)),
        "exact_recovery_population": float((dp[subs] <= tol).mean()),
    }
    pool = np.minimum(np.concatenate([dx, dp]), r)
    t_x = float(pool[:n].mean())
    t_perm = np.concatenate(
        [
            pool[np.argsort(rng.random((len(c), pool.size)), axis=1)[:, :n]].mean(axis=1)
            for c in np.array_split(
                np.arange(PERMUTATIONS), max(1, PERMUTATIONS * pool.size // 2_000_000)
            )
        ]
    )
    out["record_p"] = float((1 + np.sum(t_perm <= t_x)) / (PERMUTATIONS + 1))
    leak = out["record_p"] < RECORD_ALPHA
    excess = [
        _excess(row.get("coverage"), out["coverage_population"]),
        _excess(row.get("exact_recovery"), out["exact_recovery_population"]),
    ]
    if any(row.get(f"exact_recovery_{k}") is not None for k in TRANSFORMS):
        fits = [
            transform_recovery(recon, P[s], r, rng)
            for s in _subsets(rng, len(P), min(n, TRANSFORM_MAX_ROWS), TRANSFORM_SUBSETS)
        ]
        for k in TRANSFORMS:
            for m in ("exact_recovery", "coverage"):
                vals = [f[f"{m}_{k}"] for f in fits if f[f"{m}_{k}"] is not None]
                if not vals or row.get(f"{m}_{k}") is None:
                    continue
                out[f"{m}_{k}_population"] = float(np.mean(vals))
                excess.append(_excess(row[f"{m}_{k}"], out[f"{m}_{k}_population"]))
                if m == "exact_recovery" and row[f"{m}_{k}"] > max(vals):
                    leak = True
    out["record_leak"] = float(leak)
    out["record_leakage"] = float(max(excess)) if leak else 0.0
    return out
