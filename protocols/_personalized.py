"""Personalised federated learning baselines (FedAvg, FedPer, FedRep) at small CPU scale.

The FedWAD paper (*Federated Wasserstein Distance*, Sec. 4 and App. D.2/D.5) compares its
coreset 1-NN classifier with two personalised methods and runs them per cluster of clients:

- **FedPer** (Arivazhagan et al., *Federated learning with personalization layers*): every
  client trains the whole model locally; the server averages the **body** (all layers but the
  last), each client keeps its own **head** (the last linear layer).
- **FedRep** (Collins et al., *Exploiting shared representations for personalized federated
  learning*): every round a client first trains its own head for ``head_epochs`` with the body
  frozen, then the body for ``local_epochs`` with the head frozen; the server averages the body.
- **FedAvg**: the whole model averaged (the common baseline).

These are comparison baselines, not audited protocols: they run on arrays in one process, no
message crosses the testbed's bus, and nothing here is attacked. The model is the MLP of
:mod:`protocols._distill` (float64, CPU, one thread, deterministic algorithms); averaging is
weighted by training rows and every client takes part in every round. ``groups`` runs the method
separately inside each group of clients (the paper's "clustered" variants).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["METHODS", "ClientSplit", "personalized_accuracy", "train_personalized"]

METHODS = ("fedavg", "fedper", "fedrep")


@dataclass(frozen=True)
class ClientSplit:
    """One client's training rows and the rows its personal model is tested on."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def _epochs(model, params, X, y, epochs: int, lr: float, batch: int, gen) -> None:
    import torch  # torch: validate imports this module
    from torch import nn  # torch: validate imports this module

    opt = torch.optim.SGD(params, lr=lr)
    lossf = nn.CrossEntropyLoss()
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=gen)
        for s in range(0, len(y), batch):
            idx = order[s : s + batch]
            opt.zero_grad()
            lossf(model(X[idx]), y[idx]).backward()
            opt.step()


def _run_group(
    clients: Sequence[ClientSplit],
    method: str,
    *,
    n_classes: int,
    hidden: Sequence[int],
    rounds: int,
    local_epochs: int,
    head_epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
) -> list[float]:
    import torch  # torch: validate imports this module

    from protocols._distill import (  # torch: _distill imports it; validate imports this
        DTYPE,
        MLP,
        deterministic_torch,
        predict_proba,
    )

    d = clients[0].X_train.shape[1]
    with deterministic_torch(seed):
        model = MLP(d, list(hidden), n_classes).to(DTYPE)
        head_keys = {k for k in model.state_dict() if k.startswith(f"net.{len(model.net) - 1}.")}
        start = {k: v.clone() for k, v in model.state_dict().items()}
        # personal heads start equal (the common initial model); the body is shared
        heads = [{k: start[k].clone() for k in head_keys} for _ in clients]
        shared = {k: v.clone() for k, v in start.items()}
        gen = torch.Generator().manual_seed(int(seed))
        data = [
            (
                torch.tensor(np.asarray(c.X_train, dtype=np.float64), dtype=DTYPE),
                torch.tensor(np.asarray(c.y_train), dtype=torch.long),
            )
            for c in clients
        ]
        sizes = np.array([len(c.y_train) for c in clients], dtype=np.float64)
        share = sizes / sizes.sum()
        averaged = set(start) if method == "fedavg" else set(start) - head_keys
        for _ in range(rounds):
            ups = []
            for i, (X, y) in enumerate(data):
                state = dict(shared)
                if method != "fedavg":
                    state.update(heads[i])
                model.load_state_dict(state)
                head = list(model.net[-1].parameters())
                body = [p for m in list(model.net)[:-1] for p in m.parameters()]
                if method == "fedrep":
                    _epochs(model, head, X, y, head_epochs, lr, batch_size, gen)
                    _epochs(model, body, X, y, local_epochs, lr, batch_size, gen)
                else:
                    _epochs(model, model.parameters(), X, y, local_epochs, lr, batch_size, gen)
                new = {k: v.detach().clone() for k, v in model.state_dict().items()}
                if method != "fedavg":
                    heads[i] = {k: new[k] for k in head_keys}
                ups.append(new)
            for k in averaged:
                shared[k] = sum(float(s) * u[k] for s, u in zip(share, ups))
        accs = []
        for i, c in enumerate(clients):
            state = dict(shared)
            if method != "fedavg":
                state.update(heads[i])
            model.load_state_dict(state)
            pred = predict_proba(model, c.X_test).argmax(1)
            accs.append(float(np.mean(pred == np.asarray(c.y_test))))
    return accs


def train_personalized(
    clients: Sequence[ClientSplit],
    method: str,
    *,
    groups: Sequence[int] | None = None,
    n_classes: int = 10,
    hidden: Sequence[int] = (32,),
    rounds: int = 10,
    local_epochs: int = 1,
    head_epochs: int = 5,
    lr: float = 0.1,
    batch_size: int = 16,
    seed: int = 0,
) -> list[float]:
    """Per-client test accuracy of ``method`` (one of :data:`METHODS`) after ``rounds`` rounds.

    With ``groups`` (one label per client) the method runs independently inside every group,
    each from the same initial model (seeded by ``seed``)."""
    if method not in METHODS:
        raise ValueError(f"method {method!r} not in {METHODS}")
    if not clients:
        raise ValueError("no clients")
    labels = np.zeros(len(clients), dtype=int) if groups is None else np.asarray(groups)
    if len(labels) != len(clients):
        raise ValueError(f"{len(labels)} group labels for {len(clients)} clients")
    out = [0.0] * len(clients)
    for g in sorted(set(labels.tolist())):
        idx = [i for i, x in enumerate(labels) if x == g]
        accs = _run_group(
            [clients[i] for i in idx],
            method,
            n_classes=n_classes,
            hidden=hidden,
            rounds=rounds,
            local_epochs=local_epochs,
            head_epochs=head_epochs,
            lr=lr,
            batch_size=batch_size,
            seed=seed,
        )
        for i, a in zip(idx, accs):
            out[i] = a
    return out


def personalized_accuracy(clients: Sequence[ClientSplit], accs: Sequence[float]) -> float:
    """Test-row-weighted mean of per-client accuracies (each client tested on its own rows)."""
    n = np.array([len(c.y_test) for c in clients], dtype=np.float64)
    return float(np.average(np.asarray(accs, dtype=np.float64), weights=n))
