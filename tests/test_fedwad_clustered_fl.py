"""FedWAD App. D.3/D.5: federated OTDD matrix -> clusters -> per-cluster FedAvg vs FedAvg."""

from __future__ import annotations

import numpy as np

from protocols.fedwad import FedWADConfig
from protocols.fedwad_clustered_fl import (
    FedWADClusteredFL,
    FedWADClusteredFLConfig,
    _init_weights,
    _local_train,
    fedavg,
)
from protocols.fedwad_clustering import FedWADClusteringConfig
from testbed.data.datasets import Dataset, PartyData
from testbed.data.otdd import otdd_distance
from testbed.data.partitions import ClassSubsets, ClassSubsetsConfig
from testbed.exchange.bus import Bus, PrivacyGuard

PAIRS = [[0, 1], [2, 3], [4, 5], [2, 3], [0, 1], [4, 5]]


def _parties(seed=0):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    names = [f"client_{i}" for i in range(len(PAIRS))]
    split = ClassSubsets(ClassSubsetsConfig(classes=PAIRS)).split(
        Dataset(X, y), names, np.random.default_rng(seed)
    )
    return {n: PartyData(n, X[i], y[i]) for n, i in split.items()}


def _cfg(**kw):
    base = dict(
        clustering=FedWADClusteringConfig(
            n_clusters=3, fedwad=FedWADConfig(support_size=10, iterations=4, init_scale=1.0)
        ),
        rounds=5,
        lr=0.1,
        hidden=[16],
    )
    base.update(kw)
    return FedWADClusteredFLConfig(**base)


def test_reference_matrix_is_the_label_aware_otdd():
    # the central matrix (POT on augmented rows) equals OTDD with the label-aware ground cost
    parties = _parties()
    ref = FedWADClusteredFL(_cfg()).reference(parties)
    a, b = parties["client_0"], parties["client_1"]
    want = otdd_distance(a.X, a.y, b.X, b.y, "diagonal", "augmented")
    np.testing.assert_allclose(ref["distance_matrix"][0, 1], want, rtol=1e-8)
    assert ref["ari"] == 1.0


def test_fedavg_round_is_the_size_weighted_mean_of_local_updates():
    # Prepare
    parties = dict(list(_parties().items())[:2])
    cfg = _cfg(rounds=1)
    w0 = _init_weights(64, cfg, 3)
    bus = Bus(parties=parties)
    seeds = {"client_0": 11, "client_1": 12}
    rng = np.random.default_rng(5)
    # Execute
    got = fedavg(bus, list(parties), w0, cfg, seeds, rng, "")
    # Assert: recompute with the same seeds
    draws = np.random.default_rng(5).integers(0, 2**31 - 1, size=2)
    ups = [_local_train(parties[n], w0, cfg, seeds[n], int(s)) for n, s in zip(parties, draws)]
    n = np.array([u[1] for u in ups], dtype=float)
    for k in w0:
        want = sum(ni / n.sum() * u[0][k] for ni, u in zip(n, ups))
        np.testing.assert_allclose(got[k], want, atol=1e-12)
    kinds = [e.kind for e in bus.transcript]
    assert kinds.count("fedwad_clustered_fl.update") == 2
    assert kinds.count("fedwad_clustered_fl.model") == 2


def test_clusters_recovered_and_per_cluster_models_beat_fedavg():
    # Prepare: 6 label-skewed digits clients, 3 planted pairs; guard on
    parties = _parties()
    proto = FedWADClusteredFL(_cfg())
    bus = Bus(guard=PrivacyGuard.for_parties(parties), parties=parties)
    # Execute
    res = proto.run(parties, bus, np.random.default_rng(0))
    ref = proto.reference(parties)
    # Assert: clustering as the exact matrix's, a real accuracy gain, distances ranked alike
    from scipy.stats import spearmanr

    assert res.estimates["ari"] == ref["ari"] == 1.0
    assert res.estimates["accuracy"] >= 0.9
    assert res.estimates["accuracy_gain"] >= 0.05
    iu = np.triu_indices(6, 1)
    D, R = res.estimates["distance_matrix"], ref["distance_matrix"]
    assert spearmanr(D[iu], R[iu]).statistic >= 0.8
    # FedWAD's estimate is an upper bound of the exact distance (triangle inequality)
    assert np.all(D[iu] >= R[iu] * (1 - 1e-9))
    kinds = {e.kind for e in bus.transcript}
    assert {"fedwad.xi", "fedwad_clustered_fl.update", "fedwad_clustered_fl.fedavg_update"} <= kinds


def test_same_seed_same_result():
    parties = dict(list(_parties().items())[:4])
    cfg = _cfg(
        rounds=2,
        clustering=FedWADClusteringConfig(
            n_clusters=2, fedwad=FedWADConfig(support_size=5, iterations=2)
        ),
    )
    runs = []
    for _ in range(2):
        bus = Bus(parties=parties)
        res = FedWADClusteredFL(cfg).run(parties, bus, np.random.default_rng(3))
        runs.append(
            (res.estimates["accuracy"], res.estimates["fedavg_accuracy"], bus.transcript.digest())
        )
    assert runs[0] == runs[1]
