"""Linux Landlock through its three system calls (no binding on PyPI is maintained for it).

Landlock lets an unprivileged process (root too) restrict itself and every process it later
starts: file-system access only beneath the paths given (ABI 1; file truncation from ABI 3,
device ioctls from ABI 5), TCP bind and connect to no port at all (ABI 4), no signal to and no
abstract unix socket of a process outside the restricted domain (ABI 6). Whatever the ABI, a
restricted process can neither ``ptrace`` nor read the memory of a process outside its domain,
and cannot mount anything. The kernel interface is documented in landlock(7),
landlock_create_ruleset(2), landlock_add_rule(2) and landlock_restrict_self(2); the constants
below are those of ``<linux/landlock.h>``.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterable

__all__ = ["LandlockError", "abi_version", "restrict"]

# system call numbers (the same on every architecture that has them: asm-generic numbering)
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

# file-system access rights, by the ABI that introduced them
_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV


class LandlockError(OSError):
    """The kernel refused a Landlock call (or offers no Landlock)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # packed in <linux/landlock.h>
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_LIBC = None


def _syscall(*args) -> int:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    ret = _LIBC.syscall(*args)
    if ret < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, os.strerror(err))
    return ret


def abi_version() -> int:
    """The Landlock ABI the kernel offers; 0 when it offers none (or is not Linux on x86-64 or
    aarch64, whose system call numbers are the ones above)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return 0
    try:
        return _syscall(
            ctypes.c_long(_SYS_CREATE), None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION
        )
    except (LandlockError, OSError, AttributeError):
        return 0


def _handled(abi: int) -> tuple[int, int, int]:
    fs = _FS_ABI1
    if abi >= 2:
        fs |= _FS_REFER
    if abi >= 3:
        fs |= _FS_TRUNCATE
    if abi >= 5:
        fs |= _FS_IOCTL_DEV
    net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0
    return fs, net, scoped


def restrict(read: Iterable[str], write: Iterable[str]) -> int:
    """Restrict this process (and its future children) for good: read (and execute) only
    beneath the paths of ``read``, read and write only beneath those of ``write``, no TCP, no
    signal or abstract socket outside. Paths that do not exist are skipped. The caller must
    have set no-new-privileges (or hold CAP_SYS_ADMIN). Returns the ABI used."""
    abi = abi_version()
    if abi < 1:
        raise LandlockError(95, "this kernel offers no Landlock")
    fs, net, scoped = _handled(abi)
    attr = _RulesetAttr(fs, net, scoped)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = _syscall(ctypes.c_long(_SYS_CREATE), ctypes.byref(attr), ctypes.c_size_t(size), 0)
    try:
        for paths, rights in ((read, READ), (write, fs)):
            for path in paths:
                _add_path(ruleset, path, rights & fs)
        _syscall(ctypes.c_long(_SYS_RESTRICT), ruleset, 0)
    finally:
        os.close(ruleset)
    return abi


def _add_path(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, PermissionError):  # nothing this process could read there anyway
        return
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS  # a rule on a file takes file rights only
        rule = _PathBeneathAttr(rights, fd)
        _syscall(ctypes.c_long(_SYS_ADD_RULE), ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
    finally:
        os.close(fd)
