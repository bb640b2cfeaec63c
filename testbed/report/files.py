"""How the report's files reach the disk: atomically, and readable like any file the user makes
(mode 0666 minus the umask, e.g. 0644), not private like the run's own temp-file writes."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from testbed.exchange.bus import atomic_write_bytes

__all__ = ["safe_stem", "umask", "write_public"]


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


#: characters a file name keeps on every OS (Windows refuses ``<>:"/\\|?*``; shells and URLs
#: trip on spaces, parentheses, commas, ``=``)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def safe_stem(stem: str) -> str:
    """A plot's file name (without extension) safe on every OS: letters, digits, ``_`` and ``-``
    only, at most 100 characters; when that changed the name, a short digest of the original
    keeps two names that read alike apart (``leak_fedwad_t_0_5_cloud_3fa2c1``)."""
    safe = _UNSAFE.sub("_", stem).strip("_")[:100] or "plot"
    if safe == stem:
        return stem
    return f"{safe}_{hashlib.sha256(stem.encode()).hexdigest()[:6]}"
