"""Run-directory locking: one writer at a time, and no reader while a writer is at work.

A run directory is written by one process (``testbed run``, a sweep cell); ``testbed attack`` and
``testbed report`` read it. An advisory ``fcntl`` lock on ``.testbed.lock`` inside the directory
makes a second writer, or a reader that would see half-written files, stop with one line instead
of mixing two runs' files. The lock is released when the process exits, however it exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from testbed.errors import TestbedError

LOCK_NAME = ".testbed.lock"

__all__ = ["LOCK_NAME", "RunDirLockedError", "run_dir_lock"]


class RunDirLockedError(TestbedError):
    """Another process holds the run directory."""


@contextlib.contextmanager
def run_dir_lock(directory: str | Path, *, write: bool) -> Iterator[None]:
    """Hold ``directory``'s lock: exclusive to write, shared to read; never wait for it."""
    directory = Path(directory)
    if write:
        directory.mkdir(parents=True, exist_ok=True)
    elif not (directory / LOCK_NAME).exists():
        yield  # a directory written before locks existed, or copied without the lock file
        return
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if write else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            doing = "writing" if write else "reading"
            raise RunDirLockedError(
                f"{directory}: another testbed process is writing this run directory; "
                f"wait for it or choose another output directory (refused {doing} it)"
            ) from None
        yield
    finally:
        os.close(fd)
