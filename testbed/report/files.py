"""How the report's files reach the disk: atomically, and readable like any file the user makes
(mode 0666 minus the umask, e.g. 0644), not private like the run's own temp-file writes."""

from __future__ import annotations

import os
from pathlib import Path

from testbed.exchange.bus import atomic_write_bytes

__all__ = ["umask", "write_public"]


def umask() -> int:
    """The process's umask, read without changing it (Linux: /proc/self/status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: read by setting, then restore at once
    os.umask(mask)
    return mask


def write_public(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with the mode a new file of the user's gets."""
    atomic_write_bytes(path, data)
    os.chmod(path, 0o666 & ~umask())
