"""The bus checks messages with the guard in batches: the outcome must be the one a check at
every send gives, and nothing unchecked may ever be logged or written.

Each test compares a batching bus against one that checks every message as it is sent
(``GUARD_BATCH = 1``), or plays a protocol that tries to get a row past the batch: by failing
right after sending it, by reading the transcript before the batch is checked, or by hiding it
among many clean messages.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.errors import PrivacyGuardError
from testbed.exchange import guard_worker
from testbed.exchange.bus import SERVER, Bus, PrivacyGuard, Transcript
from testbed.measure import Measure

WORKER = guard_worker.shared_worker(force=True)  # started now: ready by the first test using it
RNG = np.random.default_rng(5)
PRIVATE = {"alice": RNG.normal(size=(20, 4)), "bob": RNG.normal(size=(15, 4))}


def _message(kind: str, i: int, rng: np.random.Generator):
    """One payload (and meta) of the kind drawn: clean values, a broadcast repeat, or a row of
    alice's or bob's hidden in a payload or its meta."""
    clean = rng.normal(size=(3, 4)) + 10.0
    if kind == "clean":
        return clean, None
    if kind == "repeat":
        return np.full((2, 4), 7.0), {"round": i}
    party = "alice" if kind.endswith("alice") else "bob"
    row = PRIVATE[party][i % len(PRIVATE[party])]
    if kind.startswith("meta"):
        return clean, {"debug": row.tolist()}
    return Measure(np.vstack([clean, row])), None


def _guard(where: str, **kw) -> PrivacyGuard:
    """A guard searching in this process (``here``) or on the worker process (``worker``)."""
    if where == "here":
        return PrivacyGuard(PRIVATE, worker=False, **kw)
    if WORKER is None or not WORKER.wait_ready():
        pytest.skip("no guard worker on this platform (needs os.memfd_create)")
    guard = PrivacyGuard(PRIVATE, worker=True, **kw)
    assert guard._worker is WORKER
    return guard


WHERE = pytest.mark.parametrize("where", ["here", "worker"])


def _play(kinds, batch: int, mode: str, seed: int = 0, where: str = "here"):
    """Send the messages on a bus checking ``batch`` at a time; returns (bus, guard, error)."""
    guard = _guard(where, mode=mode)
    bus = Bus(guard=guard)
    bus.GUARD_BATCH = batch
    rng = np.random.default_rng(seed)
    error = None
    try:
        for i, kind in enumerate(kinds):
            payload, meta = _message(kind, i, rng)
            bus.send("alice" if i % 2 else "bob", SERVER, f"p.{kind}", payload, round=i, meta=meta)
        bus.flush()
    except PrivacyGuardError as exc:
        error = str(exc)
    return bus, guard, error


def _outcome(bus, guard, error):
    summary = guard.summary()
    return error, bus.transcript.digest(), len(bus.transcript), summary


KINDS = st.lists(
    st.sampled_from(["clean", "clean", "clean", "repeat", "alice", "bob", "meta_alice"]),
    min_size=1,
    max_size=40,
)


@WHERE
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=KINDS, batch=st.sampled_from([2, 3, 7, 64]), mode=st.sampled_from(["stop", "record"]))
def test_batched_checks_give_what_a_check_at_every_send_gives(where, kinds, batch, mode):
    # Execute: the same messages, checked one at a time here and in batches (here, or on the
    # worker process, which a full batch does not wait for)
    one = _outcome(*_play(kinds, 1, mode))
    many = _outcome(*_play(kinds, batch, mode, where=where))
    # Assert: the same error (first leak named), the same logged messages, the same counters
    # and findings in results.json
    assert many == one
    leaks = [k for k in kinds if k not in ("clean", "repeat")]
    if mode == "stop":
        assert (one[0] is not None) == bool(leaks)
        assert one[2] == kinds.index(leaks[0]) if leaks else len(kinds)
    else:
        assert one[3]["violations"] == len(leaks) and one[2] == len(kinds)


def test_a_leak_is_stopped_within_two_batches_of_sends():
    bus = Bus(guard=_guard("here"))
    bus.send("alice", SERVER, "p.leak", PRIVATE["alice"][3])
    with pytest.raises(PrivacyGuardError, match="'alice'"):
        for i in range(2 * Bus.GUARD_BATCH):
            bus.send("alice", SERVER, "p.ok", np.full(4, 100.0 + i))
    # the first batch is answered while the second fills; the second's last send collects it
    assert i == 2 * Bus.GUARD_BATCH - 2
    assert len(bus.transcript) == 0 and len(bus._pending) == 0


def test_a_busy_worker_lets_the_batch_grow_but_not_past_its_limit():
    bus = Bus(guard=_guard("worker"))
    bus.send("alice", SERVER, "p.leak", PRIVATE["alice"][3])
    with pytest.raises(PrivacyGuardError, match="'alice'"):
        for i in range(Bus.GUARD_BATCH + Bus.GUARD_LAG + 1):
            bus.send("alice", SERVER, "p.ok", np.full(4, 100.0 + i))
    assert i < Bus.GUARD_BATCH + Bus.GUARD_LAG
    assert len(bus.transcript) == 0


@WHERE
def test_a_large_payload_is_checked_before_the_batch_is_full(where):
    guard = _guard(where)
    bus = Bus(guard=guard)
    big = np.zeros((Bus.GUARD_BATCH_BYTES // 32 + 1, 4))
    big[-1] = PRIVATE["bob"][0]
    bus.send("bob", SERVER, "p.big", big)  # a batch by itself: searched at once
    assert not bus._pending and bus._inflight is not None
    with pytest.raises(PrivacyGuardError, match="'bob'"):
        bus.flush()


@WHERE
def test_the_worker_gets_smaller_batches_than_the_search_here(where):
    """On the worker a batch goes as soon as it holds WORKER_BATCH_BYTES (the search runs on
    the other core while the protocol goes on); here, not before GUARD_BATCH messages or
    GUARD_BATCH_BYTES (a search here costs the protocol's own time, mostly per batch)."""
    bus = Bus(guard=_guard(where))
    rows = Bus.WORKER_BATCH_BYTES // 32 + 1  # one message past the worker's batch size
    bus.send("bob", SERVER, "p.mid", np.full((rows, 4), 100.0))
    if where == "worker":
        assert not bus._pending and bus._inflight is not None
    else:
        assert len(bus._pending) == 1 and bus._inflight is None
    bus.flush()
    assert len(bus.transcript) == 1


@WHERE
def test_a_protocol_that_fails_after_a_leak_logs_and_writes_nothing_of_it(where, tmp_path):
    """Hostile: send a row, then raise before the batch is checked, hoping the row was logged
    or spilled to the run directory unchecked."""
    row = PRIVATE["alice"][7]
    transcript = Transcript(spill_dir=tmp_path, spill_threshold=0)
    bus = Bus(guard=_guard(where), transcript=transcript)
    bus.send("alice", SERVER, "p.ok", np.full((50, 4), 3.0))
    bus.send("alice", SERVER, "p.leak", np.vstack([np.full((50, 4), 3.0), row]))
    with pytest.raises(RuntimeError):
        try:
            raise RuntimeError("the protocol fails on purpose")
        finally:
            transcript.close()
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert row.tobytes() not in written
    assert all(e.kind != "p.leak" for e in transcript)


@WHERE
def test_reading_the_transcript_checks_what_is_pending_first(where):
    """Hostile: send a row, then read the transcript before the batch is full."""
    bus = Bus(guard=_guard(where))
    bus.send("bob", SERVER, "p.leak", {"x": PRIVATE["bob"][2] * 1.0})
    with pytest.raises(PrivacyGuardError, match="'bob'"):
        list(bus.transcript)
    assert len(bus.transcript) == 0


def test_sequence_numbers_count_sends_not_checks():
    bus = Bus(guard=PrivacyGuard(PRIVATE))
    envs = [bus.send("alice", SERVER, "p.ok", np.full(4, 50.0 + i)) for i in range(5)]
    assert [e.seq for e in envs] == list(range(5))
    assert [e.seq for e in bus.transcript] == list(range(5))
    assert bus.guard.messages_checked == 5


def _many(bus, n=3 * Bus.GUARD_BATCH, leak_at=None):
    for i in range(n):
        x = np.full((2, 4), 200.0 + i)
        if i == leak_at:
            x[1] = PRIVATE["bob"][5]
        bus.send("bob", SERVER, "p.x", x)


@pytest.mark.parametrize("leak_at", [None, 100])
def test_a_killed_worker_leaves_nothing_unchecked(leak_at):
    """Hostile: the worker process dies mid-run (here: killed). The bus's process takes over
    every check, the leak is still found and the counters are those of a check per send."""
    if WORKER is None:
        pytest.skip("no guard worker on this platform (needs os.memfd_create)")
    worker = guard_worker.GuardWorker()  # its own, not the shared one the other tests use
    assert worker.wait_ready()
    guard = PrivacyGuard(PRIVATE, worker=False)
    guard._worker, guard._gid = worker, worker.load(guard._rows, guard._parties)
    bus = Bus(guard=guard)
    try:
        bus.send("bob", SERVER, "p.first", np.ones((2, 4)))
        bus.flush()  # answered by the worker
        assert worker.seconds > 0
        worker._proc.kill()
        worker._proc.wait()
        if leak_at is None:
            _many(bus)
            bus.flush()
        else:
            with pytest.raises(PrivacyGuardError, match="'bob'"):
                _many(bus, leak_at=leak_at)
                bus.flush()
    finally:
        worker.close()
    assert guard._worker is None  # the rest of the run checked here
    ref = Bus(guard=PrivacyGuard(PRIVATE, worker=False))
    ref.GUARD_BATCH = 1
    ref.send("bob", SERVER, "p.first", np.ones((2, 4)))
    with pytest.raises(PrivacyGuardError) if leak_at is not None else _nothing():
        _many(ref, leak_at=leak_at)
    assert len(bus.transcript) == len(ref.transcript)
    assert guard.rows_checked == ref.guard.rows_checked
    assert guard.messages_checked == ref.guard.messages_checked


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_worker_that_answers_an_error_is_not_believed():
    """A batch the worker fails on (here: a guard it no longer holds) is searched here."""
    if WORKER is None or not WORKER.wait_ready():
        pytest.skip("no guard worker on this platform (needs os.memfd_create)")
    guard = _guard("worker")
    WORKER.drop(guard._gid)  # the worker forgets this guard's index
    bus = Bus(guard=guard)
    _many(bus, n=10, leak_at=4)
    with pytest.raises(PrivacyGuardError, match="'bob'"):
        bus.flush()
    assert guard._worker is None


def test_a_check_written_at_once_never_overtakes_a_queued_load():
    """A batch's check command is written by the bus's thread when nothing is queued, else
    after the queue: a check submitted while a guard's rows still wait in the command thread's
    queue must reach the worker after them (else the worker would answer an error for a guard
    it does not hold yet, and the batch would be searched here)."""
    import threading

    if WORKER is None:
        pytest.skip("no guard worker on this platform (needs os.memfd_create)")
    worker = guard_worker.GuardWorker()
    try:
        assert worker.wait_ready()
        gate, held, real = threading.Event(), [], worker._outbox

        class _Gated:  # the command thread gets nothing until the gate opens
            def put(self, msg):
                held.append(msg) if not gate.is_set() else real.put(msg)

        worker._outbox = _Gated()
        guard = PrivacyGuard(PRIVATE, worker=False)
        guard._worker, guard._gid = worker, worker.load(guard._rows, guard._parties)
        assert worker._queued == 1  # the rows: queued, not written
        env = Bus(guard=None).send("bob", SERVER, "p.ok", np.full((3, 4), 50.0))
        batch = guard.submit([env])  # its command: queued behind the rows, not written first
        gate.set()
        for msg in held:
            real.put(msg)
        worker._outbox = real
        assert guard.settle(batch)[0] and batch.worker is worker  # answered by the worker
        assert guard._worker is worker
    finally:
        worker.close()


def test_posting_a_command_never_waits_for_a_write_in_progress():
    """A guard's rows (megabytes) and a batch's command while another command is being written
    go to the command thread's queue and return at once: the bus's thread never waits for a
    write (a run's guard is made inside the protocol's time)."""
    import threading

    if WORKER is None:
        pytest.skip("no guard worker on this platform (needs os.memfd_create)")
    worker = guard_worker.GuardWorker()
    try:
        assert worker.wait_ready()
        rows = PrivacyGuard(PRIVATE, worker=False)._rows
        done = []
        worker._write_lock.acquire()  # a write in progress
        try:
            t = threading.Thread(target=lambda: done.append(worker.load(rows, list(PRIVATE))))
            t.start()
            t.join(10)
            assert done  # returned while the write went on
            worker._post_now(guard_worker._dumps(("drop", 999)))  # queued behind it, not written
            assert worker._queued == 2
        finally:
            worker._write_lock.release()
    finally:
        worker.close()


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="no SCHED_BATCH on this platform")
def test_the_worker_runs_as_batch_work(monkeypatch):
    """The worker never preempts the protocol's thread when it wakes (SCHED_BATCH);
    OT_TESTBED_GUARD_POLICY=normal keeps the default policy."""
    for env, policy in ((None, os.SCHED_BATCH), ("normal", os.SCHED_OTHER)):
        if env is None:
            monkeypatch.delenv("OT_TESTBED_GUARD_POLICY", raising=False)
        else:
            monkeypatch.setenv("OT_TESTBED_GUARD_POLICY", env)
        worker = guard_worker.GuardWorker()
        try:
            assert worker.wait_ready()
            assert os.sched_getscheduler(worker._proc.pid) == policy
        finally:
            worker.close()


def test_the_worker_is_a_separate_session_and_stops_with_its_process(tmp_path):
    """Ctrl-C goes to the bus's process group only (the worker is in its own session), and a
    process that exits, even without closing anything, leaves no worker behind."""
    import subprocess
    import sys
    import time

    script = tmp_path / "use_worker.py"
    script.write_text(
        "import numpy as np, sys\n"
        "from testbed.exchange.guard import PrivacyGuard\n"
        "from testbed.exchange import guard_worker\n"
        "g = PrivacyGuard({'a': np.eye(3)}, worker=True)\n"
        "w = guard_worker.shared_worker(force=True)\n"
        "assert w.wait_ready()\n"
        "print(w._proc.pid, flush=True)\n"
        "import os; os._exit(0)\n"  # no atexit, no close: the pipe's end is the only signal
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[-1])
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"guard worker {pid} still running after its process exited")


def test_a_forked_child_holds_none_of_the_workers_pipes():
    """The pool engine forks its workers from the bus's process: a child must not be able to
    read the worker's answers or the batches' shared memory."""
    if WORKER is None or not WORKER.wait_ready():
        pytest.skip("no guard worker on this platform (needs os.memfd_create)")
    fds = {WORKER._send.fileno(), WORKER._recv.fileno(), WORKER._fd}
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: which of the parent's worker fds are still open here?
        try:
            still = []
            for fd in fds:
                try:
                    os.fstat(fd)
                    still.append(fd)
                except OSError:
                    pass
            os.write(w, repr(still).encode())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 1000).decode()
    os.waitpid(pid, 0)
    os.close(r)
    assert got == "[]"
    assert WORKER.alive and WORKER.ready()  # the parent's worker is untouched


def test_a_worker_that_never_starts_leaves_the_checks_here(monkeypatch):
    """The worker's interpreter exits at once (here: /bin/false in its place): every batch is
    searched in the bus's process and the leak is still found."""
    if WORKER is None:
        pytest.skip("no guard worker on this platform (needs os.memfd_create)")
    monkeypatch.setattr("sys.executable", "/bin/false")
    worker = guard_worker.GuardWorker()
    monkeypatch.undo()
    try:
        worker._proc.wait(timeout=30)
        assert not worker.ready() and not worker.alive
        guard = PrivacyGuard(PRIVATE, worker=False)
        guard._worker, guard._gid = worker, 1
        bus = Bus(guard=guard)
        _many(bus, n=100, leak_at=70)
        with pytest.raises(PrivacyGuardError, match="'bob'"):
            bus.flush()
        assert worker.seconds == 0
    finally:
        worker.close()


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="no memfd_create on this platform")
def test_closing_a_worker_whose_memory_is_still_viewed_does_not_raise():
    """A view of the shared memory still alive (a caller's array) must not make ``close`` (run
    at exit) raise ``BufferError``: the mapping goes when the view does."""
    w = guard_worker.GuardWorker()
    try:
        w._reserve(1 << 16)
        view = memoryview(w._map)
    finally:
        w.close()
    assert view.nbytes >= 1 << 16
    view.release()


def test_a_payload_found_clean_here_is_not_searched_again_on_the_worker():
    """Record mode: a batch with a leak is checked again here, one message at a time; the
    payloads found clean then are not searched again by the worker in later batches, so the
    counters are those of a check at every send."""
    kinds = ["repeat", "alice", "clean", "repeat", "clean", "repeat"]
    one = _outcome(*_play(kinds, 1, "record"))
    many = _outcome(*_play(kinds, 3, "record", where="worker"))
    assert many == one
    assert one[3]["violations"] == 1


def test_the_worker_is_told_only_what_it_did_not_find_itself(monkeypatch):
    """Payloads of a batch the worker found clean are in its own cache: the next batch's
    command does not carry their digests back; those found clean here do (a batch searched
    here before the worker was ready, or a message checked again after a leak)."""
    guard = _guard("worker", mode="record")
    bus = Bus(guard=guard)
    bus.GUARD_BATCH = 2
    with monkeypatch.context() as m:
        m.setattr(guard_worker.GuardWorker, "ready", lambda self: False)  # still starting
        bus.send("bob", SERVER, "p.ok", np.full((2, 4), 58.0))
        bus.send("bob", SERVER, "p.ok", np.full((2, 4), 59.0))
        bus.flush()
    assert len(guard._tell_worker) == 2
    guard._tell_worker.clear()
    bus.send("bob", SERVER, "p.ok", np.full((2, 4), 60.0))
    bus.send("bob", SERVER, "p.ok", np.full((2, 4), 61.0))  # a batch, on the worker
    bus.flush()
    assert guard.messages_checked == 4 and guard._tell_worker == []
    bus.send("bob", SERVER, "p.leak", PRIVATE["alice"][0])  # a leak: checked again here...
    bus.send("bob", SERVER, "p.ok", np.full((2, 4), 62.0))  # ...with this one, found clean
    bus.flush()
    assert guard.violations == 1 and len(guard._tell_worker) == 1


# ----------------------------------------------------------------------------- the protocol's end
RELEASED = {
    "clean": lambda: {"estimates": {"w": 0.5, "path": np.full((3, 4), 9.0)}},
    "alice_estimate": lambda: {"estimates": {"rows": PRIVATE["alice"][[1, 4]]}},
    "bob_output": lambda: {"estimates": {"w": 0.5}, "outputs": [PRIVATE["bob"][2].tolist()]},
    "none": lambda: {},
}


def _end(kinds, released: str, mode: str, where: str, finish):
    """Send the messages (batches of 3), then end as ``testbed run`` does (``finish="defer"``:
    the last search handed over, other work, then awaited), with ``finish(wait=True)``
    (``finish`` true) or with the two separate checks it replaces (flush, then
    check_release)."""
    guard = _guard(where, mode=mode)
    bus = Bus(guard=guard)
    bus.GUARD_BATCH = 3
    rng = np.random.default_rng(1)
    error = None
    try:
        for i, kind in enumerate(kinds):
            payload, meta = _message(kind, i, rng)
            bus.send("alice" if i % 2 else "bob", SERVER, f"p.{kind}", payload, round=i, meta=meta)
        if finish == "defer":
            bus.finish(RELEASED[released](), wait=False)
            assert len(bus._transcript) <= len(kinds)  # other work here; then the answer
            bus.await_guard()
        elif finish:
            bus.finish(RELEASED[released]())
        else:
            bus.flush()
            guard.check_release(RELEASED[released]())
    except PrivacyGuardError as exc:
        error = str(exc)
    return _outcome(bus, guard, error)


@WHERE
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(
        st.sampled_from(["clean", "clean", "repeat", "alice", "meta_alice"]), max_size=9
    ),
    released=st.sampled_from(sorted(RELEASED)),
    mode=st.sampled_from(["stop", "record"]),
)
def test_finish_gives_what_a_flush_then_a_release_check_give(where, kinds, released, mode):
    # Execute: the same run ended by Bus.finish (one search for the last batch and the released
    # values) and by the two checks one after the other
    one = _end(kinds, released, mode, where, finish=False)
    both = _end(kinds, released, mode, where, finish=True)
    deferred = _end(kinds, released, mode, where, finish="defer")
    # Assert: the same error (a message's leak before a released one), logged messages,
    # counters (windows compared included) and findings, whether the run waits for the last
    # search at once or after other work
    assert both == one
    assert deferred == one
    if released not in ("clean", "none") and mode == "record":
        assert one[3]["findings"][-1]["sender"] == "protocol"


def test_finish_waits_for_the_worker_once(monkeypatch):
    guard = _guard("worker")
    bus = Bus(guard=guard)
    calls = []
    real = guard_worker.GuardWorker.submit
    monkeypatch.setattr(
        guard_worker.GuardWorker, "submit", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    for i in range(5):
        bus.send("alice", SERVER, "p.ok", np.full((3, 4), 50.0 + i))
    bus.finish(RELEASED["clean"]())
    assert len(calls) == 1 and len(bus.transcript) == 5
    assert guard.messages_checked == 5 and guard.rows_checked > 0


@WHERE
def test_a_deferred_last_search_logs_nothing_until_it_is_answered(where):
    """finish(wait=False) hands the last batch over and returns; nothing of it is in the
    transcript until await_guard (or a read of the transcript, which waits for the answer), and
    a leak in it is raised then, never logged."""
    guard = _guard(where)
    bus = Bus(guard=guard)
    bus.send("alice", SERVER, "p.ok", np.full((3, 4), 50.0))
    bus.send("bob", SERVER, "p.leak", PRIVATE["alice"][2])
    bus.finish({"estimates": {"w": 0.5}}, wait=False)
    assert len(bus._transcript) == 0 and bus._final is not None
    with pytest.raises(PrivacyGuardError, match="'alice'"):
        bus.await_guard()
    assert len(bus._transcript) == 1 and bus._final is None
    bus.await_guard()  # nothing out: a no-op

    bus = Bus(guard=_guard(where))
    bus.send("alice", SERVER, "p.ok", np.full((3, 4), 50.0))
    bus.finish({"estimates": {"rows": PRIVATE["bob"][[1]]}}, wait=False)
    with pytest.raises(PrivacyGuardError, match="'bob'"):
        bus.transcript  # reading it waits for the answer  # noqa: B018
    assert len(bus._transcript) == 1


def test_run_protocol_awaits_the_guard_after_its_then_and_before_a_fault_of_it(monkeypatch):
    """testbed run's reference stage (``then``) runs while the last search is out; a leak in
    that search stops the run after it, and comes first when ``then`` itself fails."""
    from testbed.errors import PluginFault
    from testbed.run import exchange as ex

    order = []
    real = Bus.await_guard
    monkeypatch.setattr(Bus, "await_guard", lambda self: order.append("await") or real(self))

    class _World:
        """Just what run_protocol reads of a World."""

        def __init__(self, leak: bool):
            from types import SimpleNamespace

            self.scenario = SimpleNamespace(
                name="t", seed=0, engine="inprocess", engine_params={}, guard_mode="stop"
            )
            self.defenses, self.ledger, self.roster = [], None, None
            self.parties = {}
            leak_row = PRIVATE["alice"][0]

            class P:
                name = "p"

                def run(self, roster, bus, rng):
                    bus.send("bob", SERVER, "p.x", leak_row if leak else np.full(4, 70.0))
                    from types import SimpleNamespace as NS

                    return NS(estimates={"w": 1.0}, outputs={}, detection=None)

            self.protocol = P()

    monkeypatch.setattr(ex, "world_guard", lambda world: _guard("worker"))

    class _OpenChannel:  # the typed channel is tested in test_typed_messages; here, the order
        def __getattr__(self, name):
            return lambda *a, **k: None

    monkeypatch.setattr(ex, "world_channel", lambda world: _OpenChannel())
    monkeypatch.setattr(ex, "_check_result", lambda name, result: None)
    monkeypatch.setattr(ex, "released_values", lambda result: {"estimates": result.estimates})

    def then(result):
        order.append("then")
        return "evaluated"

    out = ex.run_protocol(_World(leak=False), then=then)
    assert out.after == "evaluated" and order == ["then", "await"] and len(out.transcript) == 1

    order.clear()
    with pytest.raises(PrivacyGuardError, match="'alice'"):
        ex.run_protocol(_World(leak=True), then=then)
    assert order == ["then", "await"]

    def failing(result):
        raise PluginFault("reference failed")

    with pytest.raises(PrivacyGuardError, match="'alice'"):  # the leak, not the fault
        ex.run_protocol(_World(leak=True), then=failing)
    with pytest.raises(PluginFault, match="reference failed"):
        ex.run_protocol(_World(leak=False), then=failing)


def test_a_message_is_logged_with_its_digest_as_sent():
    """The digest filled in after the batch's search is the envelope's own: the object send()
    returned is the one logged, and its digest is the payload's."""
    from testbed.exchange.payload import payload_digest

    for guard in (None, _guard("here")):
        bus = Bus(guard=guard)
        env = bus.send("alice", SERVER, "p.ok", np.full((3, 4), 5.0))
        bus.flush()
        (logged,) = list(bus.transcript)
        assert logged is env and env.digest == payload_digest(np.full((3, 4), 5.0))
