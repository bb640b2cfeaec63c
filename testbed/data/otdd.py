"""Label-aware dataset distance (OTDD, Alvarez-Melis & Fusi 2020) and its vector form.

FedWAD (App. D.3, eq. 13–14), FedBary (Sec. 4.1) and TriangleWad (Sec. 3.5.1) need vectors, so
they replace the OTDD ground cost by the Euclidean cost on augmented rows

.. math:: \\tilde x = [x;\\ m_y;\\ \\mathrm{vec}(\\Sigma_y^{1/2})],

with the class-conditional mean :math:`m_y` and covariance :math:`\\Sigma_y` of the row's label,
estimated on **the party's own data only** (:func:`augment`). :func:`otdd_distance` is the central
reference with the label-aware ground cost

.. math:: d((x,y),(x',y'))^2 = \\|x-x'\\|^2 + \\|m_y-m_{y'}\\|^2 + D(\\Sigma_y, \\Sigma_{y'}),

where ``label_cost`` selects :math:`D`: ``"eq14"`` = :math:`\\|\\Sigma_y-\\Sigma_{y'}\\|_F^2` (FedWAD
eq. 14 as printed), ``"bures"`` = the squared Bures distance (the exact Gaussian :math:`W_2^2`),
``"augmented"`` = :math:`\\|\\Sigma_y^{1/2}-\\Sigma_{y'}^{1/2}\\|_F^2`, which is what the augmented
vectors compute (so ``otdd_distance(..., "augmented")`` equals W2 between augmented datasets).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from testbed import ot as tot
from testbed.errors import DataError
from testbed.measure import Measure

__all__ = ["augment", "class_statistics", "otdd_distance"]

Covariance = Literal["diagonal", "full"]


def _psd_sqrt(S: np.ndarray) -> np.ndarray:
    w, V = np.linalg.eigh((S + S.T) / 2)
    return (V * np.sqrt(np.clip(w, 0.0, None))) @ V.T


def class_statistics(
    X: np.ndarray, y: np.ndarray, covariance: Covariance = "diagonal"
) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per class label: ``(mean, covariance, covariance^1/2)`` of the rows with that label.

    Covariances use ``ddof=0`` (a class with one row has covariance 0). With
    ``covariance="diagonal"`` the covariance is the diagonal matrix of per-feature variances.
    """
    if y is None:
        raise DataError("OTDD augmentation needs labels (the dataset has none)")
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y).reshape(-1)
    if y.shape[0] != X.shape[0]:
        raise DataError(f"OTDD: {X.shape[0]} rows but {y.shape[0]} labels")
    out = {}
    for c in np.unique(y):
        Xc = X[y == c]
        m = Xc.mean(0)
        if covariance == "diagonal":
            var = Xc.var(0)
            S, R = np.diag(var), np.diag(np.sqrt(var))
        else:
            D = Xc - m
            S = D.T @ D / Xc.shape[0]
            R = _psd_sqrt(S)
        out[int(c)] = (m, S, R)
    return out


def augment(X: np.ndarray, y: np.ndarray, covariance: Covariance = "diagonal") -> np.ndarray:
    """Rows :math:`[x; m_y; \\mathrm{vec}(\\Sigma_y^{1/2})]` with statistics of this dataset only.

    Width ``3d`` for ``"diagonal"`` (only the diagonal of :math:`\\Sigma_y^{1/2}`), ``2d + d^2``
    for ``"full"``.
    """
    stats = class_statistics(X, y, covariance)
    X = np.asarray(X, dtype=np.float64)
    rows = []
    for xi, yi in zip(X, np.asarray(y).reshape(-1)):
        m, _, R = stats[int(yi)]
        tail = np.diag(R) if covariance == "diagonal" else R.reshape(-1)
        rows.append(np.concatenate([xi, m, tail]))
    return np.asarray(rows)


def _label_cost(
    s1: dict, s2: dict, label_cost: str
) -> tuple[dict[int, int], dict[int, int], np.ndarray]:
    from ot.gaussian import bures_distance  # ot: validate imports otdd

    c1, c2 = sorted(s1), sorted(s2)
    L = np.zeros((len(c1), len(c2)))
    for i, a in enumerate(c1):
        m1, S1, R1 = s1[a]
        for j, b in enumerate(c2):
            m2, S2, R2 = s2[b]
            mean_term = float(np.sum((m1 - m2) ** 2))
            if label_cost == "eq14":
                cov_term = float(np.sum((S1 - S2) ** 2))
            elif label_cost == "augmented":
                cov_term = float(np.sum((R1 - R2) ** 2))
            elif label_cost == "bures":
                cov_term = float(bures_distance(S1, S2)) ** 2
            else:
                raise ValueError(f"label_cost must be eq14, bures or augmented, got {label_cost!r}")
            L[i, j] = mean_term + max(cov_term, 0.0)
    return {c: i for i, c in enumerate(c1)}, {c: j for j, c in enumerate(c2)}, L


def otdd_distance(
    X1: np.ndarray,
    y1: np.ndarray,
    X2: np.ndarray,
    y2: np.ndarray,
    covariance: Covariance = "diagonal",
    label_cost: Literal["eq14", "bures", "augmented"] = "augmented",
) -> float:
    """Central label-aware OTDD (exact POT), class statistics of each dataset from itself.

    Returns :math:`\\sqrt{\\min_P \\langle P, C\\rangle}` with
    :math:`C_{ij} = \\|x_i-x'_j\\|^2 + W^2(\\alpha_{y_i}, \\alpha_{y'_j})` (see module docstring).
    """
    s1 = class_statistics(X1, y1, covariance)
    s2 = class_statistics(X2, y2, covariance)
    idx1, idx2, L = _label_cost(s1, s2, label_cost)
    r1 = np.array([idx1[int(c)] for c in np.asarray(y1).reshape(-1)])
    r2 = np.array([idx2[int(c)] for c in np.asarray(y2).reshape(-1)])
    M = tot.cost_matrix(X1, X2) + L[np.ix_(r1, r2)]
    mu, nu = Measure(np.asarray(X1, float)), Measure(np.asarray(X2, float))
    return tot.wasserstein(mu, nu, M=M)
