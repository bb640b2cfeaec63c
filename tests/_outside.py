"""A plugin package written outside the repository, put on ``sys.path`` and registered through
the registry's API (what its entry point does once installed), for one test module."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def outside_package(root: Path, module: str, cls_name: str, registry) -> Iterator[type]:
    """Import ``module`` from the package at ``root``, register its ``cls_name`` in
    ``registry``; undo all of it (registry entry, sys.path, modules) on exit."""
    package = module.split(".")[0]
    sys.path.insert(0, str(root))
    cls = None
    try:
        cls = registry.register(getattr(importlib.import_module(module), cls_name))
        yield cls
    finally:
        if cls is not None:
            registry._items.pop(cls.name, None)
            registry._origins.pop(cls.name, None)
        sys.path.remove(str(root))
        for m in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[m]
