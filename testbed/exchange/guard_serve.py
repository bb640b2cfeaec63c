"""The guard's worker process itself (started by :class:`testbed.exchange.guard_worker.GuardWorker`
as ``python -m testbed.exchange.guard_serve <commands fd> <answers fd> <memory fd> <its pid>``).

It holds a copy of each guard's index (:meth:`PrivacyGuard.from_rows`: the same rows, owners and
thresholds) and answers each batch with "clean" or "something in it" and the number of windows it
compared; it decides nothing else. It ignores Ctrl-C (the bus's process stops it) and ends when
its command pipe closes.
"""

from __future__ import annotations

import mmap
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

_KEEP = 4  # guards the worker keeps an index for (a run drops its own when it ends)


def _serve(recv: Connection, send: Connection, fd: int) -> None:
    from testbed.exchange.guard import PrivacyGuard

    guards: dict[int, Any] = {}
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
                guards.pop(next(iter(guards)))
            continue
        if op == "drop":
            guards.pop(msg[1], None)
            continue
        _, gid, bid, need, layout = msg
        try:
            t0 = time.perf_counter()
            if need > size:
                view = None
                size = need
                view = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            leaves = [
                (path, np.ndarray(shape, np.dtype(dt), buffer=view, offset=off))
                for path, dt, shape, off in layout
            ]
            guard = guards[gid]
            before = guard.rows_checked
            hit = guard._find_in(leaves, None)
            del leaves
            answer = ("checked", bid, hit is None, guard.rows_checked - before,
                      time.perf_counter() - t0)  # fmt: skip
        except Exception as exc:  # answered, not raised: the bus checks this batch itself
            answer = ("error", bid, f"{type(exc).__name__}: {exc}")
        try:
            send.send(answer)
        except OSError:  # the bus's process is gone
            return


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the bus's process decides when to stop
    from testbed.threads import limit_blas_threads

    limit_blas_threads()
    recv_fd, send_fd, mem_fd = (int(a) for a in argv[:3])
    _serve(Connection(recv_fd, writable=False), Connection(send_fd, readable=False), mem_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
