"""Ctrl-C on a real sweep (issue 23, Build 5): SIGINT goes to the sweep's whole process group, as
a terminal sends it. The first one ends the sweep with exit code 130 and one line, every finished
cell kept; a second one ends it at once without a traceback; no worker process is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _scenarios import tiny
from _sweep_process import finished_cells as _cells
from _sweep_process import slow_sweep, start_sweep
from _sweep_process import wait_for_a_cell as _wait_for_a_cell

SLOW = slow_sweep("interruptible")


def _start(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    return start_sweep(tmp_path, SLOW, "slow.yaml")


def _group_alive(pgid: int) -> list[int]:
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path("/proc", pid, "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(stat[2]) == pgid and stat[0] != "Z":  # fields after the name: state, ppid, pgrp
            alive.append(int(pid))
    return alive


def _assert_nothing_left(pgid: int) -> None:
    deadline = time.monotonic() + 30  # the kernel delivers PDEATHSIG asynchronously
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group_alive(pgid) == [], "a worker of the sweep outlived it"


# slow (4.5 s: a sweep interrupted mid-way): make test keeps Ctrl-C on a run
# (test_ctrl_c_on_a_run_leaves_no_guard_worker) and tests/test_hostile.py's SIGINT of a run
@pytest.mark.slow
def test_first_ctrl_c_stops_the_sweep_keeps_finished_cells_and_exits_130(tmp_path):
    proc, out = _start(tmp_path)
    _wait_for_a_cell(proc, out)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "interrupted"
    done = _cells(out)
    assert 1 <= len(done) < 12, "the interrupt must stop the sweep before its end"
    for p in done:  # every finished cell is whole and kept
        json.loads(p.read_text())
    rows = [json.loads(r) for r in (out / "results.jsonl").read_text().splitlines()]
    assert sorted({r["cell"] for r in rows}) == sorted(p.parent.name for p in done)
    # and no half-written cell is left behind
    assert not list((out / "cells").glob(".*.tmp")), list((out / "cells").iterdir())
    _assert_nothing_left(proc.pid)


# ~30 s on 2 busy cores; the first Ctrl-C's test stays in make test
@pytest.mark.slow
def test_second_ctrl_c_exits_at_once_without_a_traceback(tmp_path):
    proc, out = _start(tmp_path)
    _wait_for_a_cell(proc, out)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert _cells(out), "finished cells are kept"
    _assert_nothing_left(proc.pid)


DRIVER = """
import sys, time
import numpy as np
from testbed.data.datasets import PartyData
from testbed.exchange.engines.pool import PoolBus
parties = {p: PartyData(p, np.zeros((2, 2))) for p in "abcd"}
bus = PoolBus(parties=parties, workers=2)
print(" ".join(str(p.pid) for p in bus._procs), flush=True)
time.sleep(600)
"""


# ~25 s on 2 busy cores; the pool engine's clean-up tests stay in make test
@pytest.mark.slow
def test_pool_engine_workers_die_with_a_killed_driver(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    proc.kill()  # SIGKILL: no clean-up code runs in the driver
    proc.wait()
    deadline = time.monotonic() + 30
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if Path(f"/proc/{p}").exists() and _state(p) != "Z"]
        time.sleep(0.1)
    assert alive == [], "a pool worker outlived its driver"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][:1]
    except OSError:
        return "Z"


def _guard_workers_of(pid: int) -> list[int]:
    """Live guard worker processes started by ``pid`` (their last argument is its pid)."""
    found = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path("/proc", p, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"testbed.exchange.guard_serve" in argv and argv[-2:] == [str(pid).encode(), b""]:
            if _state(p) != "Z":
                found.append(int(p))
    return found


# 3 s each on an idle core: one Ctrl-C in make test, two in make test-slow
@pytest.mark.parametrize("signals", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_ctrl_c_on_a_run_leaves_no_guard_worker(tmp_path, signals):
    """A single run (no --jobs) searches the guard's batches on a worker process in a session of
    its own (the terminal's Ctrl-C does not reach it): it must end with the run."""
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(SLOW.split("sweep:")[0].replace("interruptible", "one_run"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed", "run", str(scenario), "--out", str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "MPLBACKEND": "Agg", "OT_TESTBED_GUARD_WORKER": "1"},
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not _guard_workers_of(proc.pid):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the run started no guard worker"
        time.sleep(0.05)
    time.sleep(0.5)  # while it loads (imports POT and torch) or runs
    for _ in range(signals):
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.05)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 130), err.decode()
    assert "Traceback" not in err.decode()
    deadline = time.monotonic() + 30
    while _guard_workers_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _guard_workers_of(proc.pid) == [], "the guard worker outlived its run"


def test_an_import_interrupted_by_ctrl_c_is_an_interrupt(capsys):
    """A compiled module hit by Ctrl-C while it is being imported reports ``ImportError:
    initialization failed`` raised from the KeyboardInterrupt (pybind11): that is a Ctrl-C
    (exit 130, one line), not a fault (exit 1, "error: ImportError")."""
    from testbed.cli._common import EXIT_INTERRUPTED, guarded

    def command(args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc

    previous = signal.getsignal(signal.SIGINT)
    try:
        assert guarded(command, None, debug=False) == EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, previous)  # guarded armed the second-Ctrl-C exit
    assert capsys.readouterr().err == "interrupted\n"


class _DropsTheInterrupt:
    """An object whose finaliser is where the Ctrl-C lands: CPython prints "Exception ignored"
    for a KeyboardInterrupt raised there and goes on."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)


def test_a_ctrl_c_that_python_dropped_still_ends_the_command_130(capsys):
    """Hostile timing: the first Ctrl-C's KeyboardInterrupt lands in a finaliser (a weakref
    callback in the sweep that showed it), CPython drops it and the command finishes; the
    command line still reports it: exit 130, one line."""
    from testbed import sigint as interrupt
    from testbed.cli._common import EXIT_INTERRUPTED, guarded, interruptible

    def command(args):
        _DropsTheInterrupt()  # freed at once: the signal arrives inside __del__
        return 0

    previous, hook = signal.getsignal(signal.SIGINT), sys.unraisablehook
    try:
        sys.unraisablehook = sys.__unraisablehook__  # Python's own: prints to stderr
        interruptible()  # the command line's handler, as main() installs it
        assert guarded(command, None, debug=False) == EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = hook
        interrupt._seen[0] = False
    assert capsys.readouterr().err == "interrupted\n"  # no "Exception ignored" traceback


def test_a_sweep_stops_at_the_next_cell_after_a_dropped_ctrl_c(tmp_path):
    """The same in a sweep run one cell after another: the cells after the dropped Ctrl-C do
    not start, and the finished ones stay on disk."""
    from testbed import sigint as interrupt
    from testbed.run.sweep import run_sweep
    from testbed.scenario.loading import parse_scenario

    sc = parse_scenario(tiny("dropped", "sweep:\n  protocol.params.iterations: [2, 3, 4]\n"))
    interrupt._seen[0] = True  # as the handler leaves it when its exception was dropped
    try:
        with pytest.raises(KeyboardInterrupt):
            run_sweep(sc, tmp_path / "sweep")
    finally:
        interrupt._seen[0] = False
    assert not list((tmp_path / "sweep").glob("cells/*/results.json"))


_END = """\
import atexit, os, signal, sys, time
sys.argv = ["testbed", "plugins"]
atexit.register(print, "teardown ran", file=sys.stderr)
from testbed.cli.main import main
rc = main()
print("returned", rc, file=sys.stderr, flush=True)
atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(30)))
sys.exit(rc)
"""


def test_ctrl_c_during_the_teardown_ends_quietly_with_the_commands_code():
    """Once a command has returned, its results are on disk: a Ctrl-C during the interpreter's
    teardown (about a second with torch loaded) ends the process at once with the command's
    exit code, no traceback and no death by the signal."""
    proc = subprocess.run(
        [sys.executable, "-c", _END], capture_output=True, timeout=120, start_new_session=True
    )
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert err == "returned 0\n", err  # neither a traceback nor the rest of the teardown


def test_an_interrupted_command_skips_the_interpreters_teardown():
    """Interrupted: flush and end with 130 at once, without tearing down modules a Ctrl-C may
    have left half imported (CI saw ``Fatal Python error: PyThreadState_Get`` from there)."""
    code = """\
import atexit, sys
atexit.register(print, "teardown ran", file=sys.stderr)
from testbed.cli._common import end_process
print("results written")
end_process(130)
print("not reached")
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=120, start_new_session=True
    )
    assert proc.returncode == 130, proc.stderr.decode()
    assert proc.stdout.decode() == "results written\n"  # flushed before the end
    assert proc.stderr.decode() == ""


_HELD_LOCK = """
import multiprocessing as mp
from testbed.cli._common import end_process
lock = mp.get_context("spawn").Lock()  # registered with the resource tracker, as a sweep's pool
end_process(130)
"""


def test_an_interrupted_exit_leaves_the_resource_tracker_nothing_to_warn_about():
    """An interrupted command ends with ``os._exit``, which skips multiprocessing's
    finalizers: a sweep's pool left its queues' semaphores to the resource tracker, which
    printed "There appear to be 2 leaked semaphore objects" after "interrupted" (5 of 10
    interrupted sweeps under load). The semaphores are released before the exit."""
    proc = subprocess.run(
        [sys.executable, "-c", _HELD_LOCK], capture_output=True, timeout=120, start_new_session=True
    )
    assert proc.returncode == 130
    assert b"resource_tracker" not in proc.stderr, proc.stderr.decode()
