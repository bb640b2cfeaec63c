"""The command line's first Ctrl-C (or SIGTERM), remembered.

SIGTERM (``kill PID``, a job scheduler's or a container's stop) is handled as SIGINT is: the run
stops at once, its finished results kept, with one line and exit code 143 (128 + 15) instead of
130. The first SIGINT raises :class:`KeyboardInterrupt` in the main thread, as Python's default
handler does (:mod:`testbed.run.interrupt` handles what follows). It is also remembered: an
exception raised inside a weakref callback or a ``__del__`` is printed as "Exception ignored" and
dropped by CPython, and the command would then go on as if no Ctrl-C had come. A sweep checks
between cells (:func:`raise_if_interrupted`) and the command line when a command returns
(:func:`was_interrupted`), so a dropped Ctrl-C still stops the run at the next clean point and
exits 130. Only the command line installs the handler: library callers keep their own.
"""

from __future__ import annotations

import signal
import sys
import threading

__all__ = [
    "STOP_SIGNALS",
    "install_first_interrupt",
    "interrupt_signal",
    "raise_if_interrupted",
    "was_interrupted",
]

#: the signals that stop a command cleanly: Ctrl-C, and ``kill PID``
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_seen = [0]  # the first of STOP_SIGNALS that reached the handler below (0: none)


def _first_interrupt(signum, frame) -> None:
    _seen[0] = _seen[0] or signum or signal.SIGINT
    raise KeyboardInterrupt


def install_first_interrupt() -> None:
    """The command line's SIGINT and SIGTERM handler (main thread only), with nothing seen yet;
    and a hook that keeps a dropped KeyboardInterrupt off the screen (no "Exception ignored"
    traceback: the Ctrl-C is honoured at the next clean point), passing every other such error
    on."""
    _seen[0] = 0
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, _first_interrupt)
        if sys.unraisablehook is not _quiet_interrupts:
            _quiet_interrupts.passed_on = sys.unraisablehook
            sys.unraisablehook = _quiet_interrupts


def _quiet_interrupts(unraisable) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _seen[0]:
        return
    _quiet_interrupts.passed_on(unraisable)


_quiet_interrupts.passed_on = sys.__unraisablehook__


def was_interrupted() -> bool:
    """Whether a SIGINT or SIGTERM reached the command line's handler, even if its
    KeyboardInterrupt was dropped where it landed."""
    return bool(_seen[0])


def interrupt_signal() -> int:
    """The signal that stopped the command (SIGINT when none reached the handler: a
    KeyboardInterrupt raised otherwise)."""
    return _seen[0] or signal.SIGINT


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt if a SIGINT or SIGTERM came, at a point where stopping is clean (between a
    sweep's cells): one whose exception CPython dropped is honoured there."""
    if _seen[0]:
        raise KeyboardInterrupt
