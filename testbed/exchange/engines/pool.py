"""In-process engine with worker processes (``engine: inprocess``, ``engine_params: {workers: 2}``).

:class:`PoolBus` is a :class:`~testbed.exchange.bus.Bus` whose parties live in ``workers`` child processes
of this one (party ``i`` in worker ``i mod workers``, like the Ray engine's client groups); the
transcript, defenses and guard stay in the driver. :meth:`PoolBus.local` runs at the worker that
holds the party; :meth:`PoolBus.local_map` sends each worker its share of the calls at once, so
independent client computations run concurrently; :meth:`PoolBus.map_pure` does the same for
computations that touch no party's data (the server's own solves).

Every call runs the same function on the same inputs as the plain bus, so results and
transcripts are bit-identical for the same seed (tests/test_engines.py); only where the work runs
changes. Functions and arguments cross a pipe, so they must be picklable (module-level
functions), as on the Ray engine. Workers start with ``fork`` where available (nothing is copied
up front) and are stopped by :meth:`close` (``open_bus`` does it).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from multiprocessing import connection as mp_connection
from multiprocessing.reduction import ForkingPickler as _ForkingPickler
from typing import Any, Literal

from pydantic import Field, field_validator

from testbed.errors import EngineCallError, TestbedError
from testbed.exchange.bus import Bus
from testbed.exchange.engines._batch import in_call_order, run_in_order
from testbed.libc import libc_function
from testbed.registry import PluginConfig
from testbed.threads import limit_blas_threads

__all__ = [
    "AUTO_MIN_ROWS",
    "IN_SWEEP_WORKER",
    "InProcessEngineConfig",
    "PoolBus",
    "resolve_workers",
]


#: ``workers: auto`` starts worker processes only when the parties hold at least this many rows
#: in all: below it, starting workers costs more than running the parties' work at once saves
AUTO_MIN_ROWS = 20_000

#: set in a sweep's ``--jobs`` worker processes: their cores are already in use, so ``auto``
#: is one worker there
IN_SWEEP_WORKER = "OT_TESTBED_SWEEP_WORKER"


#: after a worker's death is seen, how long the driver waits to collect its exit status
REAP_SECONDS = 10


def _malloc_trim():
    return libc_function("malloc_trim")


def _trim_heap() -> None:
    """Hand this process's free heap pages back to the system (glibc's ``malloc_trim``): before
    a fork, a forked worker maps every resident page of its parent, so after a large run's
    protocol (gigabytes of freed per-client arrays at 1000 clients) the reference's workers
    would otherwise each count them again; and in a worker after each batch, whose arguments
    and results (a quarter of a gigabyte a round at 1000 clients) are freed into a heap that
    glibc keeps. Nothing where the C library has no such call."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: _recv polls instead
        return None


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it (``WNOWAIT``)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # already reaped
        return True


def _end_group(proc, seconds: float) -> str:
    """Wait up to ``seconds`` for worker ``proc`` to exit, kill what is left in its process
    group (whatever a party's code forked there: it holds a copy of the party's data), then
    reap it; returns how it ended. The group is killed before the worker is reaped, while its
    process id (the group's id) is still reserved, so no other process can be hit. Its
    sentinel cannot tell when it exits: a forked process may hold the sentinel's pipe."""
    deadline = time.monotonic() + seconds
    delay = 0.0005
    while not _exited(proc.pid) and time.monotonic() < deadline:
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker too, if it is still running
    except OSError:
        pass
    proc.join(timeout=5)
    code = proc.exitcode
    return f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"


class InProcessEngineConfig(PluginConfig):
    workers: int | Literal["auto"] = Field(
        "auto",
        description="worker processes holding the parties (1 = everything in this process; "
        f"auto = one per CPU this process may use when the parties hold >= {AUTO_MIN_ROWS} rows "
        "in all and the run is not a cell of a --jobs sweep, else 1)",
    )

    @field_validator("workers")
    @classmethod
    def _range(cls, v):
        if v != "auto" and not 1 <= v <= 256:
            raise ValueError("workers must be 'auto' or an integer from 1 to 256")
        return v


def resolve_workers(workers: int | str, parties: Mapping[str, Any] | None) -> int:
    """The number of worker processes for ``workers`` (``auto``: see
    :class:`InProcessEngineConfig`), never more than the parties."""
    n_parties = len(parties or {})
    if workers == "auto":
        if os.environ.get(IN_SWEEP_WORKER) == "1":
            return 1
        rows = sum(int(getattr(p, "n", 0) or 0) for p in (parties or {}).values())
        if rows < AUTO_MIN_ROWS:
            return 1
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        workers = cpus or 1
    return max(1, min(int(workers), n_parties or 1))


def _stdout_to_stderr() -> None:
    """What the protocol's code prints (``print`` or a write to descriptor 1) goes to stderr:
    stdout carries only the testbed's own output (the summary, paths), which scripts read."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        pass
    os.dup2(2, 1)
    sys.stdout = sys.stderr  # the object print() writes to (it may hold a descriptor of its own)


def _serve(conn, parties: Mapping[str, Any], blas_threads: int | None) -> None:
    """Worker loop: receive a batch of ``(party | None, fn, args, kwargs)``, run it in order,
    send back ``(ok, value)`` per call; ``None`` stops the worker. Ctrl-C reaches the whole
    process group: the driver stops its workers itself, so a worker ignores it. The worker
    leads a process group of its own, so that :meth:`PoolBus.close` can end whatever a party's
    code forked in it (a forked process holds a copy of the party's data)."""
    from testbed.exchange.engines._lifetime import tie_to_parent  # lazy: validate imports pool

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    tie_to_parent()  # a killed driver leaves no worker behind
    _stdout_to_stderr()  # a party's prints stay off the testbed's output
    if blas_threads is not None:  # the driver's BLAS threading: same floating point, and k
        limit_blas_threads(blas_threads)
    while True:
        batch = conn.recv()
        if batch is None:
            conn.close()
            return
        out = run_in_order(batch, parties)
        try:
            conn.send(out)
        except Exception as exc:  # an unpicklable result or exception: say whose
            conn.send([(False, _unsendable(batch, out, exc, "returned"))])
        del batch, out
        _trim_heap()  # the batch's arrays, freed: back to the system, not kept for the next


def _call_name(call: tuple) -> str:
    """``party 'a': fn`` of a call ``(party | None, fn, args, kwargs)``."""
    party, fn = call[0], call[1]
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"party {party!r}: {name}" if party is not None else name


def _unsendable(calls: list, items: list, exc: BaseException, what: str) -> EngineCallError:
    """The error for a batch that could not be pickled, naming the first call whose own item
    (its arguments, or its result) cannot be: a plugin's fault, not the engine's."""
    culprit = "a call"
    for call, item in zip(calls, items):
        try:
            _ForkingPickler.dumps(item)
        except Exception as e:
            culprit, exc = _call_name(call), e
            break
    why = " ".join(f"{type(exc).__name__}: {exc}".split()).removesuffix(":")
    where = "from its worker process" if what == "returned" else "to the worker process"
    return EngineCallError(f"pool engine: {culprit} {what} what cannot be sent {where} ({why})")


class PoolBus(Bus):
    """:class:`~testbed.exchange.bus.Bus` whose :meth:`local` runs in the worker process holding the party.

    Parameters are those of :class:`~testbed.exchange.bus.Bus` plus ``workers``. Use as a context manager
    or call :meth:`close`.
    """

    runs_concurrently = True

    def __init__(
        self,
        defenses=(),
        guard=None,
        ledger=None,
        on_send=None,
        parties=None,
        *,
        workers: int = 2,
        transcript=None,
    ):
        super().__init__(
            defenses,
            guard=guard,
            ledger=ledger,
            on_send=on_send,
            parties=None,
            transcript=transcript,
        )
        parties = dict(parties or {})
        names = list(parties)
        k = max(1, min(int(workers), len(names) or 1))
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        # POT (and the torch it imports) once, here, before the fork: the workers solve, and
        # each would otherwise import it on its own (seconds of CPU, and memory not shared)
        import ot  # noqa: F401  # POT: loaded before the fork, shared by the workers

        from testbed.exchange.engines.ray_bus import (
            _driver_blas_threads,  # ray: the ray engine only
        )

        threads = _driver_blas_threads()
        if ctx.get_start_method() == "fork":
            _trim_heap()
        self._conns = []
        self._procs = []
        self._where: dict[str, int] = {}
        self._next = 0
        self._pidfds: list[int | None] = []  # to see a worker's death (os.pidfd_open, Linux)
        self._dead: dict[int, str] = {}  # worker -> how it died
        self._broken: str | None = None
        try:
            for w in range(k):
                group = {p: parties[p] for p in names[w::k]}
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_serve, args=(child, group, threads), daemon=True)
                proc.start()
                try:  # as the worker does itself: whichever comes first
                    os.setpgid(proc.pid, proc.pid)
                except OSError:
                    pass
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
                self._pidfds.append(_pidfd(proc.pid))
                self._where.update(dict.fromkeys(group, w))
        except BaseException:
            self.close()
            raise

    @property
    def party_names(self) -> list[str]:
        return list(self._where)

    def _worker(self, party: str) -> int:
        if not self._conns:
            raise TestbedError("pool engine: the bus is closed")
        try:
            w = self._where[party]
        except KeyError:
            known = ", ".join(self._where) or "(none)"
            raise TestbedError(f"no party {party!r} on this bus; parties: {known}") from None
        if w in self._dead:
            raise EngineCallError(
                f"pool engine: the worker process holding party {party!r} died ({self._dead[w]})"
            )
        return w

    def _recv(self, w: int):
        """Worker ``w``'s reply. Its death is seen by a pidfd of the worker (Linux; elsewhere
        by polling its status), not by the end of its pipe or its process sentinel: a process
        forked by a party's code inherits both and keeps them open after the worker died, and a
        read would wait for ever."""
        conn, proc, pidfd = self._conns[w], self._procs[w], self._pidfds[w]
        while True:
            ready = mp_connection.wait(
                [conn] if pidfd is None else [conn, pidfd], timeout=1.0 if pidfd is None else None
            )
            if conn in ready or conn.poll(0):  # a reply first, even from a worker that just ended
                try:
                    return conn.recv()
                except EOFError:
                    break
            if _exited(proc.pid):
                break
        self._dead[w] = _end_group(proc, REAP_SECONDS)
        names = [p for p, i in self._where.items() if i == w]
        raise EngineCallError(
            f"pool engine: the worker process holding {', '.join(map(repr, names)) or 'no party'} "
            f"died ({self._dead[w]})"
        )

    def _run(self, calls: list[tuple[int, tuple]]) -> list[Any]:
        """Send each worker its calls (in order), then collect; results in call order.

        Every worker that was sent calls is read before anything is raised, so no reply is left
        in a pipe to be taken for the answer to a later call (a protocol may catch the error and
        go on): a batch that cannot be pickled fails before any worker gets its share, a dead
        worker fails the calls of its parties (now and later) and not the others', and a call
        interrupted between sending and reading leaves the bus unusable, saying why."""
        if not self._conns:
            raise TestbedError("pool engine: the bus is closed")
        if self._broken:
            raise TestbedError(f"pool engine: the bus is unusable: {self._broken}")
        by_worker: dict[int, list[int]] = {}
        for i, (w, _) in enumerate(calls):
            by_worker.setdefault(w, []).append(i)
        batches = {}
        for w, idx in by_worker.items():
            batch = [calls[i][1] for i in idx]
            try:  # all of them before any is sent
                batches[w] = _ForkingPickler.dumps(batch)
            except Exception as exc:
                raise _unsendable(batch, batch, exc, "was given") from None
        replies, failure, sent = [], None, []
        # set until every worker sent calls was read: a Ctrl-C (or any exception but a dead
        # worker's) on the way leaves replies in the pipes, and the bus says so from then on
        self._broken = "a call was interrupted before its replies were read"
        for w in by_worker:
            try:
                self._conns[w].send_bytes(batches[w])
                sent.append(w)
            except OSError:  # its end of the pipe is gone: it died
                try:
                    self._recv(w)
                except TestbedError as exc:
                    failure = failure or exc
        for w in sent:
            try:
                replies.append((by_worker[w], self._recv(w)))
            except TestbedError as exc:
                failure = failure or exc
        self._broken = None
        if failure is not None:
            raise failure
        return in_call_order(len(calls), replies)

    def local(self, party: str, fn, /, *args, **kwargs):
        """Run ``fn(party_data, *args, **kwargs)`` in the worker holding ``party``."""
        return self._run([(self._worker(party), (party, fn, args, kwargs))])[0]

    def local_map(self, calls: Iterable[Sequence[Any]]) -> list[Any]:
        """Run ``(party, fn, *args)`` calls, each worker its own parties' calls, concurrently."""
        return self._run([(self._worker(c[0]), (c[0], c[1], tuple(c[2:]), {})) for c in calls])

    def map_pure(self, calls: Iterable[Sequence[Any]]) -> list[Any]:
        """Run ``(fn, *args)`` calls that read no party's data, spread over the live workers."""
        live = [w for w in range(len(self._conns)) if w not in self._dead]
        calls = list(calls)
        if calls and not live:
            raise TestbedError(
                "pool engine: no live worker left"
                if self._conns
                else "pool engine: the bus is closed"
            )
        out = []
        for c in calls:
            out.append((live[self._next % len(live)], (None, c[0], tuple(c[1:]), {})))
            self._next += 1
        return self._run(out) if out else []

    def close(self, now: bool = False) -> None:
        """Stop the workers: ask them to finish (their current batch first), or with ``now``
        (the run was interrupted or failed) end them at once. Then every process left in a
        worker's process group (forked by a party's code) is killed, while the worker's own
        process id is still reserved (it is reaped after), so no other process can be hit."""
        for conn in self._conns if not now else ():
            try:
                conn.send(None)
            except OSError:
                pass
        for proc in self._procs:
            if now:
                proc.terminate()
            _end_group(proc, 10 if not now else 2)
        for conn in self._conns:
            conn.close()
        for fd in self._pidfds:
            if fd is not None:
                os.close(fd)
        self._conns, self._procs, self._pidfds, self._where, self._dead = [], [], [], {}, {}

    def __enter__(self) -> PoolBus:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # a bus dropped without close() must not leave workers behind
        try:
            self.close()
        except Exception:
            pass
