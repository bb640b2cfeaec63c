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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, field_validator

from testbed.errors import TestbedError
from testbed.exchange.bus import Bus
from testbed.exchange.engines._batch import in_call_order, run_in_order
from testbed.registry import PluginConfig

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


def _serve(conn, parties: Mapping[str, Any], blas_threads: int | None) -> None:
    """Worker loop: receive a batch of ``(party | None, fn, args, kwargs)``, run it in order,
    send back ``(ok, value)`` per call; ``None`` stops the worker. Ctrl-C reaches the whole
    process group: the driver stops its workers itself, so a worker ignores it."""
    import signal

    from testbed.exchange.engines._lifetime import tie_to_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tie_to_parent()  # a killed driver leaves no worker behind
    if blas_threads is not None:  # the driver's BLAS threading: same floating point, and k
        from testbed.threads import limit_blas_threads  # workers do not each start a pool

        limit_blas_threads(blas_threads)
    while True:
        batch = conn.recv()
        if batch is None:
            conn.close()
            return
        out = run_in_order(batch, parties)
        try:
            conn.send(out)
        except Exception as exc:  # an unpicklable result or exception
            conn.send([(False, TestbedError(f"pool engine: cannot return a result ({exc})"))])


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
        from testbed.exchange.engines.ray_bus import _driver_blas_threads

        threads = _driver_blas_threads()
        self._conns = []
        self._procs = []
        self._where: dict[str, int] = {}
        self._next = 0
        try:
            for w in range(k):
                group = {p: parties[p] for p in names[w::k]}
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_serve, args=(child, group, threads), daemon=True)
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
                self._where.update(dict.fromkeys(group, w))
        except BaseException:
            self.close()
            raise

    @property
    def party_names(self) -> list[str]:
        return list(self._where)

    def _worker(self, party: str) -> int:
        try:
            return self._where[party]
        except KeyError:
            known = ", ".join(self._where) or "(none)"
            raise TestbedError(f"no party {party!r} on this bus; parties: {known}") from None

    def _run(self, calls: list[tuple[int, tuple]]) -> list[Any]:
        """Send each worker its calls (in order), then collect; results in call order."""
        if not self._conns:
            raise TestbedError("pool engine: the bus is closed")
        by_worker: dict[int, list[int]] = {}
        for i, (w, _) in enumerate(calls):
            by_worker.setdefault(w, []).append(i)
        for w, idx in by_worker.items():
            self._conns[w].send([calls[i][1] for i in idx])
        replies = []
        for w, idx in by_worker.items():
            try:
                replies.append((idx, self._conns[w].recv()))
            except EOFError:
                raise TestbedError(f"pool engine: worker {w} died") from None
        return in_call_order(len(calls), replies)

    def local(self, party: str, fn, /, *args, **kwargs):
        """Run ``fn(party_data, *args, **kwargs)`` in the worker holding ``party``."""
        return self._run([(self._worker(party), (party, fn, args, kwargs))])[0]

    def local_map(self, calls: Iterable[Sequence[Any]]) -> list[Any]:
        """Run ``(party, fn, *args)`` calls, each worker its own parties' calls, concurrently."""
        return self._run([(self._worker(c[0]), (c[0], c[1], tuple(c[2:]), {})) for c in calls])

    def map_pure(self, calls: Iterable[Sequence[Any]]) -> list[Any]:
        """Run ``(fn, *args)`` calls that read no party's data, spread over the workers."""
        out = []
        for c in calls:
            out.append((self._next % len(self._conns), (None, c[0], tuple(c[1:]), {})))
            self._next += 1
        return self._run(out) if out else []

    def close(self, now: bool = False) -> None:
        """Stop the workers: ask them to finish (their current batch first), or with ``now``
        (the run was interrupted or failed) end them at once."""
        for conn in self._conns if not now else ():
            try:
                conn.send(None)
            except OSError:
                pass
        for proc in self._procs:
            if now:
                proc.terminate()
            proc.join(timeout=10 if not now else 2)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._conns, self._procs, self._where = [], [], {}

    def __enter__(self) -> PoolBus:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # a bus dropped without close() must not leave workers behind
        try:
            self.close()
        except Exception:
            pass
