"""A plugin package written outside the repository, put on ``sys.path`` and registered through
the registry's API (what its entry point does once installed), for one test module."""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def outside_package(root: Path, module: str, cls_name: str, registry) -> Iterator[type]:
    """Import ``module`` from the package at ``root``, register its ``cls_name`` in
    ``registry``; undo all of it (registry entry, sys.path, modules) on exit. The package is
    in ``root/src`` (the scaffold's layout)."""
    package = module.split(".")[0]
    sys.path.insert(0, str(root / "src"))
    cls = None
    try:
        cls = registry.register(getattr(importlib.import_module(module), cls_name))
        yield cls
    finally:
        if cls is not None:
            registry._items.pop(cls.name, None)
            registry._origins.pop(cls.name, None)
        sys.path.remove(str(root / "src"))
        for m in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[m]


def run_quietly(*cmd: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd``, its output captured, without writing bytecode into the package."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


@contextlib.contextmanager
def pip_installed(root: Path, dist: str) -> Iterator[Path]:
    """``pip install -e root`` into this environment (no dependencies, no build isolation);
    distribution ``dist`` uninstalled on exit. Yields the environment's ``bin`` folder. The
    install must print no warning (a scaffold in the flat layout drew setuptools' editable-install
    warning about folders named like the package)."""
    pip = [sys.executable, "-m", "pip"]
    r = run_quietly(*pip, "install", "-q", "-e", str(root), "--no-deps", "--no-build-isolation")
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr, r.stderr
    try:
        yield Path(sys.executable).parent
    finally:
        run_quietly(*pip, "uninstall", "-y", "-q", dist)


@contextlib.contextmanager
def installed_scaffold(kind: str, name: str, tmp_path: Path):
    """``testbed new-KIND NAME`` into ``tmp_path/plugin``, ``pip install -e`` of it, ``testbed
    plugins`` and the package's own tests (its contract kit) run as a user runs them. Yields
    ``(package, bin folder, plugins run, tests run)``; uninstalled on exit."""
    from testbed.cli.main import main

    pkg = tmp_path / "plugin"
    assert main([f"new-{kind}", name, str(pkg)]) == 0
    with pip_installed(pkg, f"ot-testbed-{name.replace('_', '-')}") as bin_:
        listed = run_quietly(str(bin_ / "testbed"), "plugins")
        tests = str(pkg / "tests")
        kit = run_quietly(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests)
        yield pkg, bin_, listed, kit
