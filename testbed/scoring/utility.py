"""Task-level utility of a run, against the central (non-private) pipeline on the same data.

Every result row carries ``results["utility"]``: a flat mapping ``name -> value`` (the report
addresses a value as ``utility.<name>``), higher = better for every key, so any of them can be
put on the utility axis of the leakage-versus-utility frontier. Which keys a row has depends on
what the protocol computes:

=========================  =====================================================================
key                        definition (central = the protocol's ``reference()``: exact POT)
=========================  =====================================================================
``distance_accuracy``      :math:`1 - \\min(1, |\\hat D - D|/D)` for the protocol's distance
                           (``wasserstein``; ``sliced_wasserstein`` for the DP sliced baseline)
``distance_rank``          Spearman rank correlation of the upper triangle of the federated
                           dataset-distance matrix with the central one (0 when the federated
                           matrix is constant: it ranks nothing)
``clustering_ari``         adjusted Rand index between the federated clustering of the clients
                           and the same clustering run on the central exact matrix
``contribution_spearman``  Spearman correlation of FedBary's client contributions with the
                           contributions computed from exact distances
``contribution_top_k``     share of the central ranking's top :math:`\\lceil n/2 \\rceil` clients
                           that the federated contributions also rank in their top
                           :math:`\\lceil n/2 \\rceil` (``testbed.scoring.accuracy.top_k_overlap``)
``detection_auc``          ROC-AUC of noisy-row detection (pooled over the parties a detector
                           scores; mean over detectors), against the injected noise masks
``student_accuracy``       accuracy of the distilled student on the held-out test set
``student_accuracy_ratio`` that accuracy divided by the central student's
``coreset_quality``        W2(central coreset, pooled) / W2(federated coreset, pooled), same init
                           and steps, clipped at 1 (1 = as good as the exact-distance coreset)
``nn_accuracy``            held-out accuracy of the 1-NN classifier built from per-client coresets
``fl_accuracy``            clients' held-out accuracy with their cluster's FedAvg model
``fl_accuracy_gain``       that accuracy minus FedAvg-over-all-clients' (same rounds, seeds; in
                           [-1, 1])
=========================  =====================================================================

Utility values are deterministic functions of the seed-determined results, so ``results.json``
stays byte-identical for a seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from testbed.scoring.accuracy import ranking_agreement, spearman

__all__ = ["UTILITY_KEYS", "task_utility"]

UTILITY_KEYS = (
    "distance_accuracy",
    "distance_rank",
    "clustering_ari",
    "contribution_spearman",
    "contribution_top_k",
    "detection_auc",
    "student_accuracy",
    "student_accuracy_ratio",
    "coreset_quality",
    "nn_accuracy",
    "fl_accuracy",
    "fl_accuracy_gain",
)

_DISTANCE_KEYS = ("wasserstein", "sliced_wasserstein")


def _upper(D) -> np.ndarray:
    D = np.asarray(D, dtype=np.float64)
    return D[np.triu_indices(D.shape[0], 1)]


def task_utility(
    protocol: Any,
    estimates: Mapping[str, Any],
    reference: Mapping[str, Any],
    outputs: Mapping[str, Any],
    detection: Mapping[str, Mapping[str, Mapping[str, float]]],
) -> dict[str, float]:
    """The utility keys that apply to this run (see the module docstring)."""
    out: dict[str, float] = {}
    for key in _DISTANCE_KEYS:
        if key in estimates and key in reference and not isinstance(estimates[key], np.ndarray):
            est, ref = float(estimates[key]), float(reference[key])
            err = abs(est - ref) / ref if ref else (0.0 if est == ref else math.inf)
            out["distance_accuracy"] = 1.0 - min(1.0, err)
            break
    if "distance_matrix" in estimates and "distance_matrix" in reference:
        est_u, ref_u = _upper(estimates["distance_matrix"]), _upper(reference["distance_matrix"])
        out["distance_rank"] = spearman(est_u, ref_u)
        clusters = outputs.get("clusters")
        labels = None
        if clusters is not None:
            labels = protocol.central_clusters(np.asarray(reference["distance_matrix"], np.float64))
        if labels is not None:
            from sklearn.metrics import (
                adjusted_rand_score,  # sklearn: report and transcript import scoring
            )

            out["clustering_ari"] = float(adjusted_rand_score(labels, np.asarray(clusters)))
    contrib = sorted(k for k in estimates if k.startswith("contribution_") and k in reference)
    if len(contrib) >= 2:
        rank = ranking_agreement(
            [float(estimates[k]) for k in contrib], [float(reference[k]) for k in contrib]
        )
        out["contribution_spearman"] = rank["spearman"]
        out["contribution_top_k"] = rank["top_k_overlap"]
    aucs = []
    for rows in detection.values():
        row = rows.get("pooled") or (next(iter(rows.values())) if len(rows) == 1 else None)
        if row is not None and row.get("roc_auc") is not None:
            auc = float(row["roc_auc"])
            if math.isfinite(auc):
                aucs.append(auc)
    if aucs:
        out["detection_auc"] = float(np.mean(aucs))
    if "accuracy" in estimates and "macro_f1" in estimates:
        out["student_accuracy"] = float(estimates["accuracy"])
        ref = float(reference.get("accuracy", math.nan))
        if ref and math.isfinite(ref):
            out["student_accuracy_ratio"] = float(estimates["accuracy"]) / ref
    if "coreset_wasserstein" in estimates and "coreset_wasserstein" in reference:
        est, ref = float(estimates["coreset_wasserstein"]), float(reference["coreset_wasserstein"])
        out["coreset_quality"] = min(1.0, ref / est) if est > 0 else 1.0
    if "nn_accuracy" in estimates:
        out["nn_accuracy"] = float(estimates["nn_accuracy"])
    if "accuracy_gain" in estimates and "fedavg_accuracy" in estimates:
        out["fl_accuracy"] = float(estimates["accuracy"])
        out["fl_accuracy_gain"] = float(estimates["accuracy_gain"])
    return out
