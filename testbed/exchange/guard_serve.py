"""The guard's worker process itself (started by :class:`testbed.exchange.guard_worker.GuardWorker`
as ``python -m testbed.exchange.guard_serve <commands fd> <answers fd> <memory fd> <status fd> <its pid>``).

It holds a copy of each guard's index (:meth:`PrivacyGuard.from_rows`: the same rows, owners and
thresholds) and its cache of clean payloads, rebuilds each batch's payloads, and answers with
"clean" or "something in it", the number of windows it compared and the payloads' digests; it
decides nothing else. It ignores Ctrl-C (the bus's process stops it) and ends when
its command pipe closes.
"""

from __future__ import annotations

import mmap
import os
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from testbed.exchange.guard import PrivacyGuard
from testbed.exchange.guard_readings import readings
from testbed.exchange.guard_worker import _U64, ArrayReader, unpack_payload
from testbed.exchange.payload import payload_digest
from testbed.threads import limit_blas_threads

_KEEP = 4  # guards the worker keeps an index for (a run drops its own when it ends)


def _serve(recv: Connection, send: Connection, fd: int, status: mmap.mmap) -> None:
    guards: dict[int, Any] = {}
    clean: dict[int, set[str]] = {}  # per guard: digests of payloads found clean
    view, size = None, 0
    try:
        send.send(("ready",))
    except OSError:
        return
    while True:
        try:
            msg = recv.recv()
        except (EOFError, OSError):
            return
        op = msg[0]
        if op == "load":
            _, gid, widths, parties = msg
            guards[gid] = PrivacyGuard.from_rows(widths, parties)
            while len(guards) > _KEEP:  # the oldest first: a guard asking later checks itself
                old = next(iter(guards))
                guards.pop(old)
                clean.pop(old, None)
            continue
        if op == "drop":
            guards.pop(msg[1], None)
            clean.pop(msg[1], None)
            continue
        _, gid, bid, need, templates, values, extra, known = msg
        try:
            t0 = time.perf_counter()
            if need > size:
                view = None
                size = need
                view = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            guard = guards[gid]
            seen = clean.setdefault(gid, set())
            seen.update(known)
            clean_now, rows, digests = _check(guard, seen, view, templates, values, extra)
            answer = ("checked", bid, clean_now, rows, time.perf_counter() - t0, digests)
        except Exception as exc:  # answered, not raised: the bus checks this batch itself
            answer = ("error", bid, f"{type(exc).__name__}: {exc}")
        try:
            send.send(answer)
        except OSError:  # the bus's process is gone
            return
        status[:8] = _U64.pack(bid)  # after the answer is in the pipe: reading it won't wait


def _check(guard, seen: set[str], view, templates, values, extra) -> tuple[bool, int, list]:
    """Hash a batch's payloads and search them, as the guard in the bus's process would
    (:meth:`PrivacyGuard._here`): a payload already found clean is not searched again, and
    the batch's clean payloads are remembered only when all of it is clean."""
    read, values = ArrayReader(view), iter(values)
    digests: list[str] = []
    fresh: set[str] = set()
    leaves: list = []
    for i, template in enumerate(templates):
        if type(template) is int:  # the same object as an earlier payload of the batch
            digests.append(digests[template])
            continue
        p = unpack_payload(template, read, values)
        d = payload_digest(p)
        digests.append(d)
        if d not in seen and d not in fresh:
            fresh.add(d)
            leaves.extend(readings(p, f"{i}/"))
    leaves.extend((path, read.next(dt, shape)) for path, dt, shape in extra)
    before = guard.rows_checked
    hit = guard._find_in(leaves, None) if leaves else None
    if hit is None:
        seen |= fresh
    return hit is None, guard.rows_checked - before, digests


def _batch_policy() -> None:
    """Run as batch work (Linux ``SCHED_BATCH``): the same share of the CPU as any process of
    its nice value, but waking up (a batch arrives) never preempts the thread it shares a core
    with. With both cores busy (other users' jobs, the protocol's own workers) a wake-up would
    otherwise take the protocol's core for the whole search, and the bus's thread pays for it
    in the protocol's time (measured: docs/findings/benchmarks.md). Nothing changes on an idle core.
    ``OT_TESTBED_GUARD_POLICY=normal`` keeps the default policy."""
    if os.environ.get("OT_TESTBED_GUARD_POLICY", "").strip().lower() == "normal":
        return
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_BATCH"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:  # not allowed here: the default policy
            pass


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the bus's process decides when to stop
    limit_blas_threads()
    _batch_policy()
    recv_fd, send_fd, mem_fd, status_fd = (int(a) for a in argv[:4])
    status = mmap.mmap(status_fd, mmap.PAGESIZE)
    _serve(Connection(recv_fd, writable=False), Connection(send_fd, readable=False), mem_fd, status)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
