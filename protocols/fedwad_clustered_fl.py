r"""Clustering clients by federated dataset distance, then one federated model per cluster
(FedWAD App. D.3 and D.5; Rakotomamonjy, Nadjahi & Ralaivola [1], Table 1).

1. **Federated OTDD matrix.** Every client augments its rows locally to
   :math:`[x; m_y; \mathrm{vec}(\Sigma_y^{1/2})]` (:func:`testbed.data.otdd.augment`, its own class
   statistics, never sent) and :class:`protocols.fedwad_clustering.FedWADClustering` runs — its own
   code, unchanged, through the same bus (kinds ``fedwad.*``) — FedWAD for every pair on those
   rows, then scikit-learn's spectral clustering of the matrix at the server.
2. **Per-cluster FedAvg.** For every cluster the server runs FedAvg among its members: each round
   it sends the cluster model (``fedwad_clustered_fl.model``), every member trains it locally for
   ``local_epochs`` on its training split and returns its parameters
   (``fedwad_clustered_fl.update``) and its row count (``fedwad_clustered_fl.size``); the server
   averages them weighted by rows.
3. **Baseline.** FedAvg over all clients with the same rounds, seeds and model
   (``fedwad_clustered_fl.fedavg_model`` / ``fedavg_update``), on the same bus so that both use
   the same component rng.

Accuracy is the testbed's score: every client holds out ``test_fraction`` of its rows (split at
the client, seeded) and evaluates the model it ends with (its cluster's, or the global one) there;
``accuracy`` / ``fedavg_accuracy`` are row-weighted means over clients (computed at the clients,
never sent), ``accuracy_gain`` their difference (the paper's Table 1 compares the same two numbers).

Models are the small torch MLP of :mod:`protocols._distill` (float64, CPU, one thread,
deterministic algorithms, ``torch.manual_seed`` from seeds drawn from the component rng).

Deviations from the paper: the paper's FL runs use the FedRep code base (CNNs on MNIST/CIFAR10,
FedRep/FedPer too); here FedAvg only, an MLP on scikit-learn digits and full participation each
round (FedPer/FedRep over all clients and per cluster are computed beside the run, as unaudited
baselines, by ``scripts/personalized_comparison.py`` with :mod:`protocols._personalized`); each client's test split comes from its own rows (the paper's FedRep setting also tests
each client on its own label distribution).

References
----------
.. [1] A. Rakotomamonjy, K. Nadjahi, L. Ralaivola. Federated Wasserstein Distance. ICLR 2024.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from protocols._base import Protocol, ProtocolResult
from protocols.fedwad import FEDWAD_MESSAGES
from protocols.fedwad_clustering import (
    FedWADClustering,
    FedWADClusteringConfig,
    clusters_fit,
    planted_labels,
    spectral_clusters,
)
from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.data.otdd import augment
from testbed.errors import DataError
from testbed.exchange.bus import SERVER, Bus
from testbed.exchange.schema import Array, Message, Num, Parties, Record
from testbed.measure import Measure
from testbed.registry import PROTOCOLS, PluginConfig

__all__ = ["FedWADClusteredFL", "FedWADClusteredFLConfig", "fedavg"]


class FedWADClusteredFLConfig(PluginConfig):
    clustering: FedWADClusteringConfig = Field(
        default_factory=FedWADClusteringConfig,
        validate_default=True,  # its default n_clusters needs as many parties
        description="federated distance matrix + spectral clustering (fedwad_clustering's params)",
    )
    covariance: str = Field(
        "diagonal", pattern="^(diagonal|full)$", description="OTDD augmentation"
    )
    n_classes: int = Field(10, gt=1, description="outputs of the model")
    hidden: list[int] = Field(default_factory=lambda: [32], description="MLP hidden layers")
    rounds: int = Field(10, gt=0, description="FedAvg rounds")
    local_epochs: int = Field(1, gt=0, description="local epochs per round")
    lr: float = Field(0.05, gt=0, description="local SGD learning rate")
    batch_size: int = Field(16, gt=0)
    test_fraction: float = Field(0.25, gt=0, lt=1, description="rows each client holds out")

    @field_validator("clustering")
    @classmethod
    def _fits(cls, v, info: ValidationInfo):
        try:  # a given clustering was checked inside; its default (n_clusters 5) is checked here
            clusters_fit(v.n_clusters, info)
        except ValueError as exc:
            raise ValueError(f"n_clusters: {exc}") from None
        return v


# -- computations at a client (through ``bus.local``)
def _otdd_view(party: PartyData, covariance: str) -> PartyData:
    """The client's rows OTDD-augmented with its own class statistics (computed locally)."""
    if party.y is None:
        raise DataError(f"fedwad_clustered_fl: party {party.name!r} has no labels (OTDD, training)")
    return PartyData(party.name, augment(party.X, party.y, covariance), party.y)


def _on_otdd(party: PartyData, covariance: str, fn, *args):
    return fn(_otdd_view(party, covariance), *args)


def _split(party: PartyData, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(party.n)
    k = max(1, int(round(fraction * party.n)))
    return np.sort(perm[k:]), np.sort(perm[:k])


def _model(d: int, cfg: FedWADClusteredFLConfig):
    from protocols._distill import DTYPE, MLP  # torch: _distill imports it; validate imports this

    return MLP(d, cfg.hidden, cfg.n_classes).to(DTYPE)


def _get(model) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _set(model, weights: Mapping[str, np.ndarray]) -> None:
    import torch  # torch: validate imports this module

    model.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in weights.items()})


def _init_weights(d: int, cfg: FedWADClusteredFLConfig, seed: int) -> dict[str, np.ndarray]:
    from protocols._distill import (
        deterministic_torch,  # torch: _distill imports it; validate imports this
    )

    with deterministic_torch(seed):
        return _get(_model(d, cfg))


def _local_train(
    party: PartyData, weights, cfg: FedWADClusteredFLConfig, split_seed: int, seed: int
) -> tuple[dict[str, np.ndarray], int]:
    """FedAvg client step: ``local_epochs`` of SGD on the training split from ``weights``."""
    import torch  # torch: validate imports this module
    from torch import nn  # torch: validate imports this module

    from protocols._distill import (  # torch: _distill imports it; validate imports this
        DTYPE,
        deterministic_torch,
    )

    train, _ = _split(party, cfg.test_fraction, split_seed)
    X = torch.tensor(np.asarray(party.X, dtype=np.float64)[train], dtype=DTYPE)
    y = torch.tensor(np.asarray(party.y)[train], dtype=torch.long)
    with deterministic_torch(seed):
        model = _model(X.shape[1], cfg)
        _set(model, weights)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        lossf = nn.CrossEntropyLoss()
        gen = torch.Generator().manual_seed(int(seed))
        for _ in range(cfg.local_epochs):
            order = torch.randperm(len(y), generator=gen)
            for s in range(0, len(y), cfg.batch_size):
                idx = order[s : s + cfg.batch_size]
                opt.zero_grad()
                lossf(model(X[idx]), y[idx]).backward()
                opt.step()
        return _get(model), int(len(train))


def _test_accuracy(party: PartyData, weights, cfg, split_seed: int) -> tuple[float, int]:
    """Accuracy of ``weights`` on the client's held-out rows (testbed scoring, never sent)."""
    from protocols._distill import (
        predict_proba,  # torch: _distill imports it; validate imports this
    )

    _, test = _split(party, cfg.test_fraction, split_seed)
    model = _model(party.X.shape[1], cfg)
    _set(model, weights)
    pred = predict_proba(model, np.asarray(party.X)[test]).argmax(1)
    return float(np.mean(pred == np.asarray(party.y)[test])), int(len(test))


def _dim(party: PartyData) -> int:
    return party.X.shape[1]


class _OTDDBus:
    """The bus as the distance step sees it: every local computation runs on the party's
    OTDD-augmented rows (augmented at the party); messages go through the real bus."""

    def __init__(self, bus: Bus, covariance: str):
        self._bus, self._cov = bus, covariance

    def __getattr__(self, name):
        return getattr(self._bus, name)

    def local(self, party, fn, /, *args, **kwargs):
        if kwargs:
            raise TypeError("fedwad_clustered_fl: keyword arguments are not forwarded")
        return self._bus.local(party, _on_otdd, self._cov, fn, *args)

    def local_map(self, calls):
        return self._bus.local_map([(c[0], _on_otdd, self._cov, c[1], *c[2:]) for c in calls])


def fedavg(
    bus: Bus,
    members: Sequence[str],
    weights: dict[str, np.ndarray],
    cfg: FedWADClusteredFLConfig,
    split_seeds: Mapping[str, int],
    rng: np.random.Generator,
    prefix: str,
) -> dict[str, np.ndarray]:
    """FedAvg among ``members`` from ``weights``; every model and update crosses the bus."""
    for r in range(1, cfg.rounds + 1):
        seeds = rng.integers(0, 2**31 - 1, size=len(members))
        for m in members:
            bus.send(SERVER, m, f"fedwad_clustered_fl.{prefix}model", weights, round=r)
        calls = [
            (m, _local_train, weights, cfg, split_seeds[m], int(s)) for m, s in zip(members, seeds)
        ]
        ups, sizes = [], []
        for m, (w, n) in zip(members, bus.local_map(calls)):
            ups.append(
                bus.send(m, SERVER, f"fedwad_clustered_fl.{prefix}update", w, round=r).payload
            )
            sizes.append(
                bus.send(m, SERVER, f"fedwad_clustered_fl.{prefix}size", n, round=r).payload
            )
        share = np.asarray(sizes, dtype=np.float64) / float(np.sum(sizes))
        weights = {k: sum(s * np.asarray(u[k]) for s, u in zip(share, ups)) for k in weights}
    return weights


#: an MLP's weights by torch's parameter names (a closed set: up to 64 layers)
_WEIGHTS = Message(
    Record({f"net.{i}.{p}": Array("f", None) for i in range(64) for p in ("weight", "bias")})
)


@PROTOCOLS.register
class FedWADClusteredFL(Protocol):
    """Federated OTDD -> spectral clusters -> one FedAvg model per cluster, vs FedAvg (App. D.3/D.5)."""

    name = "fedwad_clustered_fl"
    messages = {
        **FEDWAD_MESSAGES,
        "fedwad_clustered_fl.model": _WEIGHTS,
        "fedwad_clustered_fl.update": _WEIGHTS,
        "fedwad_clustered_fl.size": Message(Num("i")),
        "fedwad_clustered_fl.fedavg_model": _WEIGHTS,
        "fedwad_clustered_fl.fedavg_update": _WEIGHTS,
        "fedwad_clustered_fl.fedavg_size": Message(Num("i")),
    }
    released = {
        "estimates": Record(
            ari=Num(),
            distance_matrix=Array("f", ("*", "*")),
            accuracy=Num(),
            fedavg_accuracy=Num(),
            accuracy_gain=Num(),
        ),
        "outputs": Record(
            clients=Parties(),
            clusters=Array("i"),
            planted=Array("i"),
            client_accuracy=Array(),
            client_fedavg_accuracy=Array(),
        ),
    }
    Config = FedWADClusteredFLConfig
    #: measured: scripts/protocol_tolerances.py (largest error over seeds 0-19, plus margin)
    reference_tolerance = {"distance_matrix": 0.35, "ari": 0.1}
    headline_accuracy = ("distance_matrix",)
    min_parties = 2  # fedwad_clustering's (the Config checks clustering.n_clusters)

    def client_releases(
        self, parties: Sequence[str]
    ) -> dict[str, list[tuple[str, int, str]]] | None:
        """The distance step's (``fedwad_clustering``'s): the FedAvg messages carry model
        parameters (arrays, which ``gaussian_measure_noise`` refuses) and row counts (ints)."""
        return FedWADClustering(self.config.clustering).client_releases(parties)

    def needs_labels(self) -> str:
        return "the OTDD class statistics and each cluster's local training"

    def run(self, parties, bus: Bus, rng) -> ProtocolResult:
        cfg = self.config
        names = list(parties)
        rng_d, rng_split, rng_init, rng_cl, rng_avg = rng.spawn(5)
        # 1. federated OTDD matrix + clustering (fedwad_clustering's own code on augmented rows)
        clus = FedWADClustering(cfg.clustering).run(parties, _OTDDBus(bus, cfg.covariance), rng_d)
        labels = np.asarray(clus.outputs["clusters"])
        # 2. one FedAvg per cluster, 3. FedAvg over everyone; same initial model for all
        split_seeds = dict(
            zip(names, (int(s) for s in rng_split.integers(0, 2**31 - 1, len(names))))
        )
        dims = bus.local_map([(n, _dim) for n in names])
        if len(set(dims)) != 1:
            raise DataError(
                f"fedwad_clustered_fl: clients' dimensions differ: {dict(zip(names, dims))}"
            )
        w0 = _init_weights(dims[0], cfg, int(rng_init.integers(0, 2**31 - 1)))
        final: dict[str, dict] = {}
        for k, r in zip(sorted(set(labels.tolist())), rng_cl.spawn(len(set(labels.tolist())))):
            members = [n for n, c in zip(names, labels) if c == k]
            w = fedavg(bus, members, w0, cfg, split_seeds, r, "")
            final.update({m: w for m in members})
        w_all = fedavg(bus, names, w0, cfg, split_seeds, rng_avg, "fedavg_")
        # testbed scoring at the clients (never sent)
        acc = bus.local_map([(n, _test_accuracy, final[n], cfg, split_seeds[n]) for n in names])
        acc_all = bus.local_map([(n, _test_accuracy, w_all, cfg, split_seeds[n]) for n in names])
        a_cl = float(np.average([a for a, _ in acc], weights=[n for _, n in acc]))
        a_fa = float(np.average([a for a, _ in acc_all], weights=[n for _, n in acc_all]))
        est = dict(clus.estimates)
        est.update(accuracy=a_cl, fedavg_accuracy=a_fa, accuracy_gain=a_cl - a_fa)
        return ProtocolResult(
            estimates=est,
            outputs={
                **clus.outputs,
                "client_accuracy": [a for a, _ in acc],
                "client_fedavg_accuracy": [a for a, _ in acc_all],
            },
            mode=f"otdd-{cfg.covariance}/{clus.mode}",
            deviations=(
                *clus.deviations,
                "FedAvg only (paper: FedAvg/FedRep/FedPer from the FedRep code), MLP on the rows, full participation",
                "OTDD augmentation with each client's own class statistics (diagonal by default)",
            ),
        )

    def central_clusters(self, D: np.ndarray) -> np.ndarray:
        return spectral_clusters(D, self.config.clustering, 0)

    def reference(self, parties) -> dict:
        """Exact OTDD matrix (POT on the augmented rows) and the ARI of its clustering."""
        from sklearn.metrics import adjusted_rand_score  # sklearn: validate imports this module

        names = list(parties)
        aug = {n: _otdd_view(parties[n], self.config.covariance) for n in names}
        D = np.zeros((len(names), len(names)))
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                D[i, j] = D[j, i] = tot.wasserstein(
                    Measure(aug[names[i]].X), Measure(aug[names[j]].X)
                )
        truth = planted_labels({n: frozenset(np.unique(parties[n].y).tolist()) for n in names})
        return {
            "ari": float(adjusted_rand_score(truth, self.central_clusters(D))),
            "distance_matrix": D,
        }
