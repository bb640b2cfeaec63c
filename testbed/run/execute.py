"""``execute()``: the one driver of the run stages.

``testbed run`` and every sweep cell call :func:`execute` with an output directory; ``audit``
stops after the World (``until="world"``) and plays its distinguishing game on it; ``bench``
times it; ``testbed attack`` replays a saved transcript (:class:`Replay`): the protocol does not
run again, the World is rebuilt from the seed for the public information and the scorer, and the
attack and score stages run on the saved messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from testbed.exchange.bus import Transcript, atomic_write_bytes
from testbed.run.attack import run_attacks
from testbed.run.evaluate import Evaluation, evaluate
from testbed.run.exchange import Exchange, run_protocol, world_guard
from testbed.run.manifest import write_manifest
from testbed.run.results import (
    jsonable,
    package_versions,
    results_row,
    seal_results,
    write_json,
)
from testbed.run.roster import World, build_world
from testbed.run.rundir import fresh_run_dir
from testbed.run.scenario import ResolvedScenario
from testbed.run.score import ground_truth, score_runs
from testbed.run.view import observe
from testbed.scenario.limits import cell_budget
from testbed.scenario.preflight import skipped_attacks, without_output
from testbed.scoring.evidence import write_evidence
from testbed.scoring.results_schema import check_results

__all__ = ["Replay", "RunOutput", "attack_and_score", "execute", "run_and_evaluate"]

Until = Literal["world", "results", "scores"]


@dataclass(frozen=True)
class Replay:
    """Attack a saved transcript instead of running the protocol.

    ``released``: the estimates results.json recorded (attacks find them in
    ``public.extra["released"]``); ``observer``/``colluders`` override the scenario's threat model.
    """

    transcript: Transcript
    released: dict[str, Any] | None = None
    observer: str | None = None
    colluders: tuple[str, ...] | None = None


@dataclass
class RunOutput:
    """What :func:`execute` produced; fields after the ``until`` stage are None."""

    out_dir: Path | None
    world: World
    results: dict | None = None
    transcript: Transcript | None = None
    elapsed: float = 0.0
    exchange: Exchange | None = None
    evaluation: Evaluation | None = None
    rows: list[dict] = field(default_factory=list)


def _default_dir(rs: ResolvedScenario) -> Path:
    sc = rs.scenario
    return Path(sc.output.dir or Path("runs") / f"{sc.name}-{rs.config_hash[:8]}")


def execute(
    scenario,
    out_dir: str | Path | None = None,
    *,
    progress: bool = False,
    until: Until = "scores",
    write: bool = True,
    replay: Replay | None = None,
    world: World | None = None,
    finish=None,
) -> RunOutput:
    """Drive the stages for one scenario (a :class:`~testbed.scenario.schema.Scenario` or a
    :class:`ResolvedScenario`).

    ``until``: the last stage to run — ``"world"`` (the roster stage: data, parties, protocol,
    defenses, public info), ``"results"`` (protocol, reference, accuracy: the results row
    without attacks) or ``"scores"`` (everything). ``write``: write the run directory
    (``out_dir``, default ``output.dir`` or ``runs/<name>-<hash>``) under its lock; only with
    ``until="scores"``. ``replay``: attack a saved transcript (no protocol run, nothing written).
    ``world``: a World already built for this scenario (a caller that inspects it first).
    ``finish``: called with the run directory once it is in place, before its lock is released
    (``testbed run`` writes the report and signs the manifest there).

    The run is written into a new directory beside ``out_dir`` and swapped in whole
    (:func:`~testbed.run.rundir.fresh_run_dir`): an earlier run there is replaced, never mixed.
    """
    rs = ResolvedScenario.of(scenario if world is None else world.rs)
    with cell_budget(rs.scenario):  # limits.cell_seconds, when set
        return _execute(rs, out_dir, progress, until, write, replay, world, finish)


def _execute(rs, out_dir, progress, until, write, replay, world, finish) -> RunOutput:
    if until != "world" and rs.scenario.guard_mode != "off":
        from testbed.exchange.guard_worker import shared_worker  # lazy: keeps refused input fast

        shared_worker()  # starts the guard's worker while the data loads (never waits)
    if world is None:
        world = build_world(rs)
    if until == "world":
        return RunOutput(None, world)
    if replay is not None:
        guard = world_guard(world)
        if guard is not None and replay.released is not None:  # a saved run's released values
            guard.check_release({"estimates": replay.released})
        rows = attack_and_score(
            world,
            replay.transcript,
            replay.released,
            observer=replay.observer,
            colluders=replay.colluders,
        )
        return RunOutput(None, world, rows=rows)
    if not write or until != "scores":
        return _run(world, None, progress, until, evidence=None)
    out = Path(out_dir) if out_dir is not None else _default_dir(rs)
    with fresh_run_dir(out) as w:  # written beside `out`, then swapped in whole, locked
        res = _write_run(rs, world, w.path, progress, until)
        w.commit()
        res.transcript.relocate(out)
        if finish is not None:
            finish(out)  # e.g. the report: written before the lock is released
    res.out_dir = out
    return res


def _write_run(rs, world, out: Path, progress, until) -> RunOutput:
    """Every file of a run directory, into ``out``; results.json last but the manifest."""
    atomic_write_bytes(out / "resolved.yaml", yaml.safe_dump(rs.as_json(), sort_keys=True).encode())
    atomic_write_bytes(out / "config_hash", (rs.config_hash + "\n").encode())
    evidence: dict = {}  # pictures of leakage for the report (leakage.npz)
    res = _run(world, out, progress, until, evidence=evidence)
    write_evidence(out, evidence)
    if rs.scenario.output.save_transcript:
        res.transcript.save(out)
    write_json(out / "run_info.json", {"seconds": res.elapsed, **package_versions()})
    seal_results(res.results, res.transcript, evidence)
    # the results schema's row, checked before it is written; a sweep treats it as "finished"
    write_json(out / "results.json", check_results(jsonable(res.results), "results.json"))
    write_manifest(out)
    return res


def run_and_evaluate(
    world: World, progress: bool = False, spill_dir: Path | None = None
) -> RunOutput:
    """The protocol, reference and accuracy stages on ``world``: the results row without
    attacks. With ``spill_dir`` (the run directory) payloads past the transcript's memory
    threshold go to a file there."""
    # the reference stage runs while the guard's worker searches the protocol's last messages
    exchange = run_protocol(
        world, progress=progress, spill_dir=spill_dir, then=lambda r: evaluate(world, r)
    )
    ev = exchange.after
    results = results_row(world, exchange, ev)
    return RunOutput(spill_dir, world, results, exchange.transcript, exchange.seconds, exchange, ev)


def attack_and_score(
    world: World,
    transcript: Transcript,
    released: dict[str, Any] | None = None,
    *,
    observer: str | None = None,
    colluders: tuple[str, ...] | None = None,
    evidence: dict | None = None,
) -> list[dict]:
    """The view, attack and score stages: every attack of the scenario on what the observer
    (default: the scenario's threat model) saw of ``transcript``; the scored rows.
    ``released``: the protocol's estimates, which attacks find in ``public.extra["released"]``.
    ``evidence``: when a dict, it receives the arrays the report draws for each row."""
    if not world.scenario.attacks:
        return []
    obs = observe(world, transcript, released, observer, colluders)
    runs = run_attacks(world.rs, obs)
    return score_runs(
        runs,
        ground_truth(world),
        dataset=world.scenario.data.dataset.name,
        evidence=evidence,
        audited_claims=bool(world.ledger.parties()),
        coalition=frozenset((obs.observer, *obs.colluders)),
    )


def _run(world: World, spill_dir: Path | None, progress: bool, until: Until, evidence) -> RunOutput:
    out = run_and_evaluate(world, progress, spill_dir)
    if until == "scores":
        out.rows = attack_and_score(
            world, out.transcript, out.results["estimates"], evidence=evidence
        )
        out.results["attacks"] = out.rows
        skipped = skipped_attacks(world.rs)
        if skipped:  # listed, never dropped in silence (absent when none: older results unchanged)
            out.results["skipped_attacks"] = skipped
        silent = without_output(world.rs, out.rows)
        if silent:  # ran, returned nothing: "produced no output", never "no leak"
            out.results["attacks_without_output"] = silent
    return out
