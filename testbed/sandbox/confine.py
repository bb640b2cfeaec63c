"""The kernel sandbox an attack process puts itself in before it reads its inputs.

:func:`confine` runs first thing in the attack's process (a child of the forkserver, which never
held the driver's data). In order:

1. ``setsid``: the attack gets a session and process group of its own;
2. when it may (root, or an unprivileged user namespace), new network, PID and mount
   namespaces: no network interface but a loopback that is down; the attack runs as PID 1 of a
   namespace of its own, so that when it ends (or the driver kills it) the kernel kills every
   process it started, detached grandchildren included (the process that called ``confine``
   stays outside and only waits; ``PR_SET_PDEATHSIG`` kills the attack if that process dies);
   an empty tmpfs over ``/run``, ``/tmp``, ``/var/tmp`` and ``/dev/shm`` hides the unix sockets
   there (the new ``/tmp`` is its scratch space; a path it must read beneath one of them, such
   as a checkout under /tmp, is mounted back read-only);
3. every capability dropped (a root attack keeps uid 0 but may no longer load modules, change
   sysctls, ``ptrace`` others, ...), core dumps off, resource limits (address space, CPU
   seconds, file size, open files, processes);
4. ``PR_SET_NO_NEW_PRIVS`` and Landlock (:mod:`testbed.sandbox.landlock`): read only beneath the
   Python installation and the packages the attack imports, write only beneath its own
   temporary directory; no TCP; no signal, ``ptrace`` or ``/proc`` access to any process outside.

It returns the isolation level reached, a short string that results.json records with each row.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import resource
import select
import signal
import site
import sys
import sysconfig
import tempfile
from dataclasses import dataclass

from testbed.sandbox import landlock

__all__ = ["Policy", "confine", "isolation_level", "verified"]

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWPID = 0x20000000
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522

_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option: int, arg: int = 0, what: str = "prctl") -> None:
    lib = _libc()
    _check(lib.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), 0, 0), what)


def set_non_dumpable() -> None:
    """``PR_SET_DUMPABLE 0`` on this process: no core dump, and its ``/proc/PID/{mem,environ,
    cmdline,...}`` become readable only with CAP_SYS_PTRACE (the driver calls it for itself)."""
    _prctl(_PR_SET_DUMPABLE, 0, "PR_SET_DUMPABLE")


@dataclass(frozen=True)
class Policy:
    """What an attack process may do: the paths it may read, its temporary directory (the only
    place it may write) and its resource limits (None: no limit of that kind)."""

    read: tuple[str, ...]
    tmp: str
    memory_bytes: int | None = None  # address space on top of what the process maps at start
    cpu_seconds: int | None = None
    file_bytes: int | None = None
    open_files: int | None = 256
    processes: int | None = 256


def _unshare() -> list[str]:
    """New network and PID namespaces when the kernel lets us; the names reached."""
    flags = _CLONE_NEWNET | _CLONE_NEWPID
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:
        flags |= _CLONE_NEWUSER  # an unprivileged user may create them inside a user namespace
    if _libc().unshare(ctypes.c_int(flags)) != 0:  # os.unshare is Python >= 3.12
        return []
    if uid != 0:  # the same ids inside (unmapped, it could create no file at all)
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{uid} {uid} 1"),
            ("gid_map", f"{gid} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
    return ["netns", "pidns"]


def _become_pid1_of_namespace() -> None:
    """Fork into the new PID namespace: the child (PID 1 there) returns and runs the attack; this
    process waits for it and exits with its status, never running any attack code."""
    alive_r, alive_w = os.pipe()  # readable (EOF) in the child once this process is gone
    pid = os.fork()
    if pid:
        os.close(alive_r)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    os.close(alive_w)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, "PR_SET_PDEATHSIG")
    if select.select([alive_r], [], [], 0)[0]:  # it died before the line above
        os._exit(1)
    os.close(alive_r)


def _cap_last() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 63


_CAP_LAST = _cap_last()  # read once, in the forkserver, not in every attack


_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 1 << 14, 1 << 18
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
# open_tree(2) and move_mount(2) (Linux >= 5.2; the same numbers on every architecture)
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT = 428, 429
_OPEN_TREE_CLONE, _AT_RECURSIVE, _MOVE_MOUNT_F_EMPTY_PATH = 1, 0x8000, 4
_AT_FDCWD = -100
#: directories where unix sockets and shared scratch live (docker, dbus, X11, databases, the
#: forkserver's own socket): Landlock up to ABI 7 does not stop ``connect`` to a socket file
HIDDEN = ("/run", "/tmp", "/var/tmp", "/dev/shm")
TMPFS_BYTES = 256 << 20  # the attack's scratch space (memory-backed)
SCRATCH = "scratch"  # the attack's temporary directory in a new /tmp that holds kept paths


def _outermost(paths) -> list[str]:
    """The paths not beneath another of them, sorted."""
    out: list[str] = []
    for p in sorted(set(paths)):
        if not any(p.startswith(q + os.sep) for q in out):
            out.append(p)
    return out


def _clone_tree(path: str) -> int:
    """A detached copy of the mount tree at ``path`` (``open_tree(OPEN_TREE_CLONE)``): the file
    descriptor, or -1 where the kernel has no ``open_tree``."""
    lib = _libc()
    flags = _OPEN_TREE_CLONE | _AT_RECURSIVE | os.O_CLOEXEC
    fd = lib.syscall(
        ctypes.c_long(_SYS_OPEN_TREE), ctypes.c_int(_AT_FDCWD), path.encode(), ctypes.c_uint(flags)
    )
    if fd < 0:
        if ctypes.get_errno() == errno.ENOSYS:
            return -1
        _check(-1, f"open_tree {path}")
    return fd


def _attach_read_only(fd: int, path: str, is_dir: bool) -> None:
    """Mount the detached tree ``fd`` at ``path`` (made first, in the new tmpfs) and make it
    read-only there: a kept path the attack may read but not change."""
    lib = _libc()
    if is_dir:
        os.makedirs(path, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "x"):
            pass
    ret = lib.syscall(
        ctypes.c_long(_SYS_MOVE_MOUNT), ctypes.c_int(fd), b"", ctypes.c_int(_AT_FDCWD),
        path.encode(), ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH),
    )  # fmt: skip
    _check(ret, f"move_mount {path}")
    # a remount keeps the flags a user namespace may not clear (nosuid, nodev, noexec, atime)
    st = os.statvfs(path).f_flag
    keep = 0
    for st_flag, ms_flag in (
        (os.ST_NOSUID, _MS_NOSUID),
        (os.ST_NODEV, _MS_NODEV),
        (os.ST_NOEXEC, _MS_NOEXEC),
        (os.ST_NOATIME, _MS_NOATIME),
        (os.ST_NODIRATIME, _MS_NODIRATIME),
        (os.ST_RELATIME, _MS_RELATIME),
    ):
        if st & st_flag:
            keep |= ms_flag
    flags = ctypes.c_ulong(_MS_REMOUNT | _MS_BIND | _MS_RDONLY | keep)
    _check(lib.mount(None, path.encode(), None, flags, None), f"remount {path} read-only")


def _private_mounts(keep: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """A mount namespace of its own in which an empty tmpfs hides each directory of
    :data:`HIDDEN`; the paths of ``keep`` beneath one (a checkout or virtual environment under
    /tmp) are mounted back into it, read-only, and nothing else of it. Returns the directories
    hidden and the paths mounted back. Nothing when the kernel refuses (no CAP_SYS_ADMIN in a
    user namespace); raises if it refuses halfway. A kernel without ``open_tree`` (before 5.2)
    leaves a directory holding a kept path visible, as it is."""
    lib = _libc()
    if lib.unshare(ctypes.c_int(_CLONE_NEWNS)) != 0:
        return [], []
    _check(lib.mount(b"none", b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None), "mount")
    opts = f"size={TMPFS_BYTES},mode=1777".encode()
    hidden: list[str] = []
    bound: list[str] = []
    kept = [os.path.realpath(p) for p in keep]
    for d in HIDDEN:
        real = os.path.realpath(d)
        if os.path.islink(d) or not os.path.isdir(d):
            continue
        inside = _outermost(r for r in kept if r.startswith(real + os.sep))
        trees: list[tuple[int, str, bool]] = []
        try:
            for p in inside:  # copies of the kept trees, taken before the tmpfs covers them
                fd = _clone_tree(p)
                if fd < 0:
                    break
                trees.append((fd, p, os.path.isdir(p)))
            if len(trees) < len(inside):  # no open_tree: this directory stays visible
                continue
            flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV)
            _check(lib.mount(b"tmpfs", d.encode(), b"tmpfs", flags, opts), f"mount {d}")
            hidden.append(d)
            for fd, p, is_dir in trees:
                _attach_read_only(fd, p, is_dir)
                bound.append(p)
        finally:
            for fd, _, _ in trees:
                os.close(fd)
    return hidden, bound


def _drop_capabilities() -> None:
    """Empty bounding, ambient, effective, permitted and inheritable capability sets."""
    lib = _libc()
    for cap in range(_CAP_LAST + 1):
        lib.prctl(_PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0), 0, 0)
    lib.prctl(_PR_CAP_AMBIENT, ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL), ctypes.c_ulong(0), 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable} sets, all zero
    _check(lib.capset(header, data), "capset")


def _mapped_bytes() -> int:
    """This process's virtual memory size now (VmSize)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _set_limits(p: Policy) -> None:
    def lim(kind, value):
        if value is not None:
            soft, hard = resource.getrlimit(kind)
            v = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
            resource.setrlimit(kind, (v, v))

    lim(resource.RLIMIT_CORE, 0)
    if p.memory_bytes is not None:
        lim(resource.RLIMIT_AS, _mapped_bytes() + p.memory_bytes)
    lim(resource.RLIMIT_CPU, p.cpu_seconds)
    lim(resource.RLIMIT_FSIZE, p.file_bytes)
    lim(resource.RLIMIT_NOFILE, p.open_files)
    lim(resource.RLIMIT_NPROC, p.processes)


def _plain_environment(tmp: str) -> None:
    keep = ("PATH", "LANG", "LC_ALL", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    os.environ.clear()
    os.environ.update(env, TMPDIR=tmp, HOME=tmp)
    tempfile.tempdir = tmp


def confine(policy: Policy) -> str:
    """Sandbox this process for good (see the module docstring); the isolation level reached.
    Raises OSError when Landlock is offered but refuses the ruleset."""
    os.setsid()
    reached = _unshare()
    if "pidns" in reached:
        _become_pid1_of_namespace()
    tmp = policy.tmp
    if reached:
        hidden, bound = _private_mounts(policy.read)
        if hidden:
            reached.append("mountns")
        if "/tmp" in hidden:
            tmp = "/tmp"  # a fresh tmpfs of its own
            if any(p.startswith("/tmp/") for p in bound):  # not the kept paths mounted in it
                tmp = os.path.join("/tmp", SCRATCH)
                os.mkdir(tmp, 0o700)
    os.chdir(tmp)
    _plain_environment(tmp)
    if os.geteuid() == 0:
        _drop_capabilities()
        reached.append("nocaps")
    _set_limits(policy)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
    abi = landlock.abi_version()
    if abi >= 1:
        # its own /proc/<pid> (threadpoolctl reads its maps): nothing it cannot read in memory
        landlock.restrict((*policy.read, "/proc/self"), (tmp, "/dev/null"))
        reached.insert(0, f"landlock{abi}")
    else:
        reached.insert(0, "process")
    return "+".join(reached)


#: files that exist on every Linux system and that no attack's sandbox opens: the probe of
#: :func:`verified` (``/`` read as a directory: its listing)
PROBES = ("/etc/passwd", "/")


def verified(level: str) -> str:
    """The level :func:`confine` reported, checked from inside: with Landlock on, opening a
    :data:`PROBES` path must fail. Should one open, Landlock holds nothing here and the level
    says so (``process`` in its place), whatever the ruleset was asked to do."""
    if not level.startswith("landlock"):
        return level
    for path in PROBES:
        try:
            fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path == "/" else 0))
        except OSError:
            continue
        os.close(fd)
        return "+".join(["process", *level.split("+")[1:]])
    return level


def isolation_level() -> str:
    """The level :func:`confine` would reach here, without confining anything: for the one-time
    notice when the kernel offers no Landlock."""
    abi = landlock.abi_version()
    return f"landlock{abi}" if abi >= 1 else "process"


@functools.lru_cache(maxsize=1)
def python_paths() -> tuple[str, ...]:
    """The Python installation: prefixes, standard library, site-packages, shared libraries."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.update(v for k, v in sysconfig.get_paths().items() if k not in ("data", "scripts"))
    # the installation's site folders, from its prefixes: never from sys.path, which a .pth
    # file or a plugin's code extends (an entry named site-packages, a symlink to /, once
    # opened the whole file system)
    paths.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    if site.ENABLE_USER_SITE:
        paths.add(site.getusersitepackages())
    paths.update(("/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/sys/devices/system/cpu"))
    # the CPU quota (joblib/loky, hence scikit-learn, read it to size their thread pools)
    paths.update(p for p in ("/sys/fs/cgroup",) if os.path.exists(p))
    # the machine's CPU list: torch's cpuinfo parses it at its first CPU kernel and, when it
    # cannot, prints "Error in cpuinfo: failed to parse processor information" on the user's
    # screen (an attack optimising with torch did). It holds no process's state, only the
    # processors' model and flags, which /sys/devices/system/cpu shows already in part
    paths.update(p for p in ("/proc/cpuinfo",) if os.path.exists(p))
    paths.update(("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"))
    real = {os.path.realpath(p) for p in paths if p and os.path.exists(p)}
    return tuple(sorted(p for p in real if p != "/"))
