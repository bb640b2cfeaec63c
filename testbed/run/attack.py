"""Stage 6: attacks run on an Observation — nothing else.

Each attack runs in its own process (:mod:`testbed.sandbox.isolation`) on a serialised copy of the View
and the public information; its outputs and its prior-only baseline come back as data and are
validated against the AttackOutput schema. This stage never holds ground truth: it receives the
scenario's attack specs and an :class:`~testbed.run.view.Observation` only.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.errors import TestbedError
from testbed.registry import ATTACKS
from testbed.run.view import Observation
from testbed.sandbox.isolation import run_isolated
from testbed.scenario.labels import attack_labels
from testbed.seeding import component_rng

__all__ = ["AttackRun", "attack_labels", "run_attacks"]


@dataclass(frozen=True)
class AttackRun:
    """One attack configuration's outputs and baseline outputs on one observation."""

    index: int  # position in the scenario's ``attacks``
    name: str
    label: str
    target: str | None  # the spec's target filter (None: every target the attack produced)
    observer: str
    outputs: tuple
    baseline: tuple


def _validate(name: str, outputs, baseline, public, cls) -> None:
    """Outputs and baseline follow the AttackOutput schema; else one line naming the plugin."""
    from attacks._base import OUTPUT_KINDS, AttackOutputError, validate_outputs

    for phase, outs in (("run", outputs), ("baseline", baseline)):
        try:
            validate_outputs(list(outs), public, getattr(cls, "output_kinds", None) or OUTPUT_KINDS)
        except AttackOutputError as exc:
            raise AttackOutputError(f"attack {name!r} ({phase} output): {exc}") from None


def run_attacks(scenario, resolved: dict, obs: Observation) -> list[AttackRun]:
    """Run every attack of ``scenario`` that applies to its protocol on ``obs``."""
    runs: list[AttackRun] = []
    if not scenario.attacks:
        return runs
    labels = attack_labels(
        [
            {**resolved["attacks"][i], "label": spec.label, "target": spec.target}
            for i, spec in enumerate(scenario.attacks)
        ]
    )
    for i, spec in enumerate(scenario.attacks):
        cls = ATTACKS.get(spec.name)
        params = resolved["attacks"][i]["params"]
        if not cls(cls.Config(**params)).applies_to(scenario.protocol.name):
            if getattr(spec, "if_not_applicable", "error") == "skip":
                continue  # e.g. a sweep over protocols: listed as skipped (scenario.preflight)
            raise TestbedError(
                f"attacks[{i}] {spec.name!r} does not apply to protocol "
                f"{scenario.protocol.name!r} (it applies to: {', '.join(cls.protocols)}); "
                "set `if_not_applicable: skip` on it to list it as skipped"
            )
        outputs, baseline = run_isolated(
            cls,
            params,
            obs.view,
            obs.public,
            component_rng(scenario.seed, "attack", i, spec.name),
            component_rng(scenario.seed, "baseline", i, spec.name),
        )
        _validate(spec.name, outputs, baseline, obs.public, cls)
        runs.append(
            AttackRun(
                i, spec.name, labels[i], spec.target, obs.observer, tuple(outputs), tuple(baseline)
            )
        )
    return runs
