"""Which trade-off figure a leakage metric is drawn in: one figure per family of metrics (a view
per metric and attack), and the leakage metrics kept to the tables."""

from __future__ import annotations

from testbed.scoring.names import Metric

__all__ = ["FAMILIES", "NOT_PLOTTED", "family_of"]

#: the trade-off figure a leakage metric is drawn in (one figure per family, a view per metric
#: and attack); a metric of no family goes to "other leakage"
FAMILIES: dict[str, tuple[str, ...]] = {
    "distributional leakage": (Metric.LEAKAGE, Metric.LEAKAGE_RAW, Metric.W2_RATIO),
    "reconstruction": (
        Metric.RECORD_LEAKAGE,
        Metric.COVERAGE,
        Metric.EXACT_RECOVERY,
        Metric.COVERAGE_SIMILARITY,
        Metric.EXACT_RECOVERY_SIMILARITY,
        Metric.COVERAGE_AFFINE,
        Metric.EXACT_RECOVERY_AFFINE,
    ),
    "membership": (
        Metric.AUC,
        Metric.ADVANTAGE,
        Metric.TPR_AT_1PCT_FPR,
        Metric.TPR_AT_0_1PCT_FPR,
        Metric.EPS_LOWER,
    ),
    "attribute/label": (Metric.TV,),
    "text retrieval": (Metric.MATCHING_RATE, Metric.MATCHING_RATE_ANY, Metric.PRECISION_AT_K),
}
#: leakage metrics in the tables but in no figure: raw w2's scale is the data's (w2_ratio is its
#: plotted, normalised form)
NOT_PLOTTED = (Metric.W2,)


def family_of(metric: str) -> str:
    return next((f for f, ms in FAMILIES.items() if metric in ms), "other leakage")
