"""Fault injection (issue 48, fault 10): SIGTERM stops a sweep as Ctrl-C does (one line, finished
cells kept, exit 143); after ``kill -9`` of a ``--jobs 2`` sweep no process it started (workers,
their attack forkservers) lives on; the lock refusal names what the holder is doing."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _sweep_process import finished_cells as _cells
from _sweep_process import slow_sweep, start_sweep
from _sweep_process import wait_for_a_cell as _wait_for_a_cell

from testbed.run.rundir import LOCK_NAME, RunDirLockedError, run_dir_lock

ATTACKED = slow_sweep(
    "attacked_sweep", "threat_model: {observer: server}\nattacks:\n  - {name: sent_rows}\n"
)


def _start(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    return start_sweep(tmp_path, ATTACKED, "sweep.yaml")


def _processes() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (parent pid, state)."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path("/proc", pid, "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        out[int(pid)] = (int(stat[1]), stat[0])
    return out


def _descendants(root: int) -> set[int]:
    procs = _processes()
    found, todo = set(), [root]
    while todo:
        p = todo.pop()
        kids = [c for c, (pp, _) in procs.items() if pp == p and c not in found]
        found.update(kids)
        todo += kids
    return found


def _alive(pids: set[int]) -> list[int]:
    procs = _processes()
    return sorted(p for p in pids if p in procs and procs[p][1] != "Z")


# a sweep of processes signalled mid-run: minutes on 2 busy cores; Ctrl-C of a sweep stays in
# make test (test_interrupt)
@pytest.mark.slow
def test_sigterm_stops_a_sweep_as_ctrl_c_does(tmp_path):
    proc, out = _start(tmp_path)
    _wait_for_a_cell(proc, out)
    os.kill(proc.pid, signal.SIGTERM)  # `kill PID`: the driver alone, as a scheduler sends it
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "terminated (SIGTERM)"
    done = _cells(out)
    assert 1 <= len(done) < 12
    rows = [json.loads(r) for r in (out / "results.jsonl").read_text().splitlines()]
    assert sorted({r["cell"] for r in rows}) == sorted(p.parent.name for p in done)
    assert not list((out / "cells").glob(".*.tmp"))


# a sweep of processes signalled mid-run: minutes on 2 busy cores; Ctrl-C of a sweep stays in
# make test (test_interrupt)
@pytest.mark.slow
def test_nothing_outlives_a_killed_sweep_by_more_than_a_second_or_two(tmp_path):
    proc, out = _start(tmp_path)
    _wait_for_a_cell(proc, out)  # the workers have run attacks: their forkservers are up
    time.sleep(0.5)
    started = _descendants(proc.pid)
    assert len(started) >= 3, started  # two workers and at least one forkserver
    proc.kill()  # SIGKILL: no clean-up code runs in the driver
    proc.wait()
    time.sleep(2.0)
    left = _alive(started)
    assert left == [], [Path(f"/proc/{p}/cmdline").read_bytes()[:120] for p in left]


def test_the_lock_refusal_names_a_reader_as_reading(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    fd = os.open(run / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # a reader (report, verify) holds it
        with pytest.raises(RunDirLockedError, match="another testbed process is reading"):
            with run_dir_lock(run, write=True):
                pass
        fcntl.flock(fd, fcntl.LOCK_EX)  # a writer holds it
        with pytest.raises(RunDirLockedError, match="another testbed process is writing"):
            with run_dir_lock(run, write=True):
                pass
    finally:
        os.close(fd)


# fault injection into verify --rerun, 2.5 s on an idle core; verify --rerun stays in make test
# (test_verify)
@pytest.mark.slow
def test_a_killed_verify_rerun_leaves_nothing_the_next_one_does_not_remove(tmp_path, monkeypatch):
    import tempfile

    from test_verify import TRIANGLE

    from testbed.run.execute import execute
    from testbed.run.rerun import RERUN_PREFIX, rerun_compare
    from testbed.scenario.loading import parse_scenario

    # Prepare: a saved run, and a temporary folder of our own
    run = tmp_path / "run"
    execute(parse_scenario(TRIANGLE, "t.yaml", "."), run)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed", "verify", str(run), "--rerun", "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(tmp), "MPLBACKEND": "Agg"},
    )
    deadline = time.monotonic() + 300
    while not list(tmp.glob(f"{RERUN_PREFIX}*/run*")):  # it is running the scenario again
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # Execute: kill -9, then the next `verify --rerun`
    proc.kill()
    proc.wait()
    left = list(tmp.glob(f"{RERUN_PREFIX}*"))
    assert left, "the killed verify --rerun left nothing to remove"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    assert rerun_compare(run)[0].startswith("re-ran 1 scenario(s)")
    # Assert: what the killed one left is gone, and the new one removed its own
    assert list(tmp.glob(f"{RERUN_PREFIX}*")) == []
