"""Client clustering from federated dataset distances (FedWAD App. D.5).

Rakotomamonjy, Nadjahi & Ralaivola [1] compute the distance between every pair of clients with
FedWAD, cluster the clients with scikit-learn's spectral clustering on that matrix and use the
clusters to boost federated learning. This protocol runs :class:`protocols.fedwad.FedWAD` (its own
code, unchanged) for each pair through the same bus, assembles the distance matrix at the server and
clusters it:

- ``affinity``: the rescaled matrix :math:`A = 1 - D/\\max D` (larger = more similar) used as a
  precomputed affinity (the paper's "Affinity" setting; ``kernel: gaussian`` uses
  :math:`\\exp(-D^2 / \\mathrm{median}(D)^2)` instead);
- ``sparse_graph``: ``affinity="precomputed_nearest_neighbors"`` — a binary affinity from each
  client's ``n_neighbors`` nearest clients (the paper's "Sparse G. (3)" and "(5)").

Estimates: ``ari`` — adjusted Rand index of the clusters against the planted structure (the set of
labels each client holds; read at each client by the testbed, never sent) — and ``distance_matrix``
(N×N). ``reference()`` gives the central exact matrix (POT) and the ARI of the same clustering on
it; the runner reports the matrix's relative Frobenius error. Run on OTDD-augmented rows
(``transform: otdd_augment``) this is the paper's federated OTDD.

References
----------
.. [1] A. Rakotomamonjy, K. Nadjahi, L. Ralaivola. Federated Wasserstein Distance. ICLR 2024,
   App. D.3 and D.5.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import combinations, islice
from typing import Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from protocols._base import Protocol, ProtocolResult, drive_many
from protocols.fedwad import FEDWAD_MESSAGES, FedWAD, FedWADConfig
from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.errors import DataError
from testbed.exchange.bus import Bus
from testbed.exchange.schema import Array, Num, Parties, Record
from testbed.measure import Measure
from testbed.registry import PROTOCOLS, PluginConfig, scenario_parties

__all__ = [
    "FedWADClustering",
    "FedWADClusteringConfig",
    "clusters_fit",
    "planted_labels",
    "spectral_clusters",
]


class FedWADClusteringConfig(PluginConfig):
    fedwad: FedWADConfig = Field(
        default_factory=lambda: FedWADConfig(support_size=10, iterations=10, init_scale=5.0),
        description="FedWAD parameters used for every pair (its 'clients' key is ignored)",
    )
    n_clusters: int = Field(
        5,
        gt=1,
        validate_default=True,  # the default 5 needs 5 parties too
        description="clusters asked of spectral clustering (at most the number of parties)",
    )
    setting: Literal["affinity", "sparse_graph"] = Field(
        "affinity", description="rescaled distances as affinity, or a k-NN binary graph"
    )
    kernel: Literal["linear", "gaussian"] = Field(
        "linear", description="affinity rescaling: 1 - D/max(D), or exp(-D^2/median(D)^2)"
    )
    n_neighbors: int = Field(3, gt=0, description="k of the sparse graph (paper: 3 or 5)")
    pairs_in_flight: int = Field(
        1,
        ge=1,
        description="pairs run in lock step (their client calls batched into one round trip; "
        "the distances are the same, the messages interleave); 1 = one pair after another",
    )

    @field_validator("n_clusters")
    @classmethod
    def _fits(cls, v, info: ValidationInfo):
        return clusters_fit(v, info)


def clusters_fit(n_clusters: int, info: ValidationInfo) -> int:
    """``n_clusters`` at most the scenario's number of parties (one client per cluster)."""
    parties = scenario_parties(info)
    if parties is not None and n_clusters > len(parties):
        k = len(parties)
        raise ValueError(f"{n_clusters} clusters asked of {k} part{'y' if k == 1 else 'ies'}")
    return n_clusters


def planted_labels(label_sets: Mapping[str, frozenset]) -> np.ndarray:
    """Cluster id per client: clients holding the same set of labels share a cluster."""
    ids: dict[frozenset, int] = {}
    return np.array([ids.setdefault(s, len(ids)) for s in label_sets.values()])


def spectral_clusters(D: np.ndarray, cfg: FedWADClusteringConfig, seed: int) -> np.ndarray:
    """Spectral clustering (scikit-learn) of a symmetric distance matrix, App. D.5 settings."""
    from sklearn.cluster import SpectralClustering  # sklearn: validate imports this module

    D = np.asarray(D, dtype=np.float64)
    # as many clusters as clients: ARPACK cannot return k >= N eigenvectors. scikit-learn then
    # solves densely with a RuntimeWarning for a dense affinity and fails (TypeError) for the
    # sparse graph; its "lobpcg" solver goes straight to the same dense solve for so few nodes
    solver = "lobpcg" if cfg.n_clusters >= D.shape[0] else None
    if cfg.setting == "sparse_graph":
        model = SpectralClustering(
            n_clusters=cfg.n_clusters,
            affinity="precomputed_nearest_neighbors",
            n_neighbors=min(cfg.n_neighbors, D.shape[0] - 1),
            eigen_solver=solver,
            random_state=seed,
        )
        return model.fit_predict(D)
    if cfg.kernel == "linear":
        A = 1.0 - D / D.max() if D.max() > 0 else np.ones_like(D)
    else:
        off = D[~np.eye(D.shape[0], dtype=bool)]
        scale = np.median(off) if off.size and np.median(off) > 0 else 1.0
        A = np.exp(-((D / scale) ** 2))
    model = SpectralClustering(
        n_clusters=cfg.n_clusters, affinity="precomputed", eigen_solver=solver, random_state=seed
    )
    return model.fit_predict(A)


def _label_set(party: PartyData) -> frozenset:
    if party.y is None:
        raise DataError(f"fedwad_clustering: party {party.name!r} has no labels (planted truth)")
    return frozenset(int(c) for c in np.unique(party.y))


@PROTOCOLS.register
class FedWADClustering(Protocol):
    """Pairwise FedWAD distances among N clients, then spectral clustering (FedWAD App. D.5)."""

    name = "fedwad_clustering"
    messages = FEDWAD_MESSAGES
    released = {
        "estimates": Record(ari=Num(), distance_matrix=Array("f", ("*", "*"))),
        "outputs": Record(clients=Parties(), clusters=Array("i"), planted=Array("i")),
    }
    Config = FedWADClusteringConfig
    #: measured: scripts/protocol_tolerances.py (largest error over seeds 0-19, plus margin)
    reference_tolerance = {"distance_matrix": 0.3, "ari": 0.1}
    headline_accuracy = ("distance_matrix",)
    min_parties = 2  # pairwise distances, n_clusters >= 2 (the Config checks n_clusters)

    def client_releases(
        self, parties: Sequence[str]
    ) -> dict[str, list[tuple[str, int, str]]] | None:
        """Every party is a FedWAD client once per pair it is in (N - 1 pairs; the first of the
        pair sends ``fedwad.xi_mu``, the second ``fedwad.xi_nu``): the sum of FedWAD's
        ``client_releases`` over the pairs, per party. None when FedWAD's is (accurate mode)."""
        names = list(parties)
        out: dict[str, Counter] = {n: Counter() for n in names}
        for a, b in combinations(names, 2):
            cfg = self.config.fedwad.model_copy(update={"clients": [a, b]})
            pair = FedWAD(cfg).client_releases(names)
            if pair is None:
                return None
            for n, sends in pair.items():
                out[n].update({(kind, what): k for kind, k, what in sends})
        return {n: [(kind, k, what) for (kind, what), k in c.items()] for n, c in out.items()}

    def _seed(self, rng: np.random.Generator) -> int:
        return int(rng.integers(0, 2**31 - 1))

    def needs_labels(self) -> str:
        return "the ARI score against the label sets the clients hold"

    def run(self, parties, bus: Bus, rng) -> ProtocolResult:
        cfg = self.config
        names = list(parties)
        if len(names) < cfg.n_clusters:
            raise DataError(
                f"fedwad_clustering: {len(names)} clients for n_clusters={cfg.n_clusters}"
            )
        rng_cluster = rng.spawn(1)[0]
        D, n_pairs = self.pair_distances(parties, bus, rng)
        labels = spectral_clusters(D, cfg, self._seed(rng_cluster))
        # testbed scoring: the planted structure is read at each client and never sent
        truth = planted_labels({n: bus.local(n, _label_set) for n in names})
        from sklearn.metrics import adjusted_rand_score  # sklearn: validate imports this module

        return ProtocolResult(
            estimates={"ari": float(adjusted_rand_score(truth, labels)), "distance_matrix": D},
            outputs={"clients": names, "clusters": labels.tolist(), "planted": truth.tolist()},
            mode=f"{cfg.setting}/{cfg.fedwad.mode}/{cfg.fedwad.interpolation}",
            deviations=(
                "ARI scored by the testbed against the label sets the clients hold (not sent)",
                f"FedWAD for each of the {n_pairs} pairs (quantisation bias: papers fact 3)",
            ),
        )

    def pair_distances(
        self,
        parties,
        bus: Bus,
        rng: np.random.Generator,
        limit: int | None = None,
        window: int | None = None,
        on_pair=None,
    ) -> tuple[np.ndarray, int]:
        """FedWAD for the pairs (i, j), i < j, in order (the first ``limit`` of them when
        given): the distance matrix and the number of pairs run. Pair p's generator is
        ``rng``'s next spawned child, made when the pair starts (the same children as spawning
        them all at once, without holding N²/2 generators). ``window`` (default: the config's
        ``pairs_in_flight``) pairs run in lock step through :func:`protocols._base.drive_many`;
        each pair computes exactly what it computes alone, so the matrix does not depend on the
        window (tests/test_fedwad_lockstep.py), only the order of the logged messages does.
        ``on_pair()`` is called after each finished pair (progress reporting)."""
        names = list(parties)
        D = np.zeros((len(names), len(names)))
        window = window or self.config.pairs_in_flight
        pairs = combinations(range(len(names)), 2)
        if limit is not None:
            pairs = islice(pairs, limit)
        started: dict[int, tuple[int, int]] = {}  # run number -> pair, while it runs

        def runs():
            for p, (i, j) in enumerate(pairs):
                started[p] = (i, j)
                cfg = self.config.fedwad.model_copy(update={"clients": [names[i], names[j]]})
                yield FedWAD(cfg).steps(parties, bus, rng.spawn(1)[0])

        def done(p: int, res: ProtocolResult) -> None:
            i, j = started.pop(p)
            D[i, j] = D[j, i] = res.estimates["wasserstein"]
            if on_pair is not None:
                on_pair()

        return D, drive_many(runs(), bus, window, done)

    def central_clusters(self, D: np.ndarray) -> np.ndarray:
        """The same clustering on a central matrix (the central pipeline of ``utility.clustering_ari``)."""
        return spectral_clusters(D, self.config, 0)

    def reference(self, parties) -> dict:
        names = list(parties)
        D = np.zeros((len(names), len(names)))
        for i, j in combinations(range(len(names)), 2):
            D[i, j] = D[j, i] = tot.wasserstein(
                Measure(parties[names[i]].X), Measure(parties[names[j]].X)
            )
        labels = spectral_clusters(D, self.config, 0)
        truth = planted_labels({n: _label_set(parties[n]) for n in names})
        from sklearn.metrics import adjusted_rand_score  # sklearn: validate imports this module

        return {"ari": float(adjusted_rand_score(truth, labels)), "distance_matrix": D}
