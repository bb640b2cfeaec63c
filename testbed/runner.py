"""Run one scenario and write its run directory (``testbed run``).

The stages live in :mod:`testbed.run` (one module each) and :func:`testbed.run.execute` drives
them; this module keeps the entry points that scripts and tests call:

- :func:`run_scenario` — the whole run, written to its run directory;
- :func:`build_world` — the roster stage (data, parties, protocol, defenses, public info);
- :func:`run_world` — protocol, reference and accuracy on a World, without attacks.
"""

from __future__ import annotations

from pathlib import Path

from testbed.bus import Transcript
from testbed.run.evaluate import score_detection
from testbed.run.execute import RunOutput, execute, run_and_evaluate
from testbed.run.results import (
    jsonable,
    package_versions,
    transcript_summary,
    write_json,
)
from testbed.run.roster import World, build_world
from testbed.run.score import DELTA

__all__ = [
    "DELTA",
    "RunOutput",
    "World",
    "build_world",
    "jsonable",
    "package_versions",
    "run_scenario",
    "run_world",
    "score_detection",
    "transcript_summary",
    "write_json",
]


def run_world(
    world: World, progress: bool = False, spill_dir: Path | None = None
) -> tuple[dict, Transcript, float]:
    """Run the protocol on the bus and evaluate it; return (results without attacks,
    transcript, seconds). With ``spill_dir`` payloads past the transcript's memory threshold go
    to a file there."""
    out = run_and_evaluate(world, progress, spill_dir)
    return out.results, out.transcript, out.elapsed


def run_scenario(sc, out_dir: str | Path | None = None, progress: bool = False) -> RunOutput:
    """Run a validated scenario end to end and write its run directory."""
    return execute(sc, out_dir, progress=progress)
