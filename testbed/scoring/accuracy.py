"""Accuracy metrics (DESIGN.md, "Metrics"): relative error against the central exact W, mean
with a 95 % interval over seeds (clipped to [0, 1] for a metric of :data:`UNIT_METRICS`, on the
log scale for one that is never negative: :func:`summarise`), and noisy-point detection quality."""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "NONNEGATIVE_METRICS",
    "UNIT_METRICS",
    "detection_metrics",
    "mean_ci",
    "positive_ci",
    "ranking_agreement",
    "relative_error",
    "spearman",
    "summarise",
    "top_k",
    "top_k_overlap",
]

#: metrics that live in [0, 1]: their intervals over seeds are clipped to that range
UNIT_METRICS = {
    "leakage",
    "coverage",
    "exact_recovery",
    "matching_rate",
    "precision_at_k",
    "auc",
    "tpr_at_1pct_fpr",
    "tpr_at_0_1pct_fpr",
    "advantage",
    "tv",
    "matching_rate_any",
    "record_leakage",
    "coverage_similarity",
    "exact_recovery_similarity",
    "coverage_affine",
    "exact_recovery_affine",
    # task utility (testbed.scoring.utility) that lives in [0, 1]
    "distance_accuracy",
    "detection_auc",
    "student_accuracy",
    "coreset_quality",
    "nn_accuracy",
    "fl_accuracy",
    "contribution_top_k",
}


def relative_error(estimate: float, exact: float) -> float:
    """:math:`|\\hat W - W| / W` (``inf`` when W = 0 and the estimate is not)."""
    if exact == 0:
        return 0.0 if estimate == 0 else math.inf
    return abs(estimate - exact) / abs(exact)


def spearman(a, b) -> float:
    """Spearman rank correlation of two score vectors (0 when either is constant: a constant
    ranking carries no information about the other)."""
    from scipy.stats import spearmanr  # scipy: report and transcript import scoring

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    return float(spearmanr(a, b).statistic)


def top_k(n: int) -> int:
    """How many of ``n`` ranked clients the top-k overlap compares: the upper half,
    :math:`\\lceil n/2 \\rceil` (a client selection that keeps the better half)."""
    return max(1, math.ceil(n / 2))


def top_k_overlap(estimate, reference, k: int) -> float:
    """Share of the ``k`` highest-scoring entries of ``reference`` that are also among the ``k``
    highest of ``estimate`` (ties broken by position, the same way for both)."""
    e, r = np.asarray(estimate, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if e.shape != r.shape or e.ndim != 1:
        raise ValueError(f"top-k overlap: {e.shape} estimates for {r.shape} references")
    k = min(int(k), e.size)
    if k < 1:
        return math.nan
    best_e = set(np.argsort(-e, kind="stable")[:k].tolist())
    best_r = set(np.argsort(-r, kind="stable")[:k].tolist())
    return len(best_e & best_r) / k


def ranking_agreement(estimate, reference) -> dict[str, float]:
    """How well the federated scores rank the clients as the central scores do: ``spearman``
    (:func:`spearman`), ``top_k_overlap`` (:func:`top_k_overlap` with ``top_k`` =
    :func:`top_k` of the number of clients ``n``)."""
    n = int(np.asarray(reference).size)
    k = top_k(n)
    return {
        "spearman": spearman(estimate, reference),
        "top_k_overlap": top_k_overlap(estimate, reference, k),
        "top_k": k,
        "n": n,
    }


def mean_ci(values, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and a Student-t ``level`` interval over seeds: ``(mean, low, high)``."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return (math.nan, math.nan, math.nan)
    m = float(v.mean())
    if v.size == 1:
        return (m, m, m)
    from scipy import stats  # scipy: report and transcript import scoring

    half = float(stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return (m, m - half, m + half)


#: metrics that are never negative (but unbounded above): their intervals over seeds are
#: formed on the log scale (:func:`positive_ci`), so a lower bound is never below zero
NONNEGATIVE_METRICS = {
    "relative_error",
    "w2",
    "w2_ratio",
    "w2_baseline",
    "eps_lower",
    "mu_lower",
    "messages",
    "bytes",
    "seconds",
}


def positive_ci(values, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and a ``level`` interval over seeds for a quantity that is never negative: the
    Student-t interval of the mean formed on the log scale (delta method: log m ± t·se/m),
    ``(m·exp(−h), m·exp(+h))`` with ``h = t·se/m``. It is never below zero, is wider above the
    mean than below (as the spread of a positive quantity is), and agrees with the Student-t
    interval when the spread is small against the mean; all-zero values give ``(0, 0, 0)``."""
    m, lo, hi = mean_ci(values)
    if not math.isfinite(m) or m <= 0 or lo == hi:
        return (m, lo, hi)
    h = (hi - m) / m
    return (m, m * math.exp(-h), m * math.exp(h))


def summarise(vals: list[float], metric: str) -> tuple[float, float, float]:
    """(mean, lo, hi): mean and 95 % Student-t interval over seeds, clipped to [0, 1] for a
    metric that lives there, on the log scale for one that is never negative
    (:data:`NONNEGATIVE_METRICS`); no guarantee (inf) on every seed stays inf."""
    if all(math.isinf(v) and v > 0 for v in vals):
        return (math.inf, math.inf, math.inf)
    if metric in NONNEGATIVE_METRICS:
        return positive_ci(vals)
    m, lo, hi = mean_ci(vals)
    if metric in UNIT_METRICS and math.isfinite(m):
        lo, hi = max(lo, 0.0), min(hi, 1.0)
    return (m, lo, hi)


def detection_metrics(scores, mask) -> dict[str, float]:
    """Noisy-point detection quality of per-row ``scores`` (higher = more likely noisy) against
    the ground-truth boolean ``mask``: ROC-AUC (sklearn), precision and recall when flagging the
    top-k rows with k = the true number of noisy rows, and precision/recall of the sign rule
    (score > 0) that the FedBary/TriangleWad papers use."""
    from sklearn.metrics import roc_auc_score  # sklearn: report and transcript import scoring

    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(mask, dtype=bool).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"detection: {s.size} scores for {y.size} rows")
    k = int(y.sum())
    out: dict[str, float] = {"rows": float(y.size), "noisy": float(k)}
    if k == 0 or k == y.size:
        out["roc_auc"] = math.nan  # undefined with one class only
    else:
        out["roc_auc"] = float(roc_auc_score(y, s))
    if k > 0:
        top = np.argsort(-s, kind="stable")[:k]
        tp = float(y[top].sum())
        out["precision_at_rate"] = tp / k
        out["recall_at_rate"] = tp / k
    flagged = s > 0
    out["flagged_at_zero"] = float(flagged.sum())
    out["precision_at_zero"] = float(y[flagged].mean()) if flagged.any() else math.nan
    out["recall_at_zero"] = float(flagged[y].mean()) if k > 0 else math.nan
    return out
