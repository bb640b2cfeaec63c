"""A buggy or hostile protocol's faults end the command with one line naming the protocol and
exit code 1, never with exit 0 and nothing written, and a protocol's threads cannot add to a
transcript once its run returned (docs/trust.md, "The protocol under test")."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

from protocols import ProtocolResult
from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.exchange.bus import SERVER
from tests._toy_protocols import PrivateMean, registered, two_gaussians


def _scenario(protocol: str, workers: int) -> str:
    return two_gaussians("faults", protocol, f"engine_params: {{workers: {workers}}}\n")


def _exit0(party):
    sys.exit(0)


class ExitsInRun(PrivateMean):
    """Calls sys.exit(0) in its driver code."""

    name = "fault_exit_in_run"

    def run(self, parties, bus, rng):
        sys.exit(0)


class ExitsAtAParty(PrivateMean):
    """Calls sys.exit(0) in a party's call (on a worker process with the pool engine)."""

    name = "fault_exit_at_party"

    def run(self, parties, bus, rng):
        bus.local(list(parties)[0], _exit0)
        return super().run(parties, bus, rng)


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
    StringEstimate: "protocol 'fault_string_estimate': its estimate 'mean_distance' (str) cannot "
    "be compared with the reference (float)",
    NanEstimate: "protocol 'fault_nan_estimate': its estimate 'mean_distance' is not finite (nan)",
    InfReference: "protocol 'fault_inf_reference': its reference 'mean_distance' is not finite "
    "(-inf)",
    NanInArray: "protocol 'fault_nan_in_array': its estimate 'mean_distance' is not finite "
    "(2 of 4 values: inf, nan)",
}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("cls", list(FAULTS), ids=lambda c: c.name)
def test_a_protocol_fault_is_one_line_exit_1_naming_the_protocol(cls, workers, tmp_path, capsys):
    sc = tmp_path / "s.yaml"
    sc.write_text(_scenario(cls.name, workers))
    with registered(cls):
        rc = main(["run", str(sc), "--out", str(tmp_path / "r"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert len(err) == 1 and err[0].startswith(f"error: {FAULTS[cls]}"), err


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
    message_kinds = ("fault_late_sender.*",)
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
