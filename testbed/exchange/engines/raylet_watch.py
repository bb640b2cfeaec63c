"""The private Ray cluster's raylet, watched from the driver (issue 48, fault 8).

When the raylet of the cluster a run started for itself dies, Ray's core worker in the driver
notices it after about 15 s, writes one C++ line of its own ("Attempting to recover N lost
objects") and ends the whole process with exit code 1: no line of the testbed's says what died.
The watcher sees the death at once, through a pidfd (Linux >= 5.3; elsewhere by polling the
process every 0.2 s). It gives the driver's own path a moment: a call to an actor that fails
then (:class:`~testbed.errors.EngineFault`, with what of the run was kept) and the session's
:meth:`stop` claim the fault, and the watcher does nothing more. Should nothing claim it, the
driver is waiting inside Ray, which will end it: the watcher then writes the one line itself,
kills what is left of the session, removes its folder and ends the process (exit 1), before Ray
would. The run's unfinished directory is then left for the next run into the same folder to
remove, as after a ``kill -9``: nothing of the run is committed.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable

__all__ = ["RayletWatch", "alive"]

#: how long the driver's own path has to claim the fault before the watcher ends the process
GRACE_SECONDS = 1.0


class RayletWatch:
    """Watch ``pid``; on its death, unless :meth:`claim` was called within
    :data:`GRACE_SECONDS`, write ``line()`` to stderr, call ``cleanup()`` and ``os._exit(1)``."""

    def __init__(self, pid: int, line: Callable[[], str], cleanup: Callable[[], None]):
        self.pid = pid
        self.dead = threading.Event()
        self._claimed = threading.Event()
        self._line, self._cleanup = line, cleanup
        self._thread = threading.Thread(target=self._watch, name="raylet-watch", daemon=True)
        self._thread.start()

    def claim(self) -> None:
        """The driver handles the raylet's death (or the session ends): the watcher stands
        down."""
        self._claimed.set()

    def _wait_for_death(self) -> None:
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            try:
                while not self._claimed.is_set():
                    if select.select([fd], [], [], 0.5)[0]:
                        return
            finally:
                os.close(fd)
            return
        while not self._claimed.is_set() and alive(self.pid):
            time.sleep(0.2)

    def _watch(self) -> None:
        self._wait_for_death()
        if self._claimed.is_set():
            return
        self.dead.set()
        if self._claimed.wait(GRACE_SECONDS):
            return
        try:
            os.write(2, f"error: {self._line()}\n".encode())
            self._cleanup()
        finally:
            os._exit(1)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (not ended, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b") ", 1)[1][:1] != b"Z"
    except (OSError, IndexError):
        return False
