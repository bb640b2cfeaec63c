"""Stage 6: attacks run on an Observation — nothing else.

Each attack runs in its own sandboxed process (:mod:`testbed.sandbox.isolation`) on a serialised
copy of the View and the public information, under the scenario's ``limits:`` (wall clock,
memory, output size); its outputs and its prior-only baseline come back as data and are
validated against the AttackOutput schema. An attack that fails, runs out of time or memory or
sends too much becomes a failure record (phase and one-line reason) beside the others' results:
one attack never loses the run. An entry with ``input:`` (attack chaining) runs after the
attack that label names and receives its outputs, in the sandbox like its View (never ground
truth); its baseline receives the upstream baseline's outputs. Its random streams are derived
from the Observation's ``attack_key`` (:func:`testbed.seeding.keyed_rng`), never from the root
seed. This stage never
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
from testbed.scenario.labels import attack_labels, attack_order
from testbed.scenario.limits import ATTACK_MEMORY_GB, ATTACK_OUTPUT_MB, ATTACK_SECONDS
from testbed.scenario.preflight import attack_at
from testbed.scenario.resolve import ResolvedScenario
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
    from attacks._base import (  # lazy: keeps refused input fast
        OUTPUT_KINDS,
        AttackOutputError,
        validate_outputs,
    )

    for phase, outs in (("run", outputs), ("baseline", baseline)):
        try:
            validate_outputs(list(outs), public, cls.output_kinds or OUTPUT_KINDS)
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


def run_attacks(rs: ResolvedScenario, obs: Observation) -> list[AttackRun]:
    """Run every attack of ``rs`` that applies to its protocol on ``obs``; a failed attack
    is an AttackRun with ``failure`` set and no outputs. An entry with ``input:`` runs after the
    entries of that label and receives their outputs (attack chaining, :func:`_upstream`); the
    runs come back in scenario order."""
    runs: list[AttackRun] = []
    scenario = rs.scenario
    if not scenario.attacks:
        return runs
    if len(obs.attack_key) < 16:
        raise TestbedError("the observation carries no attack key (build it with observe())")
    labels = attack_labels(rs.attack_entries())
    inputs = [getattr(spec, "input", None) for spec in scenario.attacks]
    order = attack_order(labels, inputs, lambda i: attack_at(scenario, i, "input"))
    limits = attack_limits(scenario)
    done: dict[int, AttackRun | None] = {}  # None: skipped (does not apply, `skip`)
    for i in order:
        spec = scenario.attacks[i]
        cls = ATTACKS.get(spec.name)
        cfg = rs.configs.attacks[i]
        if not cls(cfg).applies_to(scenario.protocol.name):
            if getattr(spec, "if_not_applicable", "error") == "skip":
                done[i] = None  # e.g. a sweep over protocols: listed as skipped (preflight)
                continue
            raise TestbedError(
                f"{attack_at(scenario, i)}: attacks[{i}] {spec.name!r} does not apply to protocol "
                f"{scenario.protocol.name!r} (it applies to: {', '.join(cls.protocols)}); "
                "set `if_not_applicable: skip` on it to list it as skipped"
            )
        head = (i, spec.name, labels[i], spec.target, obs.observer)
        upstream, why = _upstream(inputs[i], labels, done)
        if why:
            done[i] = AttackRun(*head, (), (), "", ("input", why))
            continue
        # the attack process builds its config from these params (its own, in its sandbox)
        done[i] = _run_one(cls, cfg.model_dump(mode="json"), head, obs, limits, upstream)
    return [done[i] for i in sorted(done) if done[i] is not None]


def _upstream(label: str | None, labels: list[str], done: dict) -> tuple[tuple, str]:
    """A chained attack's input: ``(run outputs, baseline outputs)`` of every entry labelled
    ``label`` (each kept to its own ``target:``), or a reason it has none (the upstream attack
    failed, or was skipped)."""
    if label is None:
        return ((), ()), ""
    ups = [done[j] for j, lab in enumerate(labels) if lab == label]
    if any(u is None for u in ups):
        return ((), ()), f"its input {label!r} was skipped (it does not apply to this protocol)"
    failed = next((u for u in ups if u.failure), None)
    if failed is not None:
        return ((), ()), f"its input {label!r} failed in {failed.failure[0]}: {failed.failure[1]}"

    def kept(u, outs):
        return tuple(o for o in outs if u.target is None or o.target == u.target)

    run = tuple(o for u in ups for o in kept(u, u.outputs))
    base = tuple(o for u in ups for o in kept(u, u.baseline))
    return (run, base), ""


def _run_one(cls, params, head: tuple, obs: Observation, limits, upstream) -> AttackRun:
    """One attack in its sandboxed process, its outputs checked against the schema."""
    i, name = head[0], head[1]
    try:
        got = run_isolated(
            cls,
            params,
            obs.view,
            obs.public,
            keyed_rng(obs.attack_key, "attack", i, name),
            keyed_rng(obs.attack_key, "baseline", i, name),
            limits,
            upstream,
        )
    except AttackFailedError as exc:
        _LOG.debug("--- %s: traceback in the attack's process ---\n%s", exc, exc.details)
        return AttackRun(*head, (), (), _level(exc, limits), (exc.phase, exc.reason))
    try:
        _validate(name, got.outputs, got.baseline, obs.public, cls)
    except TestbedError as exc:  # outputs that break the AttackOutput schema
        return AttackRun(*head, (), (), got.isolation, ("output", str(exc)))
    return AttackRun(*head, tuple(got.outputs), tuple(got.baseline), got.isolation)


def _level(exc: AttackFailedError, limits: AttackLimits) -> str:
    """The level the failed attack's process reported; if it said nothing (killed, timed out),
    the level this kernel gives (testbed.sandbox.confine.isolation_level)."""
    return exc.isolation or (isolation_level() if limits.sandbox else "process")
