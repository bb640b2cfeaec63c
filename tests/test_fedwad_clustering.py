"""FedWAD App. D.5: pairwise federated distances -> spectral clustering -> ARI."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from protocols.fedwad import FedWADConfig
from protocols.fedwad_clustering import (
    FedWADClustering,
    FedWADClusteringConfig,
    planted_labels,
    spectral_clusters,
)
from testbed import ot as tot
from testbed.data.datasets import Dataset, PartyData
from testbed.data.partitions import ClassSubsets, ClassSubsetsConfig
from testbed.exchange.bus import Bus, PrivacyGuard
from testbed.measure import Measure
from testbed.run.execute import run_and_evaluate
from testbed.run.roster import build_world
from testbed.scenario.loading import load_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
PAIRS = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


def _clients(seed: int, per_pair: int = 2, rows: int = 40) -> dict[str, PartyData]:
    """Digits clients, ``per_pair`` per class pair, ``rows`` rows each, order shuffled."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(seed)
    classes = [p for p in PAIRS for _ in range(per_pair)]
    order = rng.permutation(len(classes))
    classes = [classes[i] for i in order]
    names = [f"client_{i}" for i in range(len(classes))]
    part = ClassSubsets(ClassSubsetsConfig(classes=classes, sizes=[rows] * len(classes)))
    split = part.split(Dataset(X.astype(float), y), names, rng)
    return {n: PartyData(n, X[idx].astype(float), y[idx]) for n, idx in split.items()}


def _proto(**kw) -> FedWADClustering:
    fw = FedWADConfig(support_size=8, iterations=3, init_scale=5.0)
    return FedWADClustering(FedWADClusteringConfig(fedwad=fw, **kw))


@pytest.mark.parametrize("setting", ["affinity", "sparse_graph"])
def test_recovers_planted_pairs(setting):
    # Prepare: 10 clients, 2 per class pair
    parties = _clients(0)
    proto = _proto(setting=setting, n_neighbors=3)  # the paper's Sparse G. (3)
    guard = PrivacyGuard.for_parties(parties)
    bus = Bus(guard=guard, parties=parties)
    # Execute
    res = proto.run(parties, bus, np.random.default_rng(0))
    # Assert
    assert res.estimates["ari"] >= 0.9
    D = res.estimates["distance_matrix"]
    np.testing.assert_allclose(D, D.T)
    assert np.all(np.diag(D) == 0) and np.all(D[~np.eye(10, dtype=bool)] > 0)
    # every message is FedWAD's own, 45 pairs of it; the guard saw no private row
    assert {e.protocol for e in bus.transcript} == {"fedwad"}
    assert sum(e.kind == "fedwad.xi_final" for e in bus.transcript) == 2 * 45
    assert all(guard.find(e.payload) is None for e in bus.transcript)


@pytest.mark.parametrize("seed", [1, 2])
def test_guard_finds_no_private_row(seed):
    parties = _clients(seed, per_pair=1, rows=20)
    proto = _proto()
    guard = PrivacyGuard.for_parties(parties)
    bus = Bus(guard=guard, parties=parties)
    proto.run(parties, bus, np.random.default_rng(seed))
    assert all(guard.find(e.payload) is None for e in bus.transcript)


def test_reference_is_the_exact_matrix():
    parties = _clients(3, per_pair=1, rows=20)
    ref = _proto().reference(parties)
    names = list(parties)
    D = ref["distance_matrix"]
    np.testing.assert_allclose(
        D[0, 3], tot.wasserstein(Measure(parties[names[0]].X), Measure(parties[names[3]].X))
    )
    assert ref["ari"] == pytest.approx(1.0)  # 5 clients, 5 distinct pairs


def test_planted_labels_and_clusters_of_a_block_matrix():
    truth = planted_labels({"a": frozenset({0, 1}), "b": frozenset({2}), "c": frozenset({0, 1})})
    assert truth.tolist() == [0, 1, 0]
    D = np.array([[0, 9, 1, 9], [9, 0, 9, 1], [1, 9, 0, 9], [9, 1, 9, 0]], float)
    # the linear kernel gives the farthest pairs affinity 0: two components, as scikit-learn says
    with pytest.warns(UserWarning, match="not fully connected"):
        labels = spectral_clusters(D, FedWADClusteringConfig(n_clusters=2), 0)
    assert labels[0] == labels[2] != labels[1] == labels[3]


@pytest.mark.parametrize("setting", ["affinity", "sparse_graph"])
def test_as_many_clusters_as_clients_cluster_each_alone_without_a_warning(setting):
    # ARPACK cannot give k >= N eigenvectors: scikit-learn warned (affinity) or raised a
    # TypeError (sparse graph) before the solver was chosen for it
    rng = np.random.default_rng(0)
    P = rng.normal(size=(5, 3))
    D = np.linalg.norm(P[:, None] - P[None], axis=2)
    cfg = FedWADClusteringConfig(n_clusters=5, setting=setting)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        labels = spectral_clusters(D, cfg, 0)
    assert sorted(labels.tolist()) == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_shipped_scenario_20_clients():
    sc = load_scenario(SCENARIOS / "fedwad_clustering.yaml")
    _out = run_and_evaluate(build_world(sc))
    results = _out.results
    assert results["accuracy"]["ari"]["estimate"] >= 0.9
    assert results["accuracy"]["distance_matrix"]["signed_relative_error"] > 0  # fact 3: upward


def test_pair_distances_are_the_pairs_of_the_full_run_with_the_same_seeds():
    # Prepare: the matrix as the protocol used to make it (every pair's generator spawned at once)
    from itertools import combinations

    from protocols.fedwad import FedWAD

    parties = _clients(seed=2, per_pair=1, rows=15)
    proto = _proto()
    names = list(parties)
    pairs = list(combinations(range(len(names)), 2))
    rngs = np.random.default_rng(4).spawn(len(pairs) + 1)
    want = np.zeros((len(names), len(names)))
    bus = Bus(parties=parties)
    for (i, j), r in zip(pairs, rngs[1:]):
        fw = FedWAD(proto.config.fedwad.model_copy(update={"clients": [names[i], names[j]]}))
        want[i, j] = want[j, i] = fw.run(parties, bus, r).estimates["wasserstein"]
    # Execute: the protocol's run, and the first 7 pairs alone
    got = proto.run(parties, Bus(parties=parties), np.random.default_rng(4))
    rng = np.random.default_rng(4)
    rng.spawn(1)  # the clustering's generator comes first
    part, done = proto.pair_distances(parties, Bus(parties=parties), rng, limit=7)
    # Assert: bit for bit
    np.testing.assert_array_equal(got.estimates["distance_matrix"], want)
    assert done == 7
    for i, j in pairs[:7]:
        assert part[i, j] == part[j, i] == want[i, j]
    assert all(part[i, j] == 0 for i, j in pairs[7:])
