"""One root seed per scenario; each component gets its own stream by name.

``component_rng(root, "protocol")`` and ``component_rng(root, "attack", "fedwad_distributional")``
are independent and do not depend on the order in which components are created.
"""

from __future__ import annotations

import zlib

import numpy as np


def component_seed(root: int, *path: str | int) -> np.random.SeedSequence:
    """A SeedSequence spawned from ``root`` for the component named by ``path``."""
    key = tuple(zlib.crc32(str(p).encode()) for p in path)
    return np.random.SeedSequence(int(root), spawn_key=key)


def component_rng(root: int, *path: str | int) -> np.random.Generator:
    return np.random.default_rng(component_seed(root, *path))


def component_int(root: int, *path: str | int) -> int:
    """A 32-bit integer seed for libraries that want an int (torch, gensim, sklearn)."""
    return int(component_seed(root, *path).generate_state(1)[0])
