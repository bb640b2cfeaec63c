"""Task-level utility keys (testbed.scoring.utility): definitions on hand-made inputs, and every shipped
contract scenario's result row carries at least one key in its documented range."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from protocols.fedwad_clustering import FedWADClustering
from testbed.run.execute import run_and_evaluate
from testbed.run.roster import build_world
from testbed.scenario.loading import load_scenario
from testbed.scoring.utility import UTILITY_KEYS, task_utility

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def test_distance_accuracy_and_rank():
    D = np.array([[0, 1, 2, 3], [1, 0, 4, 5], [2, 4, 0, 6], [3, 5, 6, 0]], float)
    u = task_utility(
        None,
        {"wasserstein": 1.1, "distance_matrix": 2 * D},
        {"wasserstein": 1.0, "distance_matrix": D},
        {},
        {},
    )
    np.testing.assert_allclose(u["distance_accuracy"], 0.9)
    np.testing.assert_allclose(u["distance_rank"], 1.0)  # a rescaled matrix ranks identically
    flipped = np.where(D > 0, 10 - D, 0)
    u = task_utility(None, {"distance_matrix": flipped}, {"distance_matrix": D}, {}, {})
    np.testing.assert_allclose(u["distance_rank"], -1.0)
    # a constant matrix ranks nothing; an error beyond 100 % floors at 0
    u = task_utility(
        None,
        {"sliced_wasserstein": 5.0, "distance_matrix": np.ones((4, 4))},
        {"sliced_wasserstein": 1.0, "distance_matrix": D},
        {},
        {},
    )
    assert u["distance_rank"] == 0.0 and u["distance_accuracy"] == 0.0


# the planted blocks are at distance 10 with 1 inside: the kNN graph falls apart into the two
# clusters, which is the point of the test and which scikit-learn's spectral embedding notes
@pytest.mark.filterwarnings("ignore:Graph is not fully connected:UserWarning")
def test_clustering_contribution_detection_student():
    # clustering: same partition under another labelling = ARI 1
    D = np.full((6, 6), 10.0)
    for block in ((0, 1, 2), (3, 4, 5)):
        for i in block:
            for j in block:
                D[i, j] = 1.0
    np.fill_diagonal(D, 0.0)
    proto = FedWADClustering(FedWADClustering.Config(n_clusters=2))
    u = task_utility(
        proto, {"distance_matrix": D}, {"distance_matrix": D}, {"clusters": [1, 1, 1, 0, 0, 0]}, {}
    )
    np.testing.assert_allclose(u["clustering_ari"], 1.0)
    u = task_utility(
        proto, {"distance_matrix": D}, {"distance_matrix": D}, {"clusters": [1, 0, 1, 0, 1, 0]}, {}
    )
    assert u["clustering_ari"] < 0.2
    est = {f"contribution_c{i}": v for i, v in enumerate([0.3, 0.2, 0.5])}
    ref = {f"contribution_c{i}": v for i, v in enumerate([0.31, 0.1, 0.59])}
    assert task_utility(None, est, ref, {}, {})["contribution_spearman"] == 1.0
    det = {
        "server": {"a": {"roc_auc": 0.9}, "b": {"roc_auc": 0.5}, "pooled": {"roc_auc": 0.7}},
        "seller": {"b": {"roc_auc": 0.8}},
    }
    np.testing.assert_allclose(task_utility(None, {}, {}, {}, det)["detection_auc"], 0.75)
    u = task_utility(None, {"accuracy": 0.8, "macro_f1": 0.7}, {"accuracy": 0.9}, {}, {})
    np.testing.assert_allclose(
        [u["student_accuracy"], u["student_accuracy_ratio"]], [0.8, 0.8 / 0.9]
    )


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in SCENARIOS.glob("contract_tiny*.yaml") if "words" not in p.name),
)
def test_every_contract_row_has_utility(name):
    # Prepare / Execute
    _out = run_and_evaluate(build_world(load_scenario(SCENARIOS / name)))
    results = _out.results
    u = results["utility"]
    # Assert: at least one documented key, each in its range
    assert u and set(u) <= set(UTILITY_KEYS)
    for k, v in u.items():
        signed = ("distance_rank", "contribution_spearman", "clustering_ari", "fl_accuracy_gain")
        lo = -1.0 if k in signed else 0.0
        assert lo <= v <= (math.inf if k == "student_accuracy_ratio" else 1.0), (k, v)
    assert results["privacy_epsilon"] >= 0


def test_contribution_top_k_overlap_counts_the_central_top_half():
    # Prepare: five clients; the central top 3 are c0, c1, c2, the federated top 3 c0, c1, c3
    ref = {f"contribution_c{i}": v for i, v in enumerate([0.5, 0.4, 0.3, 0.2, 0.1])}
    est = {f"contribution_c{i}": v for i, v in enumerate([0.5, 0.4, 0.1, 0.35, 0.05])}
    # Execute
    u = task_utility(None, est, ref, {}, {})
    # Assert: ceil(5/2) = 3 compared, 2 of them shared; Spearman from the ranks by hand
    from testbed.scoring.accuracy import top_k, top_k_overlap

    assert top_k(5) == 3 and top_k(2) == 1 and top_k(1) == 1
    np.testing.assert_allclose(u["contribution_top_k"], 2 / 3)
    ranks_est, ranks_ref = [5, 4, 2, 3, 1], [5, 4, 3, 2, 1]
    d2 = sum((a - b) ** 2 for a, b in zip(ranks_est, ranks_ref))
    np.testing.assert_allclose(u["contribution_spearman"], 1 - 6 * d2 / (5 * 24))
    assert top_k_overlap([1.0, 2.0], [2.0, 1.0], 1) == 0.0
    with pytest.raises(ValueError, match="top-k overlap"):
        top_k_overlap([1.0, 2.0], [1.0, 2.0, 3.0], 1)
