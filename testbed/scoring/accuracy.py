"""Accuracy metrics (DESIGN.md, "Metrics"): relative error against the central exact W, mean
with a 95 % interval over seeds (clipped to [0, 1] for a metric of :data:`UNIT_METRICS`:
:func:`summarise`), and noisy-point detection quality."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["UNIT_METRICS", "detection_metrics", "mean_ci", "relative_error", "summarise"]

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
}


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


def summarise(vals: list[float], metric: str) -> tuple[float, float, float]:
    """(mean, lo, hi): mean and 95 % Student-t interval over seeds, clipped to [0, 1] for a
    metric that lives there; no guarantee (inf) on every seed stays inf."""
    if all(math.isinf(v) and v > 0 for v in vals):
        return (math.inf, math.inf, math.inf)
    m, lo, hi = mean_ci(vals)
    if metric in UNIT_METRICS and math.isfinite(m):
        lo, hi = max(lo, 0.0), min(hi, 1.0)
    return (m, lo, hi)


def detection_metrics(scores, mask) -> dict[str, float]:
    """Noisy-point detection quality of per-row ``scores`` (higher = more likely noisy) against
    the ground-truth boolean ``mask``: ROC-AUC (sklearn), precision and recall when flagging the
    top-k rows with k = the true number of noisy rows, and precision/recall of the sign rule
    (score > 0) that the FedBary/TriangleWad papers use."""
    from sklearn.metrics import roc_auc_score

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
