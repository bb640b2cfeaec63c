"""Defenses for federated distillation (``sinkhorn_distillation``).

``dp_sgd_teachers``  a protocol knob: every teacher is trained with DP-SGD through opacus
    (``make_private_with_epsilon``, per-sample clipping, Poisson sampling, RDP accountant). The
    ε opacus reports as spent goes into the ledger with ``ledger.claim`` (by the protocol, which
    runs the training). ``epsilon: inf`` switches it off (the sweep's no-DP point). The noise
    comes from a generator seeded from the scenario's seed (opacus's ``secure_mode`` off), so
    the same seed gives the same run: right for auditing, not for a deployment.
``noisy_soft_labels``  a message defense: Gaussian or Laplace noise on each released probability
    vector (soft labels on the transfer set and the probability bias), then clipped at 0 and
    renormalised (post-processing). Accounting: one training record can move the released
    distribution of *every* transfer row arbitrarily within the simplex, so each row is one query
    with L1 sensitivity 2 (Laplace, ε = 2/b per row) or L2 sensitivity √2 (Gaussian, noise
    multiplier σ/√2 per row); all rows of a message compose (``count`` = rows). Honest and
    therefore pessimistic: meaningful ε needs heavy noise.
``pate_aggregation``  a protocol knob: clients send one-hot votes to a trusted aggregator that
    releases only the noisy argmax of the vote histogram (GNMax, Papernot et al. 2018); the
    protocol records one Gaussian event per client (σ/√2, one per transfer row).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from defenses._base import Defense, DefenseConfig
from testbed.errors import ScenarioError
from testbed.exchange.bus import Envelope
from testbed.exchange.ledger import MechanismEvent, PrivacyLedger
from testbed.registry import DEFENSES, PluginConfig

__all__ = ["DPSGDTeachers", "NoisySoftLabels", "PateAggregation"]

PROTOCOL = "sinkhorn_distillation"


class _Knob(Defense):
    """A defense that only sets protocol parameters; it never touches messages."""

    #: read by the contract kit (issue 4's knob flag): no message checks for knobs
    changes_messages: ClassVar[bool] = False
    #: a knob of sinkhorn_distillation's parameters; on another protocol it would do nothing
    protocols: ClassVar[tuple[str, ...]] = (PROTOCOL,)

    def applies_to(self, env: Envelope) -> bool:
        return False


class DPSGDConfig(PluginConfig):
    epsilon: float | Literal["inf"] = Field(1.0, description="target ε per teacher ('inf' = no DP)")
    delta: float = Field(1e-5, gt=0, lt=1)
    max_grad_norm: float = Field(1.0, gt=0)


@DEFENSES.register
class DPSGDTeachers(_Knob):
    """DP-SGD (opacus) for every teacher; opacus's spent ε is claimed in the ledger."""

    name = "dp_sgd_teachers"
    Config = DPSGDConfig

    def protocol_overrides(self, protocol_name: str) -> dict[str, Any]:
        eps = self.config.epsilon
        if protocol_name != PROTOCOL or eps == "inf" or math.isinf(float(eps)):
            return {"dp_sgd": None}
        if float(eps) <= 0:
            raise ScenarioError("dp_sgd_teachers.epsilon: must be positive or 'inf'")
        return {
            "dp_sgd": {
                "epsilon": float(eps),
                "delta": self.config.delta,
                "max_grad_norm": self.config.max_grad_norm,
            }
        }


class PateConfig(PluginConfig):
    sigma: float = Field(1.0, gt=0, description="Gaussian noise std on the vote counts")


@DEFENSES.register
class PateAggregation(_Knob):
    """PATE-style noisy-argmax aggregation of the teachers' votes (GNMax) by a trusted aggregator."""

    name = "pate_aggregation"
    Config = PateConfig

    def protocol_overrides(self, protocol_name: str) -> dict[str, Any]:
        if protocol_name != PROTOCOL:
            return {}
        return {"aggregation": "pate", "pate_sigma": self.config.sigma}


class NoisySoftLabelsConfig(DefenseConfig):
    kinds: list[str] = Field(
        default_factory=lambda: [f"{PROTOCOL}.soft_labels", f"{PROTOCOL}.bias"],
        description="message kinds (globs) to defend",
    )
    mechanism: Literal["gaussian", "laplace"] = "gaussian"
    scale: float = Field(0.1, gt=0, description="Gaussian std sigma, or Laplace scale b")


@DEFENSES.register
class NoisySoftLabels(Defense):
    """Gaussian or Laplace noise on released probability vectors (clipped and renormalised)."""

    name = "noisy_soft_labels"
    Config = NoisySoftLabelsConfig
    #: the contract kit runs this defense on the sinkhorn_distillation fixture
    protocols: ClassVar[tuple[str, ...]] = (PROTOCOL,)

    def on_send(
        self, env: Envelope, rng: np.random.Generator, ledger: PrivacyLedger | None
    ) -> Envelope:
        P = np.atleast_2d(np.asarray(env.payload, dtype=np.float64))
        s = self.config.scale
        if self.config.mechanism == "gaussian":
            noisy = P + rng.normal(0.0, s, P.shape)
            event = MechanismEvent(
                party=env.sender,
                mechanism="gaussian",
                noise_multiplier=s / math.sqrt(2.0),
                count=P.shape[0],
                sensitivity=math.sqrt(2.0),
                sigma=s,
                note=env.kind,
            )
        else:
            noisy = P + rng.laplace(0.0, s, P.shape)
            event = MechanismEvent(
                party=env.sender,
                mechanism="laplace",
                noise_multiplier=math.nan,
                count=P.shape[0],
                sensitivity=2.0,
                sigma=s,
                note=env.kind,
                epsilon=2.0 / s,
            )
        noisy = np.clip(noisy, 0.0, None)
        tot = noisy.sum(1, keepdims=True)
        noisy = np.where(tot > 0, noisy / np.where(tot > 0, tot, 1.0), 1.0 / P.shape[1])
        if ledger is not None:
            ledger.record(event)
        out = noisy.reshape(np.shape(env.payload))
        return env.with_payload(out, defended_by=self.name)
