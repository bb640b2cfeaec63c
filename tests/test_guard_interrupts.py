"""The guard's worker after an interrupt, and after a death it cannot read from its pipe.

A run in a process that goes on (a notebook's Ctrl-C, a sweep cell stopped by
``limits.cell_seconds``, the test suite itself) is stopped by an exception that may come at any
line: after the worker's answer was read off the pipe and before it was kept, between the two
halves of a message, or after a batch was posted and before it was marked busy. The next run in
that process must neither wait forever for an answer that was lost nor have its batch read from
memory the worker is still reading. And a worker whose process died must be noticed even when
its end of the pipe outlives it (a child it left behind holds it).
"""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest

from testbed.exchange import guard_worker
from testbed.exchange.bus import SERVER, Bus, PrivacyGuard

pytestmark = pytest.mark.skipif(
    not hasattr(os, "memfd_create"), reason="no guard worker on this platform (memfd_create)"
)

ROWS = {"alice": np.arange(12.0).reshape(3, 4), "bob": -np.arange(8.0).reshape(2, 4)}


class Interrupt(BaseException):
    """Stands for KeyboardInterrupt or CellTimeoutError (both BaseExceptions)."""


def _within(seconds: float, fn):
    """``fn()``'s result or exception, or a failure when it does not return in ``seconds``
    (a wait that never ends fails the test instead of hanging the suite)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"still waiting after {seconds} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _worker() -> guard_worker.GuardWorker:
    w = guard_worker.GuardWorker()  # its own, not the process's shared one
    assert w.wait_ready()
    return w


def _batch(w, gid, value: float = 50.0) -> int:
    return w.submit(gid, [np.full((3, 4), value)])


def test_an_answer_lost_to_an_interrupt_gives_the_worker_up():
    """The interrupt lands just after the answer was read off the pipe: that answer is gone.
    The worker is given up at once (it ends), and its next use fails fast instead of waiting
    forever for the lost answer."""
    w = _worker()
    try:
        gid = w.load(PrivacyGuard(ROWS, worker=False)._rows, list(ROWS))
        bid = _batch(w, gid)
        real = w._recv.recv

        def read_then_interrupt():
            real()
            raise Interrupt

        w._recv.recv = read_then_interrupt
        with pytest.raises(Interrupt):
            w.answer(bid)
        assert w.interrupted and not w.alive
        with pytest.raises(guard_worker.WorkerError):
            _within(10, lambda: _batch(w, gid, 51.0))
        assert w._proc.wait(timeout=30) is not None  # its process ended
    finally:
        w.close()


def test_an_interrupt_after_a_batch_was_posted_gives_the_worker_up(monkeypatch):
    """The interrupt lands after the batch went to the worker and before it was marked busy:
    the next batch would overwrite memory the worker may still be reading."""
    w = _worker()
    try:
        gid = w.load(PrivacyGuard(ROWS, worker=False)._rows, list(ROWS))
        real = w._post_now  # a batch's command: written by the bus's thread

        def post_then_interrupt(msg):
            real(msg)
            raise Interrupt

        monkeypatch.setattr(w, "_post_now", post_then_interrupt)
        with pytest.raises(Interrupt):
            _batch(w, gid)
        monkeypatch.undo()
        assert w.interrupted and not w.alive
        with pytest.raises(guard_worker.WorkerError):
            _batch(w, gid, 51.0)
        assert w._proc.wait(timeout=30) is not None
    finally:
        w.close()


def test_an_ordinary_failure_is_not_taken_for_an_interrupt():
    """A worker that died is failed, not interrupted: the process checks in its own from then
    on (shared_worker gives no new one), as before."""
    w = _worker()
    try:
        w._proc.kill()
        w._proc.wait()
        with pytest.raises(guard_worker.WorkerError):
            w.answer(_batch(w, w.load(PrivacyGuard(ROWS, worker=False)._rows, list(ROWS))))
        assert not w.interrupted and not w.alive
    finally:
        w.close()


def test_the_next_guard_gets_a_fresh_worker_after_an_interrupt(monkeypatch):
    pid = os.getpid()
    given_up, failed = _worker(), _worker()
    fresh = None
    try:
        given_up._give_up()
        failed._fail("it stopped")
        monkeypatch.setattr(guard_worker, "_SHARED", {pid: failed})
        assert guard_worker.shared_worker(force=True) is None  # failed: checks stay here
        monkeypatch.setattr(guard_worker, "_SHARED", {pid: given_up})
        fresh = guard_worker.shared_worker(force=True)
        assert fresh is not None and fresh is not given_up
        assert fresh.wait_ready() and fresh.alive
        assert guard_worker._SHARED == {pid: fresh}
        # a guard on it finds a leak, as on any worker
        guard = PrivacyGuard(ROWS, worker=True)
        assert guard._worker is fresh
        bus = Bus(guard=guard)
        bus.send("alice", SERVER, "p.ok", np.full((3, 4), 50.0))
        bus.send("bob", SERVER, "p.leak", np.vstack([np.full((2, 4), 50.0), ROWS["bob"][1]]))
        with pytest.raises(Exception, match="'bob'"):
            bus.flush()
        assert guard._worker is fresh  # answered by the worker, not by a fallback
    finally:
        for w in (given_up, failed, fresh):
            if w is not None:
                w.close()


def test_a_run_after_an_interrupted_run_in_the_same_process_finishes(tmp_path, capsys, monkeypatch):
    """What CI met once: a sweep cell stopped by limits.cell_seconds, then the next run in the
    same process (here the interrupt lands right after an answer was read, the worst moment)."""
    from _scenarios import tiny

    from testbed.cli.main import main
    from testbed.scenario.limits import CellTimeoutError

    w = _worker()  # the process's worker for this test (the one other tests hold stays)
    shared = {os.getpid(): w}
    monkeypatch.setattr(guard_worker, "_SHARED", shared)
    real_recv = w._recv.recv
    seen = {"answers": 0}

    def read_then_stop():
        real_recv()  # the answer is off the pipe, and lost
        seen["answers"] += 1
        raise CellTimeoutError("stopped right after an answer was read")

    f = tmp_path / "s.yaml"
    f.write_text(tiny("t", "threat_model:\n  observer: server"))
    try:
        w._recv.recv = read_then_stop
        rc = main(["run", str(f), "--out", str(tmp_path / "a"), "-q"])
        assert rc == 1 and "stopped right after" in capsys.readouterr().err
        assert seen["answers"] == 1 and w.interrupted
        rc = _within(120, lambda: main(["run", str(f), "--out", str(tmp_path / "b"), "-q"]))
        assert rc == 0, capsys.readouterr().err
        now = shared.get(os.getpid())
        assert now is not None and now is not w and now.alive
    finally:
        for worker in {w, *shared.values()}:
            worker.close()


def test_a_dead_worker_is_found_while_a_child_it_left_holds_its_pipe(monkeypatch, tmp_path):
    """The worker's process ends but a child it started keeps its end of the answers' pipe
    open, so no end-of-file ever comes: the wait notices the death and checks here."""
    script = tmp_path / "worker.sh"
    script.write_text("#!/bin/sh\nsleep 300 &\nexit 0\n")  # the child inherits the pipe ends
    script.chmod(0o755)
    monkeypatch.setattr("sys.executable", str(script))
    w = guard_worker.GuardWorker()
    monkeypatch.undo()
    try:
        w._proc.wait(timeout=30)
        w._ready = True  # as if it had started, so the batch goes to it
        bid = _batch(w, 1)
        with pytest.raises(guard_worker.WorkerError, match="ended"):
            _within(30, lambda: w.answer(bid))
    finally:
        try:
            os.killpg(w._proc.pid, signal.SIGKILL)  # the sleep, in the worker's own session
        except OSError:
            pass
        w.close()


@pytest.mark.parametrize("answered_first", [False, True])
def test_a_batch_a_stopped_run_never_settled_leaves_no_answer_behind(answered_first):
    """A run stopped in its protocol (not in the exchange) closes its guard with a batch still
    out: the worker keeps no answer for it, whether it came before the close or after."""
    w = _worker()
    try:
        guard = PrivacyGuard(ROWS, worker=False)
        guard._worker, guard._gid = w, w.load(guard._rows, list(ROWS))
        env = Bus().send("alice", SERVER, "p.ok", np.full((3, 4), 50.0))
        assert guard.settle(guard.submit([env]))[0]  # one settled as usual: nothing to forget
        batch = guard.submit([Bus().send("bob", SERVER, "p.ok", np.full((3, 4), 49.0))])
        assert batch.worker is w  # out on the worker, never settled
        other = w.load(guard._rows, list(ROWS))
        if answered_first:  # the next batch waits for it: its answer is kept, then closed
            w.answer(_batch(w, other, 51.0))
            assert batch.bid in w._answers
        guard.close()
        w.answer(_batch(w, other, 52.0))  # the worker's answers all read
        assert w._answers == {} and w._unwanted == set()
    finally:
        w.close()
