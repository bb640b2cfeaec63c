"""Run directories: one writer at a time, no reader while a writer is at work, and a run that
replaces an earlier one whole.

A run directory is written by one process (``testbed run``, a sweep cell, ``testbed attack``
adding its rows); ``testbed report``, ``transcript`` and ``verify`` read it. An advisory
``fcntl`` lock on ``.testbed.lock`` inside the directory — exclusive to write, shared to read,
held for the whole read or write — makes a second writer, or a reader that would see
half-written files, stop with one line instead of mixing two runs' files. The lock is released
when the process exits, however it exits.

A new run into a used ``--out`` is written into a fresh directory beside it and swapped in
whole (:func:`fresh_run_dir`); an ``--out`` that is not a testbed run directory is refused.

A writer killed outright (``kill -9``, the machine going down) leaves its fresh directory
(``.NAME.testbed-*.tmp``) and, for a first run, a ``NAME`` holding only the lock file. The next
run into any directory beside them removes the fresh directories whose run directory it can lock
(:func:`fresh_run_dir`); the commands that read a run name both in one line
(:func:`interrupted`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from testbed.errors import TestbedError
from testbed.exchange.transcript import TEMP_MARK
from testbed.libc import libc_function

LOCK_NAME = ".testbed.lock"
#: what ``testbed attack`` is about to write, written before it writes (testbed/run/journal.py)
JOURNAL_NAME = ".testbed-attack.json"

__all__ = [
    "ATTACKS_FILE",
    "JOURNAL_NAME",
    "LOCK_NAME",
    "RunDirLockedError",
    "RunDirVanishedError",
    "attack_files",
    "RunDirWriter",
    "cell_labels",
    "check_replaceable",
    "finished_cells",
    "fresh_run_dir",
    "interrupted",
    "is_sweep",
    "locked_temp_dir",
    "remove_abandoned",
    "run_dir_lock",
    "scenario_of",
]


class RunDirLockedError(TestbedError):
    """Another process holds the run directory."""


class RunDirVanishedError(TestbedError):
    """The folder a run was being written into was deleted during the run (by another process,
    a clean-up job, ``rm -r runs/``): a runtime fault, not bad input (exit 1)."""

    exit_code = 1


def is_sweep(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` is a sweep's directory (its ``results.jsonl`` lists the cells)."""
    return (Path(run_dir) / "results.jsonl").is_file()


def finished_cells(run_dir: str | Path) -> list[Path]:
    """A sweep directory's finished cells (those with a ``results.json``), in the sweep's own
    order (its ``sweep.json``; name order for a cell it does not list)."""
    order = cell_labels(run_dir)
    done = [
        d
        for d in (Path(run_dir) / "cells").glob("*")
        # a temporary name is no cell: the manifest does not list it (evidence_files)
        if not is_temp_name(d.name) and (d / "results.json").is_file()
    ]
    return sorted(done, key=lambda d: (order.get(d.name, (len(order), ""))[0], d.name))


def cell_labels(run_dir: str | Path) -> dict[str, tuple[int, str]]:
    """A sweep's cells as its ``sweep.json`` lists them: cell hash -> (index, label, e.g.
    ``noise_multiplier=0.1, seed 1``); empty when the file is missing or unreadable."""
    try:
        cells = json.loads((Path(run_dir) / "sweep.json").read_text())["cells"]
        return {
            str(c["cell"]): (int(c["index"]), f"{c.get('label') or 'base'}, seed {c.get('seed')}")
            for c in cells
        }
    except (OSError, ValueError, KeyError, TypeError):
        return {}


#: descriptors of the run-directory locks this process holds
_HELD: set[int] = set()


def _forget_held_locks() -> None:
    """In a forked child (a worker of the pool engine, whatever a protocol forks): close the
    inherited lock descriptors. The lock stays the parent's (it ends when every descriptor of it
    is closed), and a child that outlives a killed parent cannot keep the directory locked."""
    for fd in list(_HELD):
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_held_locks)


@contextlib.contextmanager
def run_dir_lock(directory: str | Path, *, write: bool) -> Iterator[None]:
    """Hold ``directory``'s lock: exclusive to write, shared to read; never wait for it."""
    directory = Path(directory)
    if write:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a read-only or virtual file system (/proc), a name too long
            raise TestbedError(
                f"{directory}: cannot be made ({exc.strerror}); choose another output directory"
            ) from None
    elif not (directory / LOCK_NAME).exists():
        yield  # a directory written before locks existed, or copied without the lock file
        return
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    _HELD.add(fd)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if write else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            doing = "writing" if write else "reading"
            holder = "reading" if write and not _held(directory) else "writing"
            raise RunDirLockedError(
                f"{directory}: another testbed process is {holder} this run directory; "
                f"wait for it or choose another output directory (refused {doing} it)"
            ) from None
        yield
    finally:
        _HELD.discard(fd)
        os.close(fd)


def _held(directory: Path) -> bool:
    """Whether a writer holds ``directory``'s lock now (without creating the lock file); a
    reader's shared lock does not count."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


#: a writer's fresh directory beside its run directory ``NAME`` (:func:`fresh_run_dir`), or the
#: old run it is deleting (``.old``)
_FRESH = re.compile(rf"\.(?P<out>.+)\.{re.escape(TEMP_MARK)}[A-Za-z0-9_]+\.tmp(?:\.old)?")


def is_temp_name(name: str) -> bool:
    """True for the names of the testbed's own temporary files and fresh directories
    (``.NAME.testbed-XXXX.tmp``, ``.old`` while deleted): the only names the manifest leaves out
    for being temporary. Any other name holding ``testbed-`` is an ordinary file."""
    return _FRESH.fullmatch(name) is not None


#: the only names ``testbed attack`` writes its rows to (``attacks-<8 hex digits>.json``)
ATTACKS_FILE = re.compile(r"attacks-[0-9a-f]{8}\.json")


def attack_files(run_dir: str | Path) -> list[Path]:
    """The ``attacks-*.json`` files ``testbed attack`` wrote in ``run_dir`` (sorted). Any other
    entry named ``attacks-*`` (another name, a directory, a symlink) is refused with its name:
    the testbed never writes one, so it was added by someone else."""
    out = []
    try:
        entries = sorted(os.scandir(run_dir), key=lambda e: e.name)
    except OSError:
        return out
    for e in entries:
        if not e.name.startswith("attacks-"):
            continue
        if not ATTACKS_FILE.fullmatch(e.name) or not e.is_file(follow_symlinks=False):
            raise TestbedError(
                f"{e.path}: not a file testbed attack writes (attacks-<8 hex digits>.json); "
                "added later by someone else"
            )
        out.append(Path(e.path))
    return out


def _fresh_dirs(parent: Path) -> dict[str, list[Path]]:
    """The writers' fresh directories in ``parent``, by the run directory they were for."""
    found: dict[str, list[Path]] = {}
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return found
    for e in entries:
        if e.name.startswith(".") and TEMP_MARK in e.name and (m := _FRESH.fullmatch(e.name)):
            if e.is_dir(follow_symlinks=False):
                found.setdefault(m["out"], []).append(Path(e.path))
    return found


def interrupted(run_dir: str | Path) -> str | None:
    """One line when ``run_dir`` is what a killed ``testbed run`` left instead of a run: a
    directory holding only its lock file, or a writer's fresh directory (``.NAME.testbed-*.tmp``)
    that no writer holds; None otherwise (a run being written is refused by its lock)."""
    d = Path(run_dir)
    m = _FRESH.fullmatch(d.name)
    if m is not None:
        if _held(d):
            return None
        out = d.parent / m["out"]
        return (
            f"{d}: the unfinished files of an interrupted run into {out}, not a run directory; "
            f"run it again (the next run written in {d.parent}/ deletes them)"
        )
    try:
        names = [p.name for p in d.iterdir()]
    except OSError:
        return None
    if names != [LOCK_NAME] or _held(d):
        return None
    fresh = sorted(_fresh_dirs(d.parent).get(d.name, []))
    left = "only its lock file" + (f"; its unfinished files are in {fresh[0]}" if fresh else "")
    return f"{d}: an interrupted run left no results ({left}); run it again"


@contextlib.contextmanager
def locked_temp_dir(prefix: str) -> Iterator[Path]:
    """A new temporary directory (in the system's temporary folder), locked by this process
    while the block runs and removed when it ends; the directories of the same ``prefix`` that
    a killed process left (their lock no longer held) are removed first."""
    parent = Path(tempfile.gettempdir())
    remove_abandoned(parent, prefix)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        with run_dir_lock(tmp, write=True):
            yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def remove_abandoned(parent: Path, prefix: str, grace_seconds: float = 600.0) -> None:
    """Remove this user's directories ``parent/prefix*`` whose lock nobody holds: what a
    process killed outright (``kill -9``) left. One without a lock file (killed between
    making it and locking it) is removed once it is ``grace_seconds`` old."""
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(prefix)]
    except OSError:
        return
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if not e.is_dir(follow_symlinks=False) or st.st_uid != os.getuid():
            continue
        d = Path(e.path)
        try:
            fd = os.open(d / LOCK_NAME, os.O_RDWR)
        except OSError:
            if time.time() - st.st_mtime > grace_seconds:
                shutil.rmtree(d, ignore_errors=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its process is at work
            continue
        finally:
            os.close(fd)
        shutil.rmtree(d, ignore_errors=True)


def _remove_fresh_dirs(parent: Path, out: str) -> None:
    """Remove the fresh directories in ``parent`` that no writer holds: ``out``'s own (its lock
    is held by the caller) and those of another run directory whose lock this process can take
    at once (its writer holds it from before its fresh directory is made to after it is gone;
    taken only to move them aside, so a run or reader of that directory arriving now is
    refused for no longer than a rename). A lock file is never created or deleted here."""
    stale: list[Path] = []
    for name, dirs in _fresh_dirs(parent).items():
        if name == out:
            stale += dirs
            continue
        try:
            fd = os.open(parent / name / LOCK_NAME, os.O_RDWR)
        except OSError:  # no run directory, or no lock file: not known to be stale
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its writer (or a reader) is at work
            os.close(fd)
            continue
        try:
            for d in dirs:
                aside = d if d.name.endswith(".old") else d.with_name(d.name + ".old")
                try:
                    if aside != d:
                        os.rename(d, aside)
                    stale.append(aside)
                except OSError:
                    pass
        finally:
            os.close(fd)
    for d in stale:
        shutil.rmtree(d, ignore_errors=True)


# ----------------------------------------------------------------------------- replacing a run
#: files that only a testbed run directory holds: an ``--out`` holding one of them may be replaced
_RUN_MARKERS = (LOCK_NAME, "config_hash", "resolved.yaml", "results.json")


class RunDirWriter:
    """A run being written: ``path`` is a fresh directory beside ``out`` until :meth:`commit`
    swaps it into place (then ``path`` is ``out``); both stay locked until the block ends."""

    def __init__(self, out: Path, tmp: Path):
        self.out = out
        self.path = tmp
        self.committed = False
        self._identity = _identity(tmp)

    def check_in_place(self) -> None:
        """Refuse to go on when the working folder is no longer the one made for this run:
        deleted (a later write would make an empty folder of the same name, and the run would
        be committed without the files written before)."""
        if _identity(self.path) != self._identity:
            raise RunDirVanishedError(
                f"{self.path}: the run's working folder vanished during the run (deleted by "
                f"another process); nothing was written to {self.out}"
            )

    def commit(self) -> Path:
        """Put the new run in place of ``out`` whole: one ``renameat2(RENAME_EXCHANGE)`` where
        the kernel has it (readers see the old run or the new one, never a mix), else two
        renames (``out`` is briefly absent, never mixed). The old run is deleted. A working
        folder that vanished during the run is refused (:meth:`check_in_place`)."""
        if self.committed:
            return self.out
        self.check_in_place()
        tmp = self.path
        cwd = Path.cwd().resolve()
        inside = cwd == self.out.resolve() or self.out.resolve() in cwd.parents
        if inside or not _swap(tmp, self.out):
            _replace_contents(tmp, self.out)  # --out . or a mount point: file by file
        self.path = self.out
        self.committed = True
        return self.out


def _identity(path: Path) -> tuple[int, int] | None:
    """The (device, inode) of ``path``: a folder deleted and made again has another."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _swap(tmp: Path, out: Path) -> bool:
    """Put ``tmp`` where ``out`` is (the old run is deleted); False when ``out`` cannot be
    renamed (a mount point, another file system)."""
    if _exchange(tmp, out):
        shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old run
        return True
    if not out.exists():
        os.rename(tmp, out)
        return True
    trash = tmp.with_name(tmp.name + ".old")
    try:
        os.rename(out, trash)
    except OSError:
        return False
    os.rename(tmp, out)
    shutil.rmtree(trash, ignore_errors=True)
    return True


def _replace_contents(tmp: Path, out: Path) -> None:
    """Replace what ``out`` holds by what ``tmp`` holds, entry by entry (``out`` itself stays:
    the working directory, or a mount point). The lock files are kept, held as they are."""
    for p in out.iterdir():
        if p.name != LOCK_NAME:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for p in tmp.iterdir():
        if p.name != LOCK_NAME:
            os.rename(p, out / p.name)
    shutil.rmtree(tmp, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux ``renameat2`` with ``RENAME_EXCHANGE``); False when
    the call is not available or ``b`` does not exist."""
    if not b.exists() or not sys.platform.startswith("linux"):
        return False
    fn = libc_function("renameat2")
    if fn is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


def scenario_of(run_dir: str | Path) -> str | None:
    """The name of the scenario whose run (``resolved.yaml``) or sweep (``scenario.yaml``)
    ``run_dir`` holds; None when it holds neither or they do not say."""
    for f in ("resolved.yaml", "scenario.yaml"):
        try:
            raw = yaml.safe_load((Path(run_dir) / f).read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(raw, dict) and isinstance(raw.get("name"), str):
            return raw["name"]
    return None


def check_creatable(out: str | Path, flag: str = "--out") -> None:
    """Refuse (one line, before any work) an output folder that cannot be made: it is a file,
    or a folder above it is a file (``runs`` a file in the working directory included)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TestbedError(f"{out}: exists and is not a directory; choose another {flag}")
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise TestbedError(
                    f"{parent}: is a file, so {out} cannot be made; choose another {flag}"
                )
            if not os.access(parent, os.W_OK | os.X_OK):
                raise TestbedError(f"{parent}: not writable, so {out} cannot be made")
            return


def check_replaceable(out: str | Path, scenario: str | None = None) -> None:
    """Refuse (one line) an ``--out`` that exists, is not empty and is not a testbed run
    directory: a run replaces a previous run whole, never a folder of other files. With
    ``scenario``, also a run directory that holds another scenario's run (a rerun of the same
    scenario, with other settings, replaces its run)."""
    out = Path(out)
    check_creatable(out)
    held = scenario_of(out) if scenario is not None and out.is_dir() else None
    if held is not None and held != scenario:
        raise TestbedError(
            f"{out}: holds a run of scenario {held!r}, not {scenario!r}; choose another --out, "
            "or delete that directory to replace it"
        )
    if out.is_dir() and any(out.iterdir()) and not any((out / m).exists() for m in _RUN_MARKERS):
        raise TestbedError(
            f"{out}: exists and is not a testbed run directory; choose another --out "
            "(a run replaces an earlier run whole, never other files)"
        )


@contextlib.contextmanager
def fresh_run_dir(out: str | Path) -> Iterator[RunDirWriter]:
    """Write a run so that ``out`` ends up holding it whole: lock ``out`` (exclusive, the whole
    time), write into a new directory beside it (locked too), then :meth:`RunDirWriter.commit`
    swaps it in (called on leaving the block if the caller did not). On an error before the
    commit the new directory is removed and ``out`` is as it was: an earlier run's files are
    never mixed with a new run's."""
    out = Path(os.path.realpath(out))  # "--out ." has a parent; a symlink's target is replaced
    check_replaceable(out)
    existed = out.exists()
    with run_dir_lock(out, write=True):  # makes out and its parents, or says why it cannot
        _remove_fresh_dirs(out.parent, out.name)  # a killed writer's; we hold out's lock
        tmp = Path(
            tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.{TEMP_MARK}", suffix=".tmp")
        )
        w = RunDirWriter(out, tmp)
        try:
            with run_dir_lock(tmp, write=True):  # the lock file moves with the directory
                yield w
                w.commit()
        except BaseException:
            if not w.committed:
                shutil.rmtree(tmp, ignore_errors=True)
                if not existed:
                    shutil.rmtree(out, ignore_errors=True)  # only our lock file was in it
            raise
