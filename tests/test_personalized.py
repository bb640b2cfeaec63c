"""FedAvg / FedPer / FedRep baselines (protocols._personalized) on small synthetic clients."""

from __future__ import annotations

import numpy as np
import pytest

from protocols._personalized import ClientSplit, personalized_accuracy, train_personalized

FAST = {"hidden": (8,), "rounds": 6, "local_epochs": 2, "head_epochs": 3, "lr": 0.2}


def _clients(conflict: bool, n: int = 60, seed: int = 0) -> list[ClientSplit]:
    """Two clients on the same 2-D blobs; with ``conflict`` client 1 swaps the labels, so no
    single model fits both but a shared body with personal heads does."""
    rng = np.random.default_rng(seed)
    out = []
    for c in range(2):
        y = rng.integers(0, 2, size=2 * n)
        X = rng.normal(size=(2 * n, 2)) * 0.3 + np.where(y[:, None] == 1, 2.0, -2.0)
        if conflict and c == 1:
            y = 1 - y
        out.append(ClientSplit(X[:n], y[:n], X[n:], y[n:]))
    return out


def test_personal_heads_fit_conflicting_clients_where_fedavg_cannot():
    # Prepare: the same inputs, opposite labels on the two clients
    clients = _clients(conflict=True)
    # Execute
    acc = {
        m: personalized_accuracy(clients, train_personalized(clients, m, n_classes=2, **FAST))
        for m in ("fedavg", "fedper", "fedrep")
    }
    # Assert: one global model is right for at most one client; personal heads fit both
    assert acc["fedavg"] <= 0.75
    assert acc["fedper"] >= 0.95 and acc["fedrep"] >= 0.95


def test_groups_train_each_group_apart():
    # Prepare: conflicting clients, each in its own group -> FedAvg per group is local training
    clients = _clients(conflict=True)
    # Execute
    accs = train_personalized(clients, "fedavg", groups=[0, 1], n_classes=2, **FAST)
    # Assert
    assert min(accs) >= 0.95


def test_same_seed_same_accuracies_and_bad_method_rejected():
    clients = _clients(conflict=False)
    a = train_personalized(clients, "fedrep", n_classes=2, seed=3, **FAST)
    assert a == train_personalized(clients, "fedrep", n_classes=2, seed=3, **FAST)
    with pytest.raises(ValueError, match="method"):
        train_personalized(clients, "fedprox", n_classes=2)
