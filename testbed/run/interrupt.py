"""Ctrl-C during a run or a sweep (issue 23, Build 5).

The first SIGINT raises :class:`KeyboardInterrupt` in the main thread as usual: the sweep stops
its worker processes at once (they ignore SIGINT themselves, so they print nothing) and keeps
every finished cell; the command line then prints one line and exits 130. From that moment a
second SIGINT ends the process at once (``os._exit(130)``): no cleanup that could hang, no
traceback from ``threading._shutdown``; the workers die with it (``prctl(PR_SET_PDEATHSIG)``,
:mod:`testbed.run.workers`). SIGTERM is handled the same way (exit code 143).
"""

from __future__ import annotations

import os
import signal
import threading

from testbed.sigint import STOP_SIGNALS

__all__ = ["ignore_sigint", "second_interrupt_exits"]


def _exit_now(signum, frame) -> None:  # pragma: no cover - ends the process
    try:
        os.write(2, b"\ninterrupted again: stopped at once\n")
    finally:
        os._exit(128 + (signum or signal.SIGINT))


def second_interrupt_exits() -> None:
    """After a first Ctrl-C (or SIGTERM): the next of either ends the process at once (main
    thread only)."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, _exit_now)


def ignore_sigint() -> None:
    """In a worker process: Ctrl-C reaches the whole foreground process group; the parent
    decides and stops its workers itself, so a worker ignores it (and prints no traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
