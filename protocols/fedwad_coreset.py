r"""Federated Wasserstein coresets with FedWAD (Rakotomamonjy, Nadjahi & Ralaivola [1], Sec. 4 and
App. D.2).

The server learns K coreset atoms :math:`C = \{c_i\}` minimising :math:`W_2(\frac1K\sum_i
\delta_{c_i}, \mu)` where :math:`\mu` is the data pooled over many clients, without seeing any row.
Each epoch the server samples ``clients_per_epoch`` clients; with each sampled client it runs the
inner FedWAD (Algorithm 1, the server playing the coreset's side): it sends
:math:`\xi^{(k-1)}` (kind ``fedwad_coreset.xi``), the client returns
:math:`\mathrm{Interp}(\nu, \xi^{(k-1)}, t)` (``fedwad_coreset.xi_client``, computed by FedWAD's
own client step), the server interpolates it with :math:`\mathrm{Interp}(C, \xi^{(k-1)}, t)`. After
``fedwad.iterations`` rounds the server sends :math:`\xi` once more and the client returns
:math:`W(\xi, \nu)` (``fedwad_coreset.distance``), so the server holds the FedWAD estimate
:math:`\hat W = W(C, \xi) + W(\xi, \nu)`.

**Gradient** (the paper gives none; our derivation). With :math:`P` the optimal plan between
:math:`C` (weights :math:`a`) and :math:`\xi` (atoms :math:`y_j`),
:math:`\partial W_2^2(C,\xi)/\partial c_i = 2(a_i c_i - \sum_j P_{ij} y_j)`, and the gradient of
the squared estimate is :math:`\partial \hat W^2/\partial c_i = (\hat W / W(C,\xi))\cdot 2(a_i c_i
- \sum_j P_{ij} y_j)`. When :math:`\xi` lies on the geodesic from :math:`C` to :math:`\nu`
(exact interpolation) this is exactly :math:`\partial W_2^2(C,\nu)/\partial c_i`: the factor
:math:`\hat W/W(C,\xi)` undoes the fraction of the geodesic :math:`\xi` sits at. The server averages
the sampled clients' gradients (the paper's "aggregated gradients") and steps
:math:`c_i \leftarrow c_i - \mathrm{lr}\cdot g_i/(2a_i)`: with ``lr = 1`` on exact distances this is
the fixed-point (Lloyd) step of the free-support barycenter; the mass preconditioning makes ``lr``
independent of K.

**1-NN classifier** (paper Sec. 4, "Federated coreset classification model"). With
``local_coreset_size > 0`` the server also learns one coreset per client (the same procedure with
that client alone), sends it to the client, which labels each atom by its nearest own row
(``fedwad_coreset.labels``, computed at the client); the pooled labelled atoms form a global 1-NN
classifier broadcast to every client (``fedwad_coreset.classifier``), and the held-out ``test`` party
scores it locally (testbed scoring, never sent back).

**Central reference** (``reference()``): the same iteration from the same initial coreset with the
same ``lr`` and number of epochs, on the pooled client data with exact ``ot.emd2`` plans (every
client every epoch), and POT's ``ot.lp.free_support_barycenter`` of the pooled data from the same
initial atoms as a comparison; central per-client coresets give the central 1-NN accuracy.
The federated coreset's quality ``coreset_wasserstein`` = W2(coreset, pooled client data) is
computed on the scoring side by :meth:`evaluate` (it needs the pooled rows, which no party has).

Deviations from the paper (also in ``ProtocolResult.deviations``): plain gradient steps with mass
preconditioning (the optimiser is not stated); clients' gradients averaged with equal weights;
the inner FedWAD draws a fresh :math:`\xi^{(0)}` per client per epoch; the 1-NN experiment runs on
raw digits (the paper uses autoencoded MNIST) and compares with the central coresets, not with
FedRep/FedPer.

References
----------
.. [1] A. Rakotomamonjy, K. Nadjahi, L. Ralaivola. Federated Wasserstein Distance. ICLR 2024.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from protocols._base import Protocol, ProtocolResult
from protocols.fedwad import FedWADConfig, _client_step, _dim, _distance_to, fedwad_round_interp
from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.errors import DataError
from testbed.exchange.bus import SERVER, Bus
from testbed.exchange.schema import Array, MeasureOf, Message, Num, Parties, Record
from testbed.measure import Measure
from testbed.registry import PROTOCOLS, PluginConfig, check_parties, scenario_parties

__all__ = [
    "FedWADCoreset",
    "FedWADCoresetConfig",
    "central_coreset",
    "coreset_step",
    "nn_accuracy",
    "server_target",
]


class FedWADCoresetConfig(PluginConfig):
    clients: list[str] | None = Field(
        None, description="parties holding data (default: every party except `test`)"
    )
    test: str | None = Field(
        "test",
        validate_default=True,  # the default names a party the scenario must have
        description="held-out labelled party scoring the 1-NN classifier (None: skip)",
    )
    coreset_size: int = Field(10, gt=0, description="K: atoms of the global coreset")
    local_coreset_size: int = Field(
        10, ge=0, description="atoms of each client's coreset for the 1-NN classifier (0: skip)"
    )
    clients_per_epoch: int = Field(3, gt=0, description="clients sampled by the server per epoch")
    epochs: int = Field(30, gt=0, description="coreset updates")
    lr: float = Field(0.3, gt=0, le=2, description="step: c_i -= lr * g_i / (2 a_i)")
    init_mean: float = Field(0.0, description="coreset init ~ N(init_mean, init_scale^2 I)")
    init_scale: float = Field(1.0, gt=0)
    init_seed: int = Field(
        0,
        ge=0,
        description="seed of the public initial coresets (shared with the central reference)",
    )
    fedwad: FedWADConfig = Field(
        default_factory=lambda: FedWADConfig(support_size=10, iterations=5),
        description="inner FedWAD (support_size, iterations, t, interpolation, init of xi)",
    )

    @field_validator("clients")
    @classmethod
    def _clients(cls, v, info: ValidationInfo):
        check_parties(v or [], info)
        return v

    @field_validator("test")
    @classmethod
    def _test(cls, v, info: ValidationInfo):
        parties = scenario_parties(info)
        if parties is None:
            return v
        if v is not None and v not in parties:
            raise ValueError(
                f"{v!r} is not a party; parties: {', '.join(parties)} (test: null skips the "
                "held-out 1-NN score)"
            )
        if not info.data.get("clients") and not [p for p in parties if p != v]:
            raise ValueError(f"{v!r} is the only party: none is left to be a client")
        return v


# -- pieces shared by the federated run and the central reference
def coreset_step(
    C: np.ndarray, targets: Sequence[tuple[np.ndarray, float]], lr: float
) -> np.ndarray:
    """One update of uniform-weight atoms ``C`` from per-client ``(P @ Y, scale)`` pairs.

    ``P @ Y`` is the plan-weighted target of each atom and ``scale`` the factor multiplying
    :math:`2(a_i c_i - (PY)_i)` in that client's gradient; the step is ``lr * mean(g) / (2a)``."""
    a = 1.0 / C.shape[0]
    g = np.mean([s * 2.0 * (a * C - PY) for PY, s in targets], axis=0)
    return C - lr * g / (2.0 * a)


def server_target(
    coreset: Measure, xi: Measure, w_client: float
) -> tuple[np.ndarray, float, float]:
    """Server side of the gradient: ``(P @ xi, scale, estimate)`` with P the optimal plan between
    the coreset and the final interpolating measure, estimate = W(C, xi) + W(xi, nu) and
    scale = estimate / W(C, xi), so that ``scale * 2 (a c_i - (P xi)_i)`` is the gradient of the
    squared FedWAD estimate (module docstring)."""
    P, cost = tot.plan(coreset, xi)
    w_server = float(np.sqrt(cost))
    estimate = w_server + float(w_client)
    scale = estimate / w_server if w_server > 0 else 1.0
    return P @ xi.support, scale, estimate


def central_coreset(
    C0: np.ndarray, pooled: np.ndarray, epochs: int, lr: float
) -> tuple[np.ndarray, list[float]]:
    """The same iteration on the pooled data with exact plans (``ot.emd``); returns the coreset
    and W2 after every epoch."""
    C = np.array(C0, dtype=np.float64)
    target = Measure(pooled)
    hist = []
    for _ in range(epochs):
        P, _ = tot.plan(Measure(C), target)
        C = coreset_step(C, [(P @ target.support, 1.0)], lr)
        hist.append(tot.wasserstein(Measure(C), target))
    return C, hist


def nn_accuracy(atoms: np.ndarray, labels: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """Accuracy of the 1-nearest-neighbour classifier with prototypes ``atoms``."""
    d = tot.cost_matrix(np.asarray(X, dtype=np.float64), np.asarray(atoms, dtype=np.float64))
    return float(np.mean(np.asarray(labels)[np.argmin(d, axis=1)] == np.asarray(y)))


# -- computations at a party (through ``bus.local``)
def _size(party: PartyData) -> int:
    return party.n


def _label_atoms(party: PartyData, atoms: np.ndarray) -> np.ndarray:
    """Label of each atom = label of the client's nearest own row (computed at the client)."""
    if party.y is None:
        raise DataError(f"fedwad_coreset: party {party.name!r} has no labels for the 1-NN step")
    d = tot.cost_matrix(np.asarray(atoms, dtype=np.float64), np.asarray(party.X, dtype=np.float64))
    return np.asarray(party.y)[np.argmin(d, axis=1)].astype(np.float64)


def _score_classifier(party: PartyData, atoms: np.ndarray, labels: np.ndarray) -> float:
    if party.y is None:
        raise DataError(f"fedwad_coreset: test party {party.name!r} has no labels")
    return nn_accuracy(atoms, labels, party.X, party.y)


#: the inner FedWAD's interpolating measures (any support size, the data's dimension)
_XI = MeasureOf("*", "d")


@PROTOCOLS.register
class FedWADCoreset(Protocol):
    """Federated Wasserstein coreset learned with FedWAD gradients (FedWAD App. D.2)."""

    name = "fedwad_coreset"
    messages = {
        **{
            f"fedwad_coreset.{tag}{step}": Message(Num() if step == "distance" else _XI)
            for tag in ("", "local.")
            for step in ("xi", "xi_client", "xi_final", "distance")
        },
        "fedwad_coreset.local_coreset": Message(Array("f", ("local_coreset_size", "d"))),
        "fedwad_coreset.labels": Message(Array("f", ("local_coreset_size",))),
        "fedwad_coreset.classifier": Message(
            Record(atoms=Array("f", ("*", "d")), labels=Array("f", ("*",)))
        ),
    }
    released = {
        "estimates": Record(nn_accuracy=Num()),
        "history": Record(fedwad_loss=Array()),
        "outputs": Record(
            coreset=Array("f", ("coreset_size", "d")),
            coreset_init=Array("f", ("coreset_size", "d")),
            clients=Parties(),
            classifier_atoms=Array("f", ("*", "d")),
            classifier_labels=Array("f", ("*",)),
        ),
    }
    Config = FedWADCoresetConfig
    #: measured: scripts/protocol_tolerances.py (largest error over seeds 0-19, plus margin)
    reference_tolerance = {"coreset_wasserstein": 2.6, "nn_accuracy": 0.1}
    headline_accuracy = ("coreset_wasserstein",)

    def _clients(self, parties) -> list[str]:
        cfg = self.config
        names = cfg.clients or [p for p in parties if p != cfg.test]
        missing = [n for n in names if n not in parties]
        if missing or not names:
            raise DataError(f"fedwad_coreset: clients {missing or names} not among {list(parties)}")
        if cfg.test is not None and cfg.test not in parties:
            raise DataError(
                f"fedwad_coreset: test party {cfg.test!r} not among {list(parties)} (set test: null)"
            )
        return names

    def exact_ot_pairs(self, rows):
        """The reference's (and evaluate's) W between the K-atom coreset and the pooled clients;
        no OT between two clients."""
        cfg = self.config
        clients = tuple(cfg.clients or [p for p in rows.rows if p != cfg.test])
        return [(clients, cfg.coreset_size)] if clients else None

    def roles(self, parties):
        out = {p: "client" for p in self._clients(parties)}
        if self.config.test is not None:
            out[self.config.test] = "held-out test set (scoring)"
        return out

    def client_releases(
        self, parties: Sequence[str]
    ) -> dict[str, list[tuple[str, int, str]]] | None:
        """Per client: ``fedwad.iterations`` supports and one distance for every inner FedWAD
        it is in, one per epoch when every client is sampled each epoch, and as many again
        for its own coreset (``local.``; with ``local_coreset_size > 0``; its labels are an
        array, which ``gaussian_measure_noise`` refuses). None when ``clients_per_epoch`` is
        below the clients: which client is sampled how often depends on the seed."""
        cfg = self.config
        clients = cfg.clients or [p for p in parties if p != cfg.test]
        if not clients or cfg.clients_per_epoch < len(clients):
            return None
        E, K = cfg.epochs, cfg.fedwad.iterations
        tags = ("", "local.") if cfg.local_coreset_size > 0 else ("",)
        sends = [
            (f"fedwad_coreset.{tag}{kind}", n, what)
            for tag in tags
            for kind, n, what in (("xi_client", E * K, "measure"), ("distance", E, "distance"))
        ]
        return {c: list(sends) for c in clients}

    def _t(self, rng) -> float:
        f = self.config.fedwad
        return float(rng.uniform(*f.t_range)) if f.t == "random" else float(f.t)

    def _init(self, d: int, k: int, which: int = -1) -> np.ndarray:
        """Public initial atoms: the global coreset (``which=-1``) or client ``which``'s; drawn
        from ``init_seed`` so the central reference starts from the same atoms."""
        cfg = self.config
        rng = np.random.default_rng([cfg.init_seed, which + 1])
        return rng.normal(cfg.init_mean, cfg.init_scale, size=(k, d))

    def _inner(self, C: np.ndarray, client: str, bus: Bus, rng, epoch: int, tag: str):
        """Inner FedWAD between the server's coreset and one client; returns (P @ xi, scale, W^)."""
        f = self.config.fedwad
        rng_xi, rng_c, rng_s = rng.spawn(3)
        d = C.shape[1]
        coreset = Measure(C)
        xi = Measure(rng_xi.normal(f.init_mean, f.init_scale, size=(f.support_size, d)))
        for _ in range(f.iterations):
            at_client = bus.send(SERVER, client, f"fedwad_coreset.{tag}xi", xi, round=epoch).payload
            xi_c, _ = bus.local(
                client, _client_step, at_client, self._t(rng_c), f.interpolation, f.prune
            )
            got = bus.send(
                client, SERVER, f"fedwad_coreset.{tag}xi_client", xi_c, round=epoch
            ).payload
            xi_s, _, _ = fedwad_round_interp(coreset, xi, self._t(rng_s), f.interpolation, f.prune)
            xi, _, _ = fedwad_round_interp(xi_s, got, self._t(rng_s), f.interpolation, f.prune)
        at_client = bus.send(
            SERVER, client, f"fedwad_coreset.{tag}xi_final", xi, round=epoch
        ).payload
        w_c = bus.local(client, _distance_to, at_client)
        w_client = bus.send(
            client, SERVER, f"fedwad_coreset.{tag}distance", w_c, round=epoch
        ).payload
        return server_target(coreset, xi, float(w_client))

    def _learn(self, C0, clients, per_epoch, bus, rng, tag: str):
        C = np.array(C0)
        losses = []
        for epoch in range(1, self.config.epochs + 1):
            r_pick, r_inner = rng.spawn(2)
            picked = [
                clients[i] for i in np.sort(r_pick.choice(len(clients), per_epoch, replace=False))
            ]
            targets, ests = [], []
            for c, r in zip(picked, r_inner.spawn(len(picked))):
                PY, s, est = self._inner(C, c, bus, r, epoch, tag)
                targets.append((PY, s))
                ests.append(est)
            C = coreset_step(C, targets, self.config.lr)
            losses.append(float(np.mean(ests)))
        return C, losses

    def needs_labels(self) -> str | None:
        if self.config.local_coreset_size > 0:
            return "the 1-NN classifier's atom labels; local_coreset_size: 0 skips it"
        return None

    def run(self, parties, bus: Bus, rng) -> ProtocolResult:
        cfg = self.config
        clients = self._clients(parties)
        dims = bus.local_map([(c, _dim) for c in clients])
        if len(set(dims)) != 1:
            raise DataError(
                f"fedwad_coreset: clients' dimensions differ: {dict(zip(clients, dims))}"
            )
        d = dims[0]
        per_epoch = min(cfg.clients_per_epoch, len(clients))
        rng_global, rng_local = rng.spawn(2)
        C0 = self._init(d, cfg.coreset_size)
        C, losses = self._learn(C0, clients, per_epoch, bus, rng_global, "")
        outputs: dict = {"coreset": C, "coreset_init": C0, "clients": clients}
        estimates: dict = {}
        deviations = [
            "gradient of the squared FedWAD estimate, mass-preconditioned step (optimiser not stated in the paper)",
            "sampled clients' gradients averaged with equal weights",
            "fresh random xi^(0) per client per epoch",
        ]
        if cfg.local_coreset_size > 0:
            atoms, labels, locals_ = [], [], {}
            for i, (c, r) in enumerate(zip(clients, rng_local.spawn(len(clients)))):
                Cc, _ = self._learn(
                    self._init(d, cfg.local_coreset_size, i), [c], 1, bus, r, "local."
                )
                at_c = bus.send(SERVER, c, "fedwad_coreset.local_coreset", Cc).payload
                lab = bus.local(c, _label_atoms, at_c)
                lab = bus.send(c, SERVER, "fedwad_coreset.labels", lab).payload
                atoms.append(Cc)
                labels.append(np.asarray(lab))
                locals_[c] = Cc
            A, L = np.vstack(atoms), np.concatenate(labels)
            clf = {"atoms": A, "labels": L}
            for c in clients:  # the global 1-NN classifier is shared with every client
                bus.send(SERVER, c, "fedwad_coreset.classifier", clf)
            outputs.update(classifier_atoms=A, classifier_labels=L)
            if cfg.test is not None:
                bus.send(SERVER, cfg.test, "fedwad_coreset.classifier", clf)
                # testbed scoring at the held-out party, never sent back
                estimates["nn_accuracy"] = bus.local(cfg.test, _score_classifier, A, L)
            deviations.append(
                "1-NN on raw features with the central coresets as comparison (paper: autoencoded MNIST vs FedRep/FedPer)"
            )
        return ProtocolResult(
            estimates=estimates,
            history={"fedwad_loss": losses},
            outputs=outputs,
            mode=f"{cfg.fedwad.interpolation}/S={cfg.fedwad.support_size}",
            deviations=tuple(deviations),
        )

    # -- scoring side
    def _pooled(self, parties) -> np.ndarray:
        return np.vstack(
            [np.asarray(parties[c].X, dtype=np.float64) for c in self._clients(parties)]
        )

    def evaluate(self, result: ProtocolResult, parties) -> dict[str, float]:
        """W2(federated coreset, pooled client data): scoring side (reads the parties' data)."""
        C = np.asarray(result.outputs["coreset"], dtype=np.float64)
        return {"coreset_wasserstein": tot.wasserstein(Measure(C), Measure(self._pooled(parties)))}

    def reference(self, parties) -> dict:
        import ot  # ot: validate imports this module

        cfg = self.config
        pooled = self._pooled(parties)
        d = pooled.shape[1]
        C0 = self._init(d, cfg.coreset_size)  # the same public initial atoms as run()
        C, hist = central_coreset(C0, pooled, cfg.epochs, cfg.lr)
        target = Measure(pooled)
        X_fs = ot.lp.free_support_barycenter(
            [pooled], [target.weights], C0, numItermax=max(cfg.epochs, 100), stopThr=1e-9
        )
        out = {
            "coreset_wasserstein": tot.wasserstein(Measure(C), target),
            "free_support_wasserstein": tot.wasserstein(Measure(X_fs), target),
            "central_coreset": C,
            "free_support_coreset": X_fs,
        }
        if cfg.local_coreset_size > 0 and cfg.test is not None:
            atoms, labels = [], []
            for i, c in enumerate(self._clients(parties)):
                X = np.asarray(parties[c].X, dtype=np.float64)
                Cc, _ = central_coreset(
                    self._init(d, cfg.local_coreset_size, i), X, cfg.epochs, cfg.lr
                )
                atoms.append(Cc)
                labels.append(_label_atoms(parties[c], Cc))
            te = parties[cfg.test]
            out["nn_accuracy"] = nn_accuracy(np.vstack(atoms), np.concatenate(labels), te.X, te.y)
        return out
