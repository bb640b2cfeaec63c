"""Stage 1: a validated :class:`~testbed.scenario.schema.Scenario` as a frozen, hashed record
(:class:`~testbed.scenario.resolve.ResolvedScenario`, built by the scenario's loader: every
plugin's config validated once)."""

from __future__ import annotations

from testbed.scenario.resolve import ResolvedScenario

__all__ = ["ResolvedScenario"]
