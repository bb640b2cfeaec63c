"""The C library, loaded once per process, for the Linux calls the standard library does not wrap
(``prctl``, ``renameat2``, ``malloc_trim``). ``ctypes.util.find_library`` runs ``ldconfig`` in a
subprocess on every call; a forked process inherits the loaded library and never runs it."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["libc", "libc_function"]


@functools.cache
def libc() -> ctypes.CDLL | None:
    """This process's C library (``errno`` kept for ``ctypes.get_errno``); None where it cannot
    be loaded."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def libc_function(name: str):
    """The C library's function ``name``, or None where the library or the function is missing."""
    lib = libc()
    return getattr(lib, name, None) if lib is not None else None
