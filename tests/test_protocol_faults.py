"""A buggy or hostile protocol's faults end the command with one line naming the protocol and
exit code 1, never with exit 0 and nothing written, and a protocol's threads cannot add to a
transcript once its run returned (docs/reference/trust.md, "The protocol under test")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from testbed.api import ProtocolResult
from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.exchange.bus import SERVER
from testbed.exchange.schema import Array, Message, Num, Record
from testbed.run.rundir import LOCK_NAME, run_dir_lock
from tests._toy_protocols import MEAN, PrivateMean, Sleeper, registered, two_gaussians


def _scenario(protocol: str, workers: int) -> str:
    return two_gaussians("faults", protocol, f"engine_params: {{workers: {workers}}}\n")


def _exit0(party):
    sys.exit(0)


class ExitsInRun(PrivateMean):
    """Calls sys.exit(0) in its driver code."""

    name = "fault_exit_in_run"

    def run(self, parties, bus, rng):
        sys.exit(0)


def _calling(name: str, fn, party: int = 0) -> type:
    """A protocol that makes one call ``fn`` at its ``party``-th party, then runs as PrivateMean."""

    class CallsFirst(PrivateMean):
        def run(self, parties, bus, rng):
            bus.local(list(parties)[party], fn)
            return super().run(parties, bus, rng)

    CallsFirst.name = name
    CallsFirst.__qualname__ = CallsFirst.__name__ = f"Calls_{fn.__name__}"
    return CallsFirst


#: calls sys.exit(0) in a party's call (on a worker process with the pool engine)
ExitsAtAParty = _calling("fault_exit_at_party", _exit0)


class BrokenPipeInEvaluate(PrivateMean):
    """Its evaluate() raises BrokenPipeError, which the command line reads as a closed stdout."""

    name = "fault_evaluate_broken_pipe"

    def evaluate(self, result, parties):
        raise BrokenPipeError(32, "Broken pipe")


class ReturnsNone(PrivateMean):
    name = "fault_returns_none"

    def run(self, parties, bus, rng):
        super().run(parties, bus, rng)


class StringEstimate(PrivateMean):
    name = "fault_string_estimate"

    def run(self, parties, bus, rng):
        return ProtocolResult(estimates={"mean_distance": "1.5"})


class NanEstimate(PrivateMean):
    name = "fault_nan_estimate"

    def run(self, parties, bus, rng):
        super().run(parties, bus, rng)
        return ProtocolResult(estimates={"mean_distance": float("nan")})


class InfReference(PrivateMean):
    name = "fault_inf_reference"

    def reference(self, parties):
        return {"mean_distance": -np.inf}


class NanInArray(PrivateMean):
    """Estimates the gap of the means per coordinate, one of them NaN."""

    name = "fault_nan_in_array"
    released = {"estimates": Record(mean_distance=Array())}

    def run(self, parties, bus, rng):
        d = super().run(parties, bus, rng).estimates["mean_distance"]
        return ProtocolResult(estimates={"mean_distance": np.array([d, np.nan, np.inf, d])})

    def reference(self, parties):
        return {"mean_distance": np.full(4, super().reference(parties)["mean_distance"])}


FAULTS = {
    ExitsInRun: "protocol 'fault_exit_in_run' failed in run: SystemExit: 0",
    ExitsAtAParty: "protocol 'fault_exit_at_party' failed in run: SystemExit: 0",
    BrokenPipeInEvaluate: "protocol 'fault_evaluate_broken_pipe' failed in evaluate: "
    "BrokenPipeError: [Errno 32] Broken pipe",
    ReturnsNone: "protocol 'fault_returns_none': run() must return a ProtocolResult, got NoneType",
    # a string is refused by the typed channel before the run's result is read
    StringEstimate: "protocol 'fault_string_estimate': released estimates/mean_distance: a value "
    "of type str, not a real number",
    NanEstimate: "protocol 'fault_nan_estimate': its estimate 'mean_distance' is not finite (nan)",
    InfReference: "protocol 'fault_inf_reference': its reference 'mean_distance' is not finite "
    "(-inf)",
    NanInArray: "protocol 'fault_nan_in_array': its estimate 'mean_distance' is not finite "
    "(2 of 4 values: inf, nan)",
}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("cls", list(FAULTS), ids=lambda c: c.name)
def test_a_protocol_fault_is_one_line_exit_1_naming_the_protocol(cls, workers, tmp_path, capsys):
    _fails_with(cls, workers, FAULTS[cls], tmp_path, capsys)


def _fails_with(cls, workers: int, says: str, tmp_path, capsys) -> None:
    """`testbed run` of protocol ``cls`` exits 1 with one line starting with ``says``."""
    sc = tmp_path / "s.yaml"
    sc.write_text(_scenario(cls.name, workers))
    with registered(cls):
        rc = main(["run", str(sc), "--out", str(tmp_path / "r"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert len(err) == 1 and err[0].startswith(f"error: {says}"), err


def _give_back_a_lambda(party):
    return lambda: party  # a worker cannot pickle it back to the driver


def _use(party, value):
    return 0.0


def _die(party):
    os._exit(3)


UnreturnableResult = _calling("fault_unreturnable_result", _give_back_a_lambda)


class UnsendableArgument(PrivateMean):
    name = "fault_unsendable_argument"

    def run(self, parties, bus, rng):
        bus.local_map([(p, _use, threading.Lock()) for p in parties])
        return super().run(parties, bus, rng)


WorkerDies = _calling("fault_worker_dies", _die, party=1)


#: faults only a party call on a worker process can make (the in-process engine neither pickles
#: nor has a process to lose): the engine's line, after the protocol's name
POOL_FAULTS = {
    UnreturnableResult: "protocol 'fault_unreturnable_result' failed in run: pool engine: party "
    "'alice': _give_back_a_lambda returned what cannot be sent from its worker process (",
    UnsendableArgument: "protocol 'fault_unsendable_argument' failed in run: pool engine: party "
    "'alice': _use was given what cannot be sent to the worker process (TypeError: cannot "
    "pickle '_thread.lock' object)",
    WorkerDies: "protocol 'fault_worker_dies' failed in run: pool engine: the worker process "
    "holding 'bob' died (exit code 3)",
}


@pytest.mark.parametrize("cls", list(POOL_FAULTS), ids=lambda c: c.name)
def test_a_party_call_that_fails_in_the_engine_names_the_protocol_and_the_call(
    cls, tmp_path, capsys
):
    _fails_with(cls, 2, POOL_FAULTS[cls], tmp_path, capsys)


def _ping(bus, stop):
    while not stop.is_set():
        try:
            bus.send("alice", SERVER, "fault_late_sender.ping", 1.0)
        except TestbedError as exc:
            _ping.refused = str(exc)
            return
        time.sleep(0.002)


class LateSender(PrivateMean):
    """Leaves a thread sending messages after its run returned."""

    name = "fault_late_sender"
    steps = {"mean": MEAN, "ping": Message(Num())}
    threads: list = []

    def run(self, parties, bus, rng):
        stop = threading.Event()
        t = threading.Thread(target=_ping, args=(bus, stop), daemon=True)
        t.start()
        LateSender.threads.append((t, stop))
        time.sleep(0.02)
        return super().run(parties, bus, rng)


def test_a_message_sent_after_the_run_returned_is_refused(tmp_path):
    from testbed.run.execute import execute
    from testbed.scenario.loading import parse_scenario

    _ping.refused = None
    with registered(LateSender):
        out = execute(
            parse_scenario(_scenario(LateSender.name, 1)),
            until="results",
            write=False,
        )
    t, stop = LateSender.threads.pop()
    t.join(5)
    stop.set()
    assert "sent after the protocol's run returned" in (_ping.refused or "")
    n = len(out.transcript)
    time.sleep(0.05)
    assert len(out.transcript) == n  # nothing was added to the checked transcript


# ----------------------------------------------------------------------------- a killed run
_CHILD = """\
import sys
from tests._toy_protocols import Sleeper, registered
from testbed.cli.main import main
with registered(Sleeper):
    sys.exit(main(sys.argv[1:]))
"""


def _killed_mid_run(tmp_path: Path, workers: int) -> tuple[Path, Path]:
    """Start `testbed run` of a protocol that sleeps into runs/sleepy, SIGKILL it once its
    fresh directory exists; returns (runs/sleepy, the fresh directory)."""
    sc = tmp_path / "sleepy.yaml"
    sc.write_text(two_gaussians("sleepy", Sleeper.name, f"engine_params: {{workers: {workers}}}\n"))
    runs = tmp_path / "runs"
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, "run", str(sc), "--out", str(runs / "sleepy"), "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(runs.glob(".sleepy.testbed-*.tmp/resolved.yaml")):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    (fresh,) = runs.glob(".sleepy.testbed-*.tmp")
    assert [p.name for p in (runs / "sleepy").iterdir()] == [LOCK_NAME]
    return runs / "sleepy", fresh


# 2.5 s each on an idle core: one worker in make test, two in make test-slow
@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_what_a_killed_run_left_is_named_in_one_line(workers, tmp_path, capsys):
    out, fresh = _killed_mid_run(tmp_path, workers)
    capsys.readouterr()
    left = f"{out}: an interrupted run left no results (only its lock file"
    for cmd in ("report", "verify", "transcript", "attack"):
        assert main([cmd, str(out)]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err == [f"error: {left}; its unfinished files are in {fresh}); run it again"], cmd
    assert main(["report", str(fresh)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {fresh}: the unfinished files of an interrupted run into {out}, not a run "
        f"directory; run it again (the next run written in {out.parent}/ deletes them)"
    ]
    # a run of another scenario beside it deletes the unfinished files, never the lock file
    other = tmp_path / "other.yaml"
    other.write_text(two_gaussians("other", PrivateMean.name))
    with registered(PrivateMean):
        assert main(["run", str(other), "--out", str(out.parent / "other"), "-q"]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["other", "sleepy"]
    assert [p.name for p in out.iterdir()] == [LOCK_NAME]
    capsys.readouterr()
    assert main(["verify", str(out)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {left}); run it again"]


def test_a_run_leaves_the_fresh_directory_of_a_writer_at_work(tmp_path):
    """The fresh directory of a run being written beside it is not touched: its run directory's
    lock is held."""
    runs = tmp_path / "runs"
    busy = runs / ".busy.testbed-abc123.tmp"
    other = tmp_path / "other.yaml"
    other.write_text(two_gaussians("other", PrivateMean.name))
    with run_dir_lock(runs / "busy", write=True):
        busy.mkdir()
        (busy / "resolved.yaml").write_text("name: busy\n")
        with registered(PrivateMean):
            assert main(["run", str(other), "--out", str(runs / "other"), "-q"]) == 0
        assert (busy / "resolved.yaml").is_file()
