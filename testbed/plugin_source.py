"""Where a plugin's code lies on disk, as the import system finds it from the file system, never
from what a loaded module says of itself.

The attack sandbox (:mod:`testbed.sandbox.confine`) opens to an attack its own package and,
beyond that, only the Python installation. Which folder is "its own package" must not come from
anything plugin code can set: a package's ``__path__`` (the one line ``__path__.append("/")`` in
an ``__init__.py`` once opened the whole file system), ``sys.path`` (an entry named
``site-packages`` that is a symlink to ``/``), a ``.pth`` file's lines, or a namespace package
that such an entry widens. So :data:`_PATH` and :data:`_FINDERS` are the import system as it
stood when this module was first imported (by :mod:`testbed.registry`, before it loads any
plugin), and :func:`locate` walks a dotted name down from them, from the file system, without
reading ``sys.modules``. Symlinks are resolved, and a folder the sandbox must never open
(:func:`refusal`) is refused with one line.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, PathFinder

from testbed.errors import TestbedError

__all__ = ["NotOnPath", "Source", "load", "locate", "refusal"]

#: ``sys.path`` and ``sys.meta_path`` before any plugin's code ran (editable installs' finders
#: included: setuptools installs them from a ``.pth`` file at interpreter start)
_PATH: tuple[str, ...] = tuple(sys.path)
_FINDERS: tuple = tuple(sys.meta_path)

#: folders no plugin's code may lie in
_NEVER_IN = ("/proc", "/etc", "/sys", "/dev", "/boot")
LOCK = ".testbed.lock"  # testbed.run.rundir.LOCK_NAME: a run directory holds one


class NotOnPath(TestbedError):
    """The module is no file on the import path the testbed started with."""


@dataclass(frozen=True)
class Source:
    """A module's place on disk: ``read`` is the one folder (its top regular package) or file
    (a single-file module) the sandbox opens; ``chain`` lists, from the top-level name down to
    the module, ``(name, file, folders)``: the file to execute (None for a namespace package)
    and the folders its submodules are searched in."""

    module: str
    read: str
    chain: tuple[tuple[str, str | None, tuple[str, ...]], ...]


def _find(name: str, within: tuple[str, ...] | None, now: bool):
    if within is not None:
        return PathFinder.find_spec(name, list(within))
    for finder in tuple(sys.meta_path) if now else _FINDERS:
        if finder is PathFinder:
            spec = PathFinder.find_spec(name, list(sys.path) if now else list(_PATH))
        else:
            find = getattr(finder, "find_spec", None)
            try:
                spec = find(name, None) if find is not None else None
            except Exception:  # a finder of another package that cannot answer: not ours
                spec = None
        if spec is not None:
            return spec
    return None


def locate(module: str, who: str, now: bool = False) -> Source:
    """The :class:`Source` of ``module`` (dotted name) for plugin ``who`` ("attack 'x'"), from
    the import path as it stood before any plugin ran (``now``: as it stands, for a class the
    driver's own code registered at run time); one-line :class:`TestbedError` when it is not
    found there, or lies where the sandbox must never look (:func:`refusal`)."""
    parts = module.split(".")
    specs, within = [], None
    for i in range(len(parts)):
        spec = _find(".".join(parts[: i + 1]), within, now)
        if spec is None or (spec.origin in ("built-in", "frozen")):
            raise NotOnPath(
                f"{who}: its module {module!r} is not a file on the import path the testbed "
                "started with; install the plugin's package (pip install)"
            )
        specs.append(spec)
        within = tuple(spec.submodule_search_locations or ()) or None
    if specs[-1].origin is None:
        raise TestbedError(f"{who}: {module!r} is a namespace package, not a module")
    # each file's own place; a namespace package's: the one folder that holds the next name
    homes: list[str] = [""] * len(specs)
    for i in range(len(specs) - 1, -1, -1):
        spec = specs[i]
        if spec.origin is None:
            homes[i] = os.path.dirname(homes[i + 1])
        elif spec.submodule_search_locations is not None:
            homes[i] = os.path.dirname(spec.origin)  # a regular package's folder
        else:
            homes[i] = spec.origin  # a module's file
    # the top regular package's folder or a top-level module's file; below namespace packages,
    # the first regular package's folder, or the namespace folder that holds the module
    first = next(i for i, spec in enumerate(specs) if spec.origin is not None)
    is_pkg = specs[first].submodule_search_locations is not None
    read = homes[first] if is_pkg or first == 0 else os.path.dirname(homes[first])
    read = os.path.realpath(read)
    why = refusal(read)
    if why:
        raise TestbedError(
            f"{who}: its package {module.split('.')[0]!r} lies at {read}, which {why}; the "
            "attack sandbox opens a plugin's own package only (install it in site-packages)"
        )
    real = os.path.realpath  # the files as they are, not the links to them
    chain = tuple(
        (
            ".".join(parts[: i + 1]),
            None if s.origin is None else real(s.origin),
            tuple(
                real(p)
                for p in ((homes[i],) if s.origin is None else s.submodule_search_locations or ())
            ),
        )
        for i, s in enumerate(specs)
    )
    return Source(module, read, chain)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def refusal(path: str) -> str:
    """Why the sandbox must never open ``path`` (symlinks resolved), "" when it may: the root
    of the file system, a folder under /proc, /etc, /sys, /dev or /boot, one that holds the home
    folders, a hidden folder of the home directory (``~/.ssh``) outside the Python installation,
    a folder inside a run directory (one of its parents holds the run's lock file) or one that
    holds a run directory (checked again when each attack starts: a run may be written there
    after the plugin was found)."""
    path = os.path.realpath(path)
    if path == "/":
        return "is the root of the file system"
    for top in _NEVER_IN:
        if _within(path, top):
            return f"is in {top}"
    home = os.path.realpath(os.path.expanduser("~"))
    for h in dict.fromkeys((home, "/root", "/home")):
        if _within(h, path):
            return f"holds the home directory {h}"
    if _within(path, home):
        rest = os.path.relpath(path, home).split(os.sep)
        inside = (os.path.realpath(p) for p in (sys.prefix, sys.base_prefix))
        if any(r.startswith(".") for r in rest) and not any(_within(path, p) for p in inside):
            return f"is a hidden folder of the home directory {home}"
    parent = path if os.path.isdir(path) else os.path.dirname(path)
    while True:
        if os.path.exists(os.path.join(parent, LOCK)):
            return f"is inside the run directory {parent}"
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    return _holds_a_run(path) if os.path.isdir(path) else ""


#: a package folder with more entries than this is refused unread (no plugin ships as many)
MAX_ENTRIES = 100_000


def _holds_a_run(folder: str) -> str:
    """Why ``folder`` must not be opened for holding a run directory (a ``testbed run`` whose
    ``--out`` lies inside a plugin's package: its sandbox would read that run), "" when it
    holds none. Symlinks are not followed: the sandbox grants the files reached, not the
    links to them."""
    seen = 0
    for here, dirs, files in os.walk(folder):
        seen += len(dirs) + len(files)
        if LOCK in files:
            return f"holds the run directory {here}"
        if seen > MAX_ENTRIES:
            return f"holds more than {MAX_ENTRIES} files and folders (no plugin's package does)"
    return ""


def load(source: Source, qualname: str):
    """``qualname`` of ``source``'s module, imported from the files :func:`locate` found (in
    the attack's process, once it is sandboxed): each name of the chain is executed from its
    own file, so nothing is searched for in a folder the sandbox keeps closed. A module this
    process holds already (a built-in plugin the forkserver imported) is used as it is."""
    for name, file, folders in source.chain:
        if name in sys.modules:
            continue
        if file is None:  # a namespace package: one folder, never listed
            spec = ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = list(folders)
        else:
            spec = importlib.util.spec_from_file_location(
                name, file, submodule_search_locations=list(folders) if folders else None
            )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            if file is not None:
                spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        parent, _, tail = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], tail, module)
    obj = sys.modules[source.module]
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
