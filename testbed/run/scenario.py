"""Stage 1: a validated :class:`~testbed.scenario.schema.Scenario` as a frozen, hashed record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from testbed.scenario.resolve import config_hash, resolve
from testbed.scenario.schema import Scenario

__all__ = ["ResolvedScenario"]


@dataclass(frozen=True)
class ResolvedScenario:
    """A scenario with every default filled in (``resolved``) and the hash that names its run.

    ``resolved`` is what ``resolved.yaml`` holds; ``config_hash`` keys the run directory, the
    sweep's cell cache and ``testbed attack``'s check that a run directory is one run's.
    """

    scenario: Scenario
    resolved: dict[str, Any]  # never modified after construction
    config_hash: str

    @classmethod
    def of(cls, sc: Scenario | ResolvedScenario) -> ResolvedScenario:
        if isinstance(sc, ResolvedScenario):
            return sc
        resolved = resolve(sc)
        return cls(sc, resolved, config_hash(resolved))

    @property
    def seed(self) -> int:
        return self.scenario.seed

    @property
    def name(self) -> str:
        return self.scenario.name
