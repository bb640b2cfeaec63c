"""Attacks on federated distillation (``sinkhorn_distillation``): what the soft labels leak.

``soft_label_membership``  The transfer set (public to the server: it sent it) contains some rows
    of a client's training data. From the soft labels that client returned on the transfer set,
    score every transfer row (higher = "member of the target's training set"):
    ``confidence`` = max probability; ``entropy`` = minus the entropy; ``loss`` = log-probability
    the target gives the argmax of all seen clients' mean soft label; ``calibrated`` = the
    target's log-probability of its own argmax minus the other clients' mean log-probability of
    that label (other teachers act as reference models, as in LiRA-style attacks). Candidates =
    the ``audit`` party's rows at the end of the transfer set (half are the target's training
    rows, half rows of its share it never trained on), or every transfer row when there is no
    audit party; which are members is known to the scorer only. Baseline: prior-only scores
    (independent uniform draws, AUC 0.5 in expectation).
``label_distribution_inference``  Infer each client's label histogram: ``bias`` = its
    probability bias B (sent once for weighting E); ``soft_labels`` = its mean soft label on the
    transfer set; ``ratio`` = its mean soft label divided by the mean over all clients seen
    (removes the transfer set's own label mix), renormalised. Baseline: the uniform histogram.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from attacks._base import Attack, AttackConfig, AttackOutput, _targets, observed
from testbed.exchange.bus import PublicInfo, View
from testbed.registry import ATTACKS

__all__ = ["LabelDistributionInference", "SoftLabelMembership"]

KIND = "sinkhorn_distillation"


def _soft_labels(view: View) -> dict[str, np.ndarray]:
    return {
        e.sender: np.asarray(e.payload, dtype=np.float64)
        for e in observed(view, f"{KIND}.soft_labels")
    }


def _transfer_set(view: View) -> np.ndarray | None:
    msgs = observed(view, f"{KIND}.transfer_set")
    return None if not msgs else np.asarray(msgs[0].payload, dtype=np.float64)


def _candidates(public: PublicInfo, n: int) -> slice:
    """The membership candidates: the audit party's rows, which the protocol appends at the end
    of the transfer set (public: the server assembled it); all transfer rows otherwise."""
    audit = public.params.get("audit")
    size = public.extra.get("sizes", {}).get(audit) if audit else None
    return slice(n - int(size), n) if size else slice(0, n)


class MembershipConfig(AttackConfig):
    score: Literal["confidence", "entropy", "loss", "calibrated"] = Field(
        "loss", description="membership score computed from the target's soft labels"
    )


@ATTACKS.register
class SoftLabelMembership(Attack):
    """Membership inference from a client's soft labels on the (partly overlapping) transfer set."""

    name = "soft_label_membership"
    Config = MembershipConfig
    protocols: ClassVar[tuple[str, ...]] = (KIND,)
    output_kinds: ClassVar[tuple[str, ...]] = ("scores",)

    def _score(self, soft: dict[str, np.ndarray], target: str) -> np.ndarray:
        P = np.clip(soft[target], 1e-12, 1.0)
        others = [np.clip(v, 1e-12, 1.0) for k, v in soft.items() if k != target]
        kind = self.config.score
        if kind == "confidence":
            return P.max(1)
        if kind == "entropy":
            return (P * np.log(P)).sum(1)
        rows = np.arange(P.shape[0])
        if kind == "loss":  # pseudo-label: the argmax of every seen client's mean soft label
            pseudo = np.mean([P, *others], axis=0).argmax(1)
            return np.log(P[rows, pseudo])
        pseudo = P.argmax(1)  # calibrated: the target's own label, judged by reference teachers
        s = np.log(P[rows, pseudo])
        if others:
            s = s - np.mean([np.log(o[rows, pseudo]) for o in others], axis=0)
        return s

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator) -> list[AttackOutput]:
        soft = _soft_labels(view)
        X_T = _transfer_set(view)
        if X_T is None:
            return []
        cand = _candidates(public, X_T.shape[0])
        return [
            AttackOutput(
                kind="scores",
                target=t,
                scores=self._score(soft, t)[cand],
                meta={"candidates": X_T[cand], "score": self.config.score},
            )
            for t in _targets(view, public)
            if t in soft
        ]

    def baseline(self, view: View, public: PublicInfo, rng: np.random.Generator):
        X_T = _transfer_set(view)  # the candidates are public; their labels are not
        if X_T is None:
            return []
        soft = _soft_labels(view)
        cand = X_T[_candidates(public, X_T.shape[0])]
        return [
            AttackOutput(
                kind="scores",
                target=t,
                scores=rng.uniform(size=cand.shape[0]),
                meta={"candidates": cand, "baseline": "prior"},
            )
            for t in _targets(view, public)
            if t in soft
        ]


class LabelDistConfig(AttackConfig):
    method: Literal["bias", "soft_labels", "ratio"] = "ratio"


@ATTACKS.register
class LabelDistributionInference(Attack):
    """Infer each client's label histogram from its probability bias B or its soft labels."""

    name = "label_distribution_inference"
    Config = LabelDistConfig
    protocols: ClassVar[tuple[str, ...]] = (KIND,)
    output_kinds: ClassVar[tuple[str, ...]] = ("histogram",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator) -> list[AttackOutput]:
        soft = _soft_labels(view)
        bias = {e.sender: np.asarray(e.payload, float) for e in observed(view, f"{KIND}.bias")}
        out = []
        means = {k: v.mean(0) for k, v in soft.items()}
        for t in _targets(view, public):
            if self.config.method == "bias":
                if t not in bias:
                    continue
                h = bias[t]
            elif t not in means:
                continue
            elif self.config.method == "soft_labels":
                h = means[t]
            else:
                h = means[t] / np.maximum(np.mean(list(means.values()), axis=0), 1e-12)
            h = np.clip(h, 0.0, None)
            h = h / h.sum() if h.sum() > 0 else np.full(h.size, 1.0 / h.size)
            out.append(
                AttackOutput(
                    kind="histogram", target=t, histogram=h, meta={"method": self.config.method}
                )
            )
        return out

    def baseline(self, view: View, public: PublicInfo, rng: np.random.Generator):
        soft = _soft_labels(view)
        bias = {e.sender: np.asarray(e.payload) for e in observed(view, f"{KIND}.bias")}
        C = next(iter(soft.values())).shape[1] if soft else None
        if C is None and bias:
            C = next(iter(bias.values())).size
        if C is None:
            return []
        return [
            AttackOutput(
                kind="histogram",
                target=t,
                histogram=np.full(C, 1.0 / C),
                meta={"baseline": "uniform"},
            )
            for t in _targets(view, public)
        ]
