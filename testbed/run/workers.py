"""Sweep worker processes die with the sweep (issue 12: :func:`tie_to_parent`, shared with the
pool engine's workers) and leave Ctrl-C to the sweep (issue 23); what a worker starts dies with
the worker (issue 48).

A worker starts processes of its own: the attacks' forkserver above all, a new interpreter that
is no child of the sweep and, when its worker dies, ends only after its interpreter's teardown
(torch and POT imported: 8 s on an idle machine, 30-40 s on a loaded one). Each worker therefore
leads a process group of its own, which everything it starts joins, and forks a *warden*: a
small process that waits for the worker's death (``PR_SET_PDEATHSIG``, and its parent id checked
every half second) and then kills the whole group with SIGKILL, itself included. A ``kill -9``
of the sweep thus ends workers (their own ``PR_SET_PDEATHSIG``), forkservers and attacks within
a fraction of a second.
"""

from __future__ import annotations

import os
import signal

from testbed.exchange.engines._lifetime import tie_to_parent
from testbed.exchange.engines.pool import IN_SWEEP_WORKER
from testbed.libc import libc_function
from testbed.run.interrupt import ignore_sigint
from testbed.threads import limit_blas_threads

__all__ = ["start_warden", "tie_to_parent", "worker_init"]

_PR_SET_PDEATHSIG = 1


def worker_init() -> None:
    """Initializer of a sweep's worker processes: tied to the sweep, deaf to Ctrl-C, CLI BLAS
    threading, what it starts killed with it (:func:`start_warden`), and the in-process
    engine's ``workers: auto`` is one worker there (the sweep's processes already use the
    cores)."""
    ignore_sigint()  # Ctrl-C: the sweep stops its workers itself
    os.environ[IN_SWEEP_WORKER] = "1"

    start_warden()
    tie_to_parent()
    limit_blas_threads()


def start_warden() -> int | None:
    """Make this process lead a process group of its own and fork its warden, which kills that
    group as soon as this process is gone. Returns the warden's pid (None where process groups
    or ``fork`` are not available: the worker's own tie to the sweep still holds)."""
    if not hasattr(os, "fork") or not hasattr(signal, "sigtimedwait"):
        return None
    try:
        os.setpgid(0, 0)
    except OSError:
        return None
    watched = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the warden's process
        try:
            _warden(watched)
        finally:
            os._exit(0)
    return pid


def _warden(watched: int) -> None:
    """The warden's whole life: hold nothing of the worker's, wait for its death, kill its
    process group."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # nor the terminal's or a caller's pipes (a reader waits for their end)
        os.dup2(null, fd)
    for fd in _open_fds():  # no pipe, socket or lock of the worker's stays open in here
        if fd > 2:
            try:
                os.close(fd)
            except OSError:
                pass
    for sig in (signal.SIGINT, signal.SIGTERM):  # the group's fate is the worker's
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    prctl = libc_function("prctl")
    if prctl is not None:  # else the parent id check below does it, within half a second
        prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1, 0, 0, 0)
    while os.getppid() == watched:
        signal.sigtimedwait({signal.SIGUSR1}, 0.5)
    os.killpg(os.getpgid(0), signal.SIGKILL)


def _open_fds() -> list[int]:
    try:
        return [int(f) for f in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 256))
