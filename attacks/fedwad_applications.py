"""Attacks on FedWAD's applications (issue 16, our designs): the federated coreset
(``fedwad_coreset``) and clustered federated training (``fedwad_clustered_fl``).

``coreset_inversion`` (points). *Server*: in every inner FedWAD run a client answers the server's
``xi`` with ``Interp(own, xi, t)``; with a public fixed ``t`` and barycentric interpolation on
``xi``'s side (S smaller than the client's rows) its atoms are :math:`(1-t)B_j + t\\xi_j`,
:math:`B_j` the barycentric image of :math:`\\xi_j` in the client's rows, which the server inverts
exactly (:func:`attacks.fedwad_distributional.invert_interpolant`). A client takes part in many
epochs, each with another ``xi``: the server pools every inversion (different local means of the same
rows) and adds the client's own coreset (``fedwad_coreset.local_coreset``, a summary of its rows by
construction). *Curious client*: the global 1-NN classifier broadcast to every client holds every
client's coreset, stacked in the public client order; the block of the target is its guess.

``coreset_label_inference`` (histogram). The labels each client attaches to its coreset atoms
(nearest own row) go to the server (``fedwad_coreset.labels``) and, inside the classifier, to
every client: the histogram of the target's atom labels estimates its label distribution.

``clustered_fl_label_inference`` (histogram). *Server* (``method: updates``): in FedAvg round 1
the model is near its initialisation, whose softmax is close to uniform, so the change of the
output bias a client returns is :math:`\\Delta b_k \\approx \\mathrm{lr}\\cdot\\mathrm{steps}\\cdot
(\\pi_k - 1/C)`, :math:`\\pi` the client's label distribution; the server solves for :math:`\\pi`
(clipped at 0, renormalised). *Curious client* (``method: clusters``): it labels its own rows with
the cluster model it received, clusters the released distance matrix with the public spectral
parameters, and guesses its own label histogram for the clients in its cluster and a uniform
histogram over the labels it does not hold for the others. Baseline (prior only): uniform over
``n_classes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from attacks._base import Attack, AttackConfig, AttackOutput, _targets, observed
from attacks.fedwad_distributional import invert_interpolant
from protocols.fedwad_clustered_fl import FedWADClusteredFLConfig, _model, _set
from protocols.fedwad_clustering import spectral_clusters
from testbed.exchange.bus import SERVER, PublicInfo, View
from testbed.measure import Measure
from testbed.registry import ATTACKS

__all__ = ["ClusteredFLLabelInference", "CoresetInversion", "CoresetLabelInference"]

_CORESET = "fedwad_coreset"
_CFL = "fedwad_clustered_fl"


def _fixed_t(params: Mapping) -> float | None:
    fw = params.get("fedwad", {}) or {}
    t = fw.get("t", 0.5)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1:
        return None
    return float(t)


def _coreset_clients(public: PublicInfo) -> list[str]:
    """The clients in the order the protocol stacks their coresets (public parameters)."""
    p = public.params
    return list(p.get("clients") or [n for n in public.parties if n != p.get("test", "test")])


def _classifier_blocks(view: View, public: PublicInfo) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Target -> (its coreset atoms, their labels) from a received global classifier."""
    msgs = [e for e in observed(view, f"{_CORESET}.classifier") if isinstance(e.payload, Mapping)]
    if not msgs:
        return {}
    clf = msgs[-1].payload
    A, L = np.asarray(clf["atoms"]), np.asarray(clf["labels"])
    k = int(public.params.get("local_coreset_size", 0))
    clients = _coreset_clients(public)
    if k <= 0 or A.shape[0] != k * len(clients):
        return {}
    return {c: (A[i * k : (i + 1) * k], L[i * k : (i + 1) * k]) for i, c in enumerate(clients)}


class _Histogram:
    """Shared baseline of the histogram attacks: uniform over ``n_classes`` (prior only)."""

    def baseline(self, view: View, public: PublicInfo, rng: np.random.Generator):
        C = self.config.n_classes
        return [
            AttackOutput(
                kind="histogram",
                target=t,
                histogram=np.full(C, 1.0 / C),
                meta={"baseline": "uniform"},
            )
            for t in _targets(view, public)
        ]


def _hist(labels, n_classes: int) -> np.ndarray:
    lab = np.asarray(labels, dtype=np.int64).reshape(-1)
    h = np.bincount(lab, minlength=max(n_classes, int(lab.max(initial=0)) + 1)).astype(float)
    return h / h.sum()


class CoresetInversionConfig(AttackConfig):
    rounds: Literal["last", "all"] = Field(
        "all", description="server: invert every round's interpolant, or each run's last"
    )


@ATTACKS.register
class CoresetInversion(Attack):
    """Rows of a client from its coreset-FedWAD interpolants (server) or the shared classifier (client)."""

    name = "coreset_inversion"
    Config = CoresetInversionConfig
    protocols: ClassVar[tuple[str, ...]] = (_CORESET,)
    output_kinds: ClassVar[tuple[str, ...]] = ("points",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        if view.observer == SERVER or SERVER in view.colluders:
            return self._server(view, public)
        blocks = _classifier_blocks(view, public)
        return [
            AttackOutput(
                kind="points", target=t, points=blocks[t][0], meta={"method": "classifier"}
            )
            for t in _targets(view, public)
            if t in blocks
        ]

    def _server(self, view: View, public: PublicInfo):
        t = _fixed_t(public.params)
        interp = (public.params.get("fedwad", {}) or {}).get("interpolation", "barycentric")
        points: dict[str, list[np.ndarray]] = {}
        sent: dict[str, Measure] = {}
        last: dict[str, np.ndarray] = {}
        for e in observed(view, f"{_CORESET}.*"):
            step = e.kind.rsplit(".", 1)[-1]
            if e.sender == SERVER and step == "xi" and isinstance(e.payload, Measure):
                if e.receiver in last and self.config.rounds == "last":
                    points.setdefault(e.receiver, []).append(last.pop(e.receiver))
                sent[e.receiver] = e.payload
            elif step == "xi_client" and e.receiver == SERVER and e.sender in sent:
                xi, eta = sent[e.sender], e.payload
                if (
                    t is None
                    or interp != "barycentric"
                    or not isinstance(eta, Measure)
                    or eta.n != xi.n
                ):
                    continue  # the interpolant is not a barycentric push onto xi's atoms
                inv = invert_interpolant(eta.support, xi.support, t)
                if self.config.rounds == "all":
                    points.setdefault(e.sender, []).append(inv)
                else:
                    last[e.sender] = inv
            elif step == "local_coreset" and e.sender == SERVER:
                points.setdefault(e.receiver, []).append(np.asarray(e.payload))
        for c, inv in last.items():
            points.setdefault(c, []).append(inv)
        return [
            AttackOutput(kind="points", target=c, points=np.vstack(p), meta={"method": "inversion"})
            for c, p in sorted(points.items())
            if c in _targets(view, public)
        ]


class LabelConfig(AttackConfig):
    n_classes: int = Field(10, gt=1, description="public number of classes (histogram length)")


@ATTACKS.register
class CoresetLabelInference(_Histogram, Attack):
    """A client's label histogram from the labels of its coreset atoms."""

    name = "coreset_label_inference"
    Config = LabelConfig
    protocols: ClassVar[tuple[str, ...]] = (_CORESET,)
    output_kinds: ClassVar[tuple[str, ...]] = ("histogram",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        C = self.config.n_classes
        got = {
            e.sender: np.asarray(e.payload)
            for e in observed(view, f"{_CORESET}.labels")
            if e.receiver == SERVER
        }
        for c, (_, lab) in _classifier_blocks(view, public).items():
            got.setdefault(c, lab)
        return [
            AttackOutput(kind="histogram", target=t, histogram=_hist(got[t], C))
            for t in _targets(view, public)
            if t in got and np.asarray(got[t]).size
        ]


class ClusteredLabelConfig(LabelConfig):
    method: Literal["auto", "updates", "clusters"] = Field(
        "auto", description="server: bias deltas of round-1 updates; client: clusters + own labels"
    )


def _bias_key(weights: Mapping) -> str | None:
    keys = [k for k in weights if k.endswith("bias")]
    return keys[-1] if keys else None


@ATTACKS.register
class ClusteredFLLabelInference(_Histogram, Attack):
    """A client's label histogram from its FedAvg update (server) or the clusters (curious client)."""

    name = "clustered_fl_label_inference"
    Config = ClusteredLabelConfig
    protocols: ClassVar[tuple[str, ...]] = (_CFL,)
    output_kinds: ClassVar[tuple[str, ...]] = ("histogram",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        method = self.config.method
        if method == "auto":
            method = "updates" if SERVER in (view.observer, *view.colluders) else "clusters"
        if method == "updates":
            return self._updates(view, public)
        return self._clusters(view, public)

    def _updates(self, view: View, public: PublicInfo):
        p = public.params
        lr, batch = float(p.get("lr", 0.05)), int(p.get("batch_size", 16))
        epochs = int(p.get("local_epochs", 1))
        sent: dict[str, Mapping] = {}
        delta: dict[str, np.ndarray] = {}
        sizes: dict[str, int] = {}
        for e in observed(view, f"{_CFL}.*"):
            if e.round != 1:  # round 1: the model is still near its initialisation
                continue
            step = e.kind.rsplit(".", 1)[-1]
            if step.endswith("size") and e.receiver == SERVER:
                sizes.setdefault(e.sender, int(e.payload))
                continue
            key = _bias_key(e.payload) if isinstance(e.payload, Mapping) else None
            if key is None:
                continue
            if step.endswith("model") and e.sender == SERVER:
                sent.setdefault(e.receiver, e.payload)
            elif step.endswith("update") and e.receiver == SERVER and e.sender in sent:
                d = np.asarray(e.payload[key]) - np.asarray(sent[e.sender][key])
                delta.setdefault(e.sender, d)
        out = []
        for t in _targets(view, public):
            if t not in delta or t not in sizes:
                continue
            steps = epochs * int(np.ceil(sizes[t] / batch))
            h = np.clip(delta[t] / (lr * steps) + 1.0 / delta[t].size, 0.0, None)
            if h.sum() <= 0:
                continue
            out.append(
                AttackOutput(
                    kind="histogram", target=t, histogram=h / h.sum(), meta={"method": "updates"}
                )
            )
        return out

    def _clusters(self, view: View, public: PublicInfo):
        from protocols._distill import (
            predict_proba,  # torch: _distill imports it; validate imports this
        )

        D = (public.extra.get("released") or {}).get("distance_matrix")
        me = view.observer
        models = [e for e in observed(view, f"{_CFL}.model") if e.receiver == me]
        own = view.own_data.get(me)
        if D is None or not models or own is None or me not in public.parties:
            return []
        cfg = FedWADClusteredFLConfig(**public.params)
        model = _model(np.asarray(own).shape[1], cfg)
        _set(model, models[-1].payload)
        pred = predict_proba(model, np.asarray(own)).argmax(1)
        C = max(self.config.n_classes, cfg.n_classes)
        mine = _hist(pred, C)
        rest = (mine == 0).astype(float)
        rest = rest / rest.sum() if rest.sum() > 0 else np.full(C, 1.0 / C)
        names = list(public.parties)
        labels = spectral_clusters(np.asarray(D, dtype=float), cfg.clustering, 0)
        mine_k = labels[names.index(me)]
        return [
            AttackOutput(
                kind="histogram",
                target=t,
                histogram=mine if labels[names.index(t)] == mine_k else rest,
                meta={"method": "clusters"},
            )
            for t in _targets(view, public)
        ]
