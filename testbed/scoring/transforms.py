"""Recovery up to a transformation (DESIGN.md, "Metrics").

A reconstruction that is a scaled, rotated, permuted or affinely masked copy of the private rows
lies near no row, so a distance tolerance misses it. Here the reconstruction ``R`` is first matched
to the private rows ``X`` by optimal transport (POT), then mapped onto them by

- the best **similarity** transform ``x ≈ s r Q + t`` (scale, orthogonal map, translation; the
  orthogonal Procrustes problem, :func:`scipy.linalg.orthogonal_procrustes`), and, separately,
- the best **affine** map ``x ≈ r A + b`` (least squares, :func:`numpy.linalg.lstsq`),

and the mapped reconstruction is scored like a raw one (exact recovery, coverage@r).

Matching: a transform moves points far from their originals, so plain OT on coordinates may pair
the wrong rows. Three matchings are tried and the best fit kept: exact OT (``ot.emd``) on the
coordinates (small scalings, noise, translations); Gromov–Wasserstein (``ot.gromov``) on the
pairwise distances, which an isometry or a uniform scale leaves unchanged (permuted columns,
rotations); and Gromov–Wasserstein on the distances after whitening each side by its own
covariance, which an invertible affine map leaves unchanged up to an orthogonal map.

A fit has parameters: with ``n`` matched rows in ``d`` dimensions an affine map fits any ``n <=
d + 1`` points exactly, and a similarity any two, so those rates are only computed from ``n >= d +
2`` (affine) and ``n >= 3`` (similarity) rows; below that they are ``None``. The scorer also fits
the same transform to population rows (:mod:`testbed.scoring.records`), so a fit that is good by
chance reads as no record leak.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "TRANSFORMS",
    "FittedMap",
    "best_fit",
    "fit_affine",
    "fit_similarity",
    "gw_plan",
    "matchings",
]

#: the transforms, in the order they are reported (keys suffix ``_similarity``, ``_affine``)
TRANSFORMS = ("similarity", "affine")

#: the Gromov-Wasserstein matchings' stopping thresholds (relative and absolute change of the
#: loss between conditional-gradient steps). POT's default, 1e-9, took 2.5-3x as many steps on
#: the demo's TriangleWad reconstructions (200 rows against ~900 points: 9-11 s a party) for the
#: same rates; the published figures are checked by ``make docs-check``.
GW_TOL = 1e-5


def _min_rows(kind: str, d: int) -> int:
    return 3 if kind == "similarity" else d + 2


class FittedMap:
    """A fitted map ``R -> R @ M + c`` (callable) and what it undoes, in words."""

    def __init__(self, M: np.ndarray, c: np.ndarray, what: str):
        self.M, self.c, self.what = M, c, what

    def __call__(self, R) -> np.ndarray:
        return np.asarray(R, dtype=np.float64) @ self.M + self.c


def _describe_similarity(s: float, Q: np.ndarray, shift: np.ndarray, scale: float) -> str:
    """The disguise a similarity fit undoes: scale, column permutation or rotation, shift."""
    parts = []
    if abs(s - 1) > 1e-9:
        parts.append(f"scale x{1 / s:.6g}" if s > 0 else "scale")
    A = np.abs(Q)
    if np.allclose(Q, np.eye(len(Q)), atol=1e-6):
        pass
    elif np.allclose(A, np.round(A), atol=1e-6):
        parts.append("public column permutation" + ("" if np.all(Q > -1e-6) else " and signs"))
    else:
        parts.append("rotation")
    if np.linalg.norm(shift) > 1e-9 * max(scale, 1e-300):
        parts.append("translation")
    return "similarity transform (" + (", ".join(parts) or "identity") + ")"


def fit_similarity(src: np.ndarray, dst: np.ndarray) -> FittedMap:
    """The map ``r -> s r Q + t`` minimising ``sum ||s src_i Q + t - dst_i||²`` (Procrustes)."""
    from scipy.linalg import orthogonal_procrustes  # scipy: report and transcript import scoring

    ms, md = src.mean(0), dst.mean(0)
    a, b = src - ms, dst - md
    Q, sv = orthogonal_procrustes(a, b)  # a @ Q ≈ b
    norm = float((a * a).sum())
    s = float(sv / norm) if norm > 0 else 1.0
    c = md - s * ms @ Q
    what = _describe_similarity(s, Q, c, float(np.abs(dst).max(initial=0.0)))
    return FittedMap(s * Q, c, what)


def fit_affine(src: np.ndarray, dst: np.ndarray) -> FittedMap:
    """The map ``r -> r A + b`` minimising ``sum ||src_i A + b - dst_i||²`` (least squares)."""
    S = np.hstack([src, np.ones((src.shape[0], 1))])
    coef, *_ = np.linalg.lstsq(S, dst, rcond=None)
    return FittedMap(coef[:-1], coef[-1], "affine map")


_FIT = {"similarity": fit_similarity, "affine": fit_affine}


def _whiten(Z: np.ndarray) -> np.ndarray:
    Zc = Z - Z.mean(0)
    cov = Zc.T @ Zc / max(len(Z), 1)
    w, V = np.linalg.eigh(cov)
    keep = w > 1e-12 * max(float(w.max()), 1e-300)
    return Zc @ V[:, keep] / np.sqrt(w[keep])


def _dist(Z: np.ndarray) -> np.ndarray:
    from scipy.spatial.distance import cdist  # scipy: report and transcript import scoring

    D = cdist(Z, Z)
    m = float(D.mean())
    return D / m if m > 0 else D


def gw_plan(C1: np.ndarray, C2: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The Gromov-Wasserstein plan (square loss) between two spaces given by their distance
    matrices, POT's conditional gradient stopping at :data:`GW_TOL` (its loss is then within
    0.1 % of the converged one: ``tests/test_verdicts.py``)."""
    import ot  # ot: report and transcript import scoring

    return ot.gromov.gromov_wasserstein(C1, C2, p, q, "square_loss", tol_rel=GW_TOL, tol_abs=GW_TOL)


def matchings(R: np.ndarray, X: np.ndarray) -> list[np.ndarray]:
    """Candidate pairings of the rows of ``X`` (n) with points of ``R`` (m): for each, an n × d
    array whose row i is the barycentric image of ``X[i]``'s transport plan row in ``R``."""
    import ot  # ot: report and transcript import scoring

    n, m = len(X), len(R)
    p, q = np.full(n, 1.0 / n), np.full(m, 1.0 / m)
    plans = [ot.emd(p, q, ot.dist(X, R))]
    plans.append(gw_plan(_dist(X), _dist(R), p, q))
    Xw, Rw = _whiten(X), _whiten(R)
    if Xw.shape[1] and Rw.shape[1]:
        plans.append(gw_plan(_dist(Xw), _dist(Rw), p, q))
    out = []
    for G in plans:
        mass = G.sum(1, keepdims=True)
        if np.all(mass > 0):
            out.append((G @ R) / mass)
    return out


def best_fit(
    R, X, kind: str, score, cache: dict | None = None
) -> tuple[float | None, np.ndarray | None, str]:
    """The best ``score(mapped R)`` (larger is better) over :func:`matchings` for the transform
    ``kind``, the mapped reconstruction and what the map undoes (words); ``(None, None, "")``
    when ``X`` has too few rows for the fit to mean anything or ``R`` fewer than 2 finite
    points. ``cache``: a dict kept across calls on the SAME ``R`` and ``X`` (one per pair), so
    the matchings (two Gromov-Wasserstein solves) are computed once for every transform."""
    R = np.asarray(R, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    if R.ndim != 2 or X.ndim != 2 or R.shape[1] != X.shape[1]:
        return None, None, ""
    R = R[np.all(np.isfinite(R), axis=1)]
    if len(X) < _min_rows(kind, X.shape[1]) or len(R) < 2:
        return None, None, ""
    best, best_map, what = -np.inf, None, ""
    if cache is None or "matchings" not in cache:
        found = matchings(R, X)
        if cache is not None:
            cache["matchings"] = found
    else:
        found = cache["matchings"]
    for matched in found:
        fitted = _FIT[kind](matched, X)
        mapped = fitted(R)
        s = score(mapped)
        if s > best:
            best, best_map, what = s, mapped, fitted.what
    return (None, None, "") if best_map is None else (float(best), best_map, what)
