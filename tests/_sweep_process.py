"""A sweep slow enough to interrupt (12 cells of 600 rows, S = 60), started as its own process
group, and the waits around it: shared by the interrupt and fault-injection tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from _scenarios import tiny


def slow_sweep(name: str, rest: str = "") -> str:
    """The interruptible sweep: ``rest`` (threat model, attacks) before its 12-cell sweep."""
    return (
        tiny(
            name,
            rest
            + """\
sweep:
  protocol.params.iterations: [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41]
""",
        )
        .replace("{n: 40, mean: 0.0}", "{n: 300, mean: 0.0}")
        .replace("{n: 30, mean: 2.0}", "{n: 300, mean: 2.0}")
        .replace("support_size: 5,", "support_size: 60,")
    )


def start_sweep(tmp_path: Path, text: str, fname: str) -> tuple[subprocess.Popen, Path]:
    """``testbed run`` of ``text`` with two workers, in its own process group (as a terminal's
    foreground job); its run directory."""
    scenario = tmp_path / fname
    scenario.write_text(text)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed", "run", str(scenario), "--out", str(out), "--jobs", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "MPLBACKEND": "Agg"},
        start_new_session=True,
    )
    return proc, out


def finished_cells(out: Path) -> list[Path]:
    """Finished cells: committed run directories (a cell is written in a hidden temp directory,
    which already holds results.json before it is swapped in)."""
    if not out.exists():
        return []
    found = (out / "cells").glob("*/results.json")
    return sorted(p for p in found if not p.parent.name.startswith("."))


def wait_for_a_cell(proc: subprocess.Popen, out: Path) -> None:
    deadline = time.monotonic() + 600
    while not finished_cells(out):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "no cell finished"
        time.sleep(0.05)
