"""Worker processes die with the process that started them (issue 12; the pool engine's
workers and the sweep's ``--jobs`` workers).

``kill -9`` (or SIGTERM) of the main process gives its workers no chance to be told, and a forked
worker may hold copies of its siblings' pipe ends, so it would not see its own pipe close. Each
worker asks the kernel for SIGKILL when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``) and
also watches its parent id from a daemon thread (other systems, or a parent that died before the
``prctl``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

from testbed.libc import libc_function

__all__ = ["tie_to_parent"]

_PR_SET_PDEATHSIG = 1


def tie_to_parent(poll_seconds: float = 0.5) -> None:
    """End this process (SIGKILL) as soon as its parent process is gone."""
    proc = mp.parent_process()  # the pid that started us (a spawn child knows it)
    parent = proc.pid if proc is not None and proc.pid else os.getppid()
    prctl = libc_function("prctl")
    if prctl is not None:  # elsewhere (not Linux) the watch below does it
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the prctl
        os.kill(os.getpid(), signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
