"""Public contract checks for protocol plugins (the protocol half of the contract kit).

A protocol author calls, from their own tests::

    from testbed.testing import check_protocol
    check_protocol(MyProtocol)               # raises AssertionError naming every failed check

or parametrises pytest over :func:`protocol_checks` for one test per check. The protocol must be
registered (entry point, or ``PROTOCOLS.register``) under its ``name``. Every check runs on one
small run of the protocol's *contract scenario* (``scenario=`` argument, else the class's
``contract_scenario``, else ``scenarios/contract_tiny[_<name>].yaml``, else a two-party Gaussian
scenario), with the bus guard in ``record`` mode so a leaking protocol still finishes:

- ``default_config_valid``, ``unknown_param_rejected``, ``init_stores_config_only``: as for
  attacks;
- ``matches_reference``: every estimate compared with ``protocol.reference(parties)`` (the
  central POT value) is within the protocol's declared ``reference_tolerance`` (relative);
- ``deterministic``: a second run with the same seed has the same transcript digest (every
  message, its route and its payload) and the same estimates;
- ``declared_kinds_only``: every message kind sent matches the protocol's ``message_kinds``;
- ``no_private_rows``: no message the server, a party or an eavesdropper sees, and nothing the
  protocol releases (estimates, outputs, ...), carries a private row of another party or a
  near-copy of one: the testbed's own guard (:func:`testbed.run.exchange.world_guard`, the
  scenario's ``guard_rel_tol``), which the protocol cannot configure; nor a copy in disguise:
  scaled, slightly noised, under a similarity transform or an affine map, or fixed by a released
  mean and covariance (:mod:`testbed.testing.disguise`, the transform named).
"""

from __future__ import annotations

import fnmatch
import functools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.errors import TestbedError
from testbed.exchange.bus import EAVESDROPPER, SERVER, Transcript
from testbed.exchange.guard import GuardFinding
from testbed.registry import PROTOCOLS
from testbed.run import execute
from testbed.run.exchange import world_guard
from testbed.scenario.loading import parse_scenario
from testbed.testing import disguise  # the module: tests replace disguise_findings
from testbed.testing.checks import (
    COMMON_CHECKS,
    _collect,
    _same,
    contract_scenario,
    resolve_contract_scenario,
)

__all__ = [
    "PROTOCOL_CHECKS",
    "ProtocolRun",
    "check_protocol",
    "private_row_findings",
    "protocol_checks",
    "protocol_run",
    "protocol_scenario",
]

#: the scenario a protocol without a contract scenario of its own is checked on
DEFAULT_SCENARIO: dict[str, Any] = {
    "name": "protocol_contract",
    "seed": 7,
    "data": {
        "dataset": {
            "name": "gaussians",
            "params": {"d": 3, "components": [{"n": 30, "mean": 0.0}, {"n": 20, "mean": 2.0}]},
        },
        "partition": {"name": "class_subsets", "params": {"classes": [[0], [1]]}},
        "parties": ["alice", "bob"],
    },
    "protocol": {"name": "", "params": {}},
}


@dataclass(frozen=True)
class ProtocolRun:
    """One finished run of a protocol's contract scenario (guard in record mode)."""

    scenario: Any  # testbed.scenario.schema.Scenario
    world: Any  # testbed.runner.World
    results: dict
    transcript: Transcript

    @property
    def observers(self) -> tuple[str, ...]:
        return (SERVER, *self.world.parties, EAVESDROPPER)


def _scenario_source(cls, scenario) -> tuple[dict, str, str]:
    """(raw scenario dict, where it came from, base dir)."""
    if isinstance(scenario, Mapping):
        return dict(scenario), f"<{cls.name} contract scenario>", "."
    if scenario is not None:
        path = resolve_contract_scenario(cls, scenario, explicit=True)
    elif cls.contract_scenario:
        path = resolve_contract_scenario(cls, cls.contract_scenario)
    else:
        try:
            path = contract_scenario(cls.name)
        except TestbedError:
            return dict(DEFAULT_SCENARIO), "<default two-party Gaussian scenario>", "."
    return yaml.safe_load(path.read_text()), str(path), str(path.parent)


def protocol_scenario(cls, scenario: str | Path | Mapping | None = None):
    """The validated contract scenario of ``cls``: its protocol is ``cls`` (the scenario's own
    params are kept when it already names ``cls``), the guard records instead of stopping, no
    attacks, no sweep."""
    if cls.name not in PROTOCOLS or PROTOCOLS.get(cls.name) is not cls:
        raise TestbedError(
            f"protocol {cls.__qualname__} is not registered as {cls.name!r}: install its package "
            "(entry point in group ot_testbed.protocols) or call PROTOCOLS.register first"
        )
    raw, where, base = _scenario_source(cls, scenario)
    raw = dict(raw)
    proto = dict(raw.get("protocol") or {})
    if proto.get("name") != cls.name:
        proto = {"name": cls.name, "params": {}}
    raw.update(protocol=proto, guard="record", attacks=[])
    for key in ("sweep", "seeds", "defenses"):
        raw.pop(key, None)
    raw["output"] = {"save_transcript": False}
    return parse_scenario(yaml.safe_dump(raw, sort_keys=False), where, base)


def _run(sc) -> ProtocolRun:
    run = execute(sc, until="results", write=False)
    return ProtocolRun(sc, run.world, run.results, run.transcript)


@functools.lru_cache(maxsize=16)
def _cached_run(cls, text: str, where: str, base: str) -> ProtocolRun:
    return _run(parse_scenario(text, where, base))


def protocol_run(cls, scenario: str | Path | Mapping | None = None) -> ProtocolRun:
    """Run (once per process, cached) the contract scenario of ``cls``."""
    sc = protocol_scenario(cls, scenario)
    return _cached_run(cls, yaml.safe_dump(sc._raw, sort_keys=True), sc._fname, sc._base_dir)


def private_row_findings(run: ProtocolRun, coalitions=()) -> dict[str, list]:
    """``{observer: [GuardFinding]}``: near-copies of a private row of *another* party (not the
    observer's own, nor its colluders') in the messages each observer saw: the server, each
    party, the eavesdropper, and each ``(observer, colluders)`` of ``coalitions`` (keyed
    ``"observer+colluder+..."``); plus, for every observer, what the run's guard found in the
    protocol's released values (everyone receives them). The guard is the testbed's
    (:func:`testbed.run.exchange.world_guard`): one index for every observer."""
    guard = world_guard(run.world, mode="record")
    fields = GuardFinding.__dataclass_fields__
    released = [
        GuardFinding(**{k: f[k] for k in fields})
        for f in (run.results.get("guard") or {}).get("findings", [])
        if f.get("seq", 0) < 0
    ]
    models = [(o, ()) for o in run.observers] + [(o, tuple(c)) for o, c in coalitions]
    out = {}
    for obs, coll in models:
        who = (obs, *coll)
        seen = run.transcript.view(obs, coll).envelopes
        found = [guard.finding(env, ignore=who) for env in seen] if guard is not None else []
        out["+".join(who)] = [f for f in found if f is not None] + released
    return out


# ----------------------------------------------------------------------------- checks
def check_matches_reference(cls, scenario=None) -> None:
    tol = cls.reference_tolerance
    if tol is None:
        raise AssertionError(
            f"{cls.__qualname__} declares no reference_tolerance (relative; a number or "
            "{estimate: tolerance})"
        )
    run = protocol_run(cls, scenario)
    acc = run.results["accuracy"]
    if isinstance(tol, Mapping):  # keys may be globs (e.g. "distance_*")
        wanted = {k: float(t) for g, t in tol.items() for k in acc if fnmatch.fnmatchcase(k, g)}
        missing = sorted(g for g in tol if not any(fnmatch.fnmatchcase(k, g) for k in acc))
    else:
        wanted, missing = {k: float(tol) for k in acc}, []
    if missing or not wanted:
        raise AssertionError(
            f"no estimate to compare with the reference for {missing or 'any key'}: the run "
            f"estimated {sorted(run.results['estimates'])}, the reference has "
            f"{sorted(run.results['reference'])}"
        )
    bad = []
    for key, t in sorted(wanted.items()):
        err = acc[key]["relative_error"]
        if err is None or not math.isfinite(err) or err > t:
            bad.append(f"{key}: relative error {err:.4g} > declared tolerance {t:g}")
    assert not bad, "estimate differs from the central POT reference: " + "; ".join(bad)


def check_deterministic(cls, scenario=None) -> None:
    first = protocol_run(cls, scenario)
    second = _run(protocol_scenario(cls, scenario))
    a, b = first.transcript, second.transcript
    if a.digest() != b.digest():
        diff = next(
            (
                f"first difference at message #{x.seq} ({x.kind} vs {y.kind})"
                for x, y in zip(a, b)
                if (x.kind, x.sender, x.receiver, x.digest)
                != (y.kind, y.sender, y.receiver, y.digest)
            ),
            f"{len(a)} vs {len(b)} messages",
        )
        raise AssertionError(
            f"two runs with seed {first.scenario.seed} give different transcripts ({diff}): "
            "draw randomness only from the rng run() receives"
        )
    assert _same(dict(first.results["estimates"]), dict(second.results["estimates"])), (
        f"two runs with seed {first.scenario.seed} give different estimates"
    )


def check_declared_kinds_only(cls, scenario=None) -> None:
    declared = tuple(cls.message_kinds or ())
    if not declared:
        raise AssertionError(f"{cls.__qualname__} declares no message_kinds")
    run = protocol_run(cls, scenario)
    sent: dict[str, int] = {}
    for e in run.transcript:
        sent[e.kind] = sent.get(e.kind, 0) + 1
    undeclared = {
        k: n
        for k, n in sorted(sent.items())
        if not any(fnmatch.fnmatchcase(k, g) for g in declared)
    }
    assert not undeclared, (
        "sent message kinds not in message_kinds: "
        + ", ".join(f"{k} ({n} messages)" for k, n in undeclared.items())
        + f"; declared: {list(declared)}"
    )
    assert sent, "the protocol sent no message at all"


def check_no_private_rows(cls, scenario=None) -> None:
    run = protocol_run(cls, scenario)
    found = {o: f for o, f in private_row_findings(run).items() if f}
    disguised = {o: f for o, f in disguise.disguise_findings(run).items() if f}
    said = []
    if found:
        lines = [f"observer {o}: {len(f)} message(s), e.g. {f[0].line()}" for o, f in found.items()]
        said.append("private rows reach other parties: " + " | ".join(lines))
    if disguised:
        lines = [
            f"observer {o}: {len(f)} finding(s), e.g. {f[0].line()}" for o, f in disguised.items()
        ]
        said.append("private rows reach other parties in disguise: " + " | ".join(lines))
    if said:
        raise AssertionError("; ".join(said))


Check = Callable[..., None]

PROTOCOL_CHECKS: dict[str, Check] = {
    **COMMON_CHECKS,
    "matches_reference": check_matches_reference,
    "deterministic": check_deterministic,
    "declared_kinds_only": check_declared_kinds_only,
    "no_private_rows": check_no_private_rows,
}


def protocol_checks(cls, scenario=None) -> Iterator[tuple[str, Callable[[], None]]]:
    """Yield ``(check_name, thunk)`` for every protocol check (for pytest ids)."""
    for name, fn in PROTOCOL_CHECKS.items():
        if name in COMMON_CHECKS:
            yield name, functools.partial(fn, cls, None)
        else:
            yield name, functools.partial(fn, cls, scenario)


def check_protocol(
    cls, scenario=None, expected_failures: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Run every protocol check; raise AssertionError naming each unexpected failure (and each
    check listed in ``expected_failures`` that passed). Returns ``{check: "passed" | "xfail"}``."""
    _scenario_source(cls, scenario)  # a scenario not found: one error, not one per check
    return _collect(cls, protocol_checks(cls, scenario), expected_failures, "protocol contract")
