"""Protocol knobs that the papers propose as privacy measures, exposed as defenses.

A knob defense changes no message: it sets protocol parameters before the run
(:meth:`~defenses.Defense.protocol_overrides`). Each knob has a generic name (``t``,
``t_range``, ``distances``, ``support_size``); a protocol whose parameter is called differently
declares ``knob_params = {"support_size": "k", ...}``. Setting a knob the protocol does not have is
an error that names the defense, the knob and the protocol's parameters — never a silent no-op.

- ``random_t`` — FedWAD Sec. 5 / TriangleWad Sec. 3.2: draw the interpolation time at random
  (the receiver cannot invert the geodesic without t).
- ``large_t`` — a t close to 1 keeps a small share of the private measure in each message.
- ``distances_at_end`` — FedWAD's advice: send distances only after the last round.
- ``small_support`` — a smaller support S (fewer atoms = a coarser picture of the data).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from defenses._base import Defense
from testbed.errors import TestbedError
from testbed.exchange.bus import Envelope
from testbed.registry import DEFENSES, PROTOCOLS, PluginConfig

__all__ = ["DistancesAtEnd", "KnobDefense", "LargeT", "RandomT", "SmallSupport"]


class KnobDefense(Defense):
    """Base class of knob defenses: ``knobs()`` gives generic knob -> value."""

    Config: ClassVar[type[PluginConfig]] = PluginConfig
    changes_messages: ClassVar[bool] = False

    def knobs(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def applies_to(self, env: Envelope) -> bool:
        return False  # changes parameters, never messages

    def protocol_overrides(self, protocol_name: str) -> dict[str, Any]:
        cls = PROTOCOLS.get(protocol_name)
        aliases = cls.knob_params
        fields = cls.Config.model_fields
        out = {}
        for knob, value in self.knobs().items():
            param = aliases.get(knob, knob)
            if param is None or param not in fields:
                raise TestbedError(
                    f"defense {self.name} sets the knob {knob!r}, but protocol {protocol_name} "
                    f"has no such parameter; its parameters: {', '.join(sorted(fields))}"
                )
            out[param] = value
        return out


class RandomTConfig(PluginConfig):
    t_range: tuple[float, float] = Field((0.05, 0.95), description="t ~ U(low, high)")

    @model_validator(mode="after")
    def _check(self):
        lo, hi = self.t_range
        if not 0.0 < lo < hi < 1.0:
            raise ValueError("t_range must satisfy 0 < low < high < 1")
        return self


@DEFENSES.register
class RandomT(KnobDefense):
    """Protocol knob: draw the interpolation time t at random (private to its drawer)."""

    name = "random_t"
    Config = RandomTConfig

    def knobs(self):
        return {"t": "random", "t_range": tuple(self.config.t_range)}


class LargeTConfig(PluginConfig):
    t: float = Field(0.9, ge=0.5, lt=1.0, description="interpolation time in [0.5, 1)")


@DEFENSES.register
class LargeT(KnobDefense):
    """Protocol knob: a large interpolation time t (messages carry less of the private measure)."""

    name = "large_t"
    Config = LargeTConfig

    def knobs(self):
        return {"t": float(self.config.t)}


class DistancesAtEndConfig(PluginConfig):
    pass


@DEFENSES.register
class DistancesAtEnd(KnobDefense):
    """Protocol knob: send distances only after the last round (FedWAD's advice)."""

    name = "distances_at_end"
    Config = DistancesAtEndConfig

    def knobs(self):
        return {"distances": "end"}


class SmallSupportConfig(PluginConfig):
    support_size: int = Field(5, gt=0, description="number of support atoms S")


@DEFENSES.register
class SmallSupport(KnobDefense):
    """Protocol knob: a smaller support S for the exchanged measures."""

    name = "small_support"
    Config = SmallSupportConfig

    def knobs(self):
        return {"support_size": int(self.config.support_size)}
