"""Text leakage (DESIGN.md, "Metrics"): matching rate and precision@k of retrieved words."""

from __future__ import annotations

import numpy as np

from testbed.scoring.errors import MetricError

__all__ = ["matching_rate", "precision_at_k"]


def matching_rate(words, document) -> float:
    """Share of retrieved words (top-1, one per shared support point) present in the document."""
    words = list(words)
    if not words:
        return 0.0
    doc = set(document)
    return float(np.mean([w in doc for w in words]))


def precision_at_k(ranked, document, k: int) -> float:
    """Mean over shared points of the share of its top-``k`` retrieved words in the document.

    ``ranked`` is one ranked word list per shared point (best first); lists shorter than ``k``
    count their missing slots as misses.
    """
    if k < 1:
        raise MetricError(f"precision_at_k: k must be >= 1, got {k}")
    ranked = list(ranked)
    if not ranked:
        return 0.0
    doc = set(document)
    return float(np.mean([sum(w in doc for w in list(r)[:k]) / k for r in ranked]))
