"""Stage 6: attacks run on an Observation — nothing else.

Each attack runs in its own sandboxed process (:mod:`testbed.sandbox.isolation`) on a serialised
copy of the View and the public information, under the scenario's ``limits:`` (wall clock,
memory, output size); its outputs and its prior-only baseline come back as data and are
validated against the AttackOutput schema. An attack that fails, runs out of time or memory or
sends too much becomes a failure record (phase and one-line reason) beside the others' results:
one attack never loses the run. Its random streams are derived from the Observation's
``attack_key`` (:func:`testbed.seeding.keyed_rng`), never from the root seed. This stage never
holds ground truth: it receives the scenario's attack specs and an
:class:`~testbed.run.view.Observation` only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from testbed.errors import TestbedError
from testbed.registry import ATTACKS
from testbed.run.view import Observation
from testbed.sandbox.confine import isolation_level
from testbed.sandbox.isolation import AttackFailedError, AttackLimits, run_isolated
from testbed.scenario.labels import attack_labels
from testbed.scenario.limits import ATTACK_MEMORY_GB, ATTACK_OUTPUT_MB, ATTACK_SECONDS
from testbed.scenario.preflight import attack_at
from testbed.seeding import keyed_rng

_LOG = logging.getLogger("testbed.attack")  # --debug shows a failed attack's traceback

__all__ = ["AttackRun", "attack_limits", "attack_labels", "run_attacks"]


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
    isolation: str = ""  # the sandbox level it ran under (testbed.sandbox.confine)
    failure: tuple[str, str] | None = None  # (phase, one-line reason) when it produced nothing


def _validate(name: str, outputs, baseline, public, cls) -> None:
    """Outputs and baseline follow the AttackOutput schema; else one line naming the plugin."""
    from attacks._base import OUTPUT_KINDS, AttackOutputError, validate_outputs

    for phase, outs in (("run", outputs), ("baseline", baseline)):
        try:
            validate_outputs(list(outs), public, getattr(cls, "output_kinds", None) or OUTPUT_KINDS)
        except AttackOutputError as exc:  # the caller's line names the attack already
            raise AttackOutputError(f"{phase} returned an invalid output: {exc}") from None


def attack_limits(scenario) -> AttackLimits:
    """The scenario's ``limits:`` for each attack process, defaults filled in."""
    lim = getattr(scenario, "limits", None)

    def get(key, default):
        value = getattr(lim, key, None) if lim is not None else None
        return default if value is None else value

    return AttackLimits(
        seconds=float(get("attack_seconds", ATTACK_SECONDS)),
        memory_bytes=int(get("attack_memory_gb", ATTACK_MEMORY_GB) * 2**30),
        output_bytes=int(get("attack_output_mb", ATTACK_OUTPUT_MB) * 2**20),
        sandbox=bool(get("attack_sandbox", True)),
    )


def run_attacks(scenario, resolved: dict, obs: Observation) -> list[AttackRun]:
    """Run every attack of ``scenario`` that applies to its protocol on ``obs``; a failed attack
    is an AttackRun with ``failure`` set and no outputs."""
    runs: list[AttackRun] = []
    if not scenario.attacks:
        return runs
    if len(obs.attack_key) < 16:
        raise TestbedError("the observation carries no attack key (build it with observe())")
    labels = attack_labels(
        [
            {**resolved["attacks"][i], "label": spec.label, "target": spec.target}
            for i, spec in enumerate(scenario.attacks)
        ]
    )
    limits = attack_limits(scenario)
    for i, spec in enumerate(scenario.attacks):
        cls = ATTACKS.get(spec.name)
        params = resolved["attacks"][i]["params"]
        if not cls(cls.Config(**params)).applies_to(scenario.protocol.name):
            if getattr(spec, "if_not_applicable", "error") == "skip":
                continue  # e.g. a sweep over protocols: listed as skipped (scenario.preflight)
            raise TestbedError(
                f"{attack_at(scenario, i)}: attacks[{i}] {spec.name!r} does not apply to protocol "
                f"{scenario.protocol.name!r} (it applies to: {', '.join(cls.protocols)}); "
                "set `if_not_applicable: skip` on it to list it as skipped"
            )
        head = (i, spec.name, labels[i], spec.target, obs.observer)
        try:
            got = run_isolated(
                cls,
                params,
                obs.view,
                obs.public,
                keyed_rng(obs.attack_key, "attack", i, spec.name),
                keyed_rng(obs.attack_key, "baseline", i, spec.name),
                limits,
            )
        except AttackFailedError as exc:
            _LOG.debug("--- %s: traceback in the attack's process ---\n%s", exc, exc.details)
            runs.append(AttackRun(*head, (), (), _level(exc, limits), (exc.phase, exc.reason)))
            continue
        try:
            _validate(spec.name, got.outputs, got.baseline, obs.public, cls)
        except TestbedError as exc:  # outputs that break the AttackOutput schema
            runs.append(AttackRun(*head, (), (), got.isolation, ("output", str(exc))))
            continue
        runs.append(AttackRun(*head, tuple(got.outputs), tuple(got.baseline), got.isolation))
    return runs


def _level(exc: AttackFailedError, limits: AttackLimits) -> str:
    """The level the failed attack's process reported; if it said nothing (killed, timed out),
    the level this kernel gives (testbed.sandbox.confine.isolation_level)."""
    return exc.isolation or (isolation_level() if limits.sandbox else "process")
