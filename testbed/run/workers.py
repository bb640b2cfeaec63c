"""Sweep worker processes die with the sweep (issue 12).

``kill -9`` of a sweep's main process gives the workers no chance to be told. Each worker asks
the kernel for SIGKILL when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``) and also watches
its parent id from a daemon thread (other systems, or a parent that died before the ``prctl``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import threading
import time

__all__ = ["tie_to_parent", "worker_init"]

_PR_SET_PDEATHSIG = 1


def tie_to_parent(poll_seconds: float = 0.5) -> None:
    """End this process (SIGKILL) as soon as its parent process is gone."""
    import multiprocessing as mp

    proc = mp.parent_process()  # the pid that started us (a spawn child knows it)
    parent = proc.pid if proc is not None and proc.pid else os.getppid()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the watch below does it
    if os.getppid() != parent:  # the parent died before the prctl
        os.kill(os.getpid(), signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def worker_init() -> None:
    """Initializer of a sweep's worker processes: tied to the sweep, deaf to Ctrl-C, CLI BLAS
    threading, and
    the in-process engine's ``workers: auto`` is one worker (the sweep's processes use the
    cores)."""
    from testbed.exchange.engines.pool import IN_SWEEP_WORKER
    from testbed.run.interrupt import ignore_sigint
    from testbed.threads import limit_blas_threads

    ignore_sigint()  # Ctrl-C: the sweep stops its workers itself
    os.environ[IN_SWEEP_WORKER] = "1"

    tie_to_parent()
    limit_blas_threads()
