"""One root seed per scenario; each component gets its own stream by name.

``component_rng(root, "protocol")`` and ``component_rng(root, "attack", "fedwad_distributional")``
are independent and do not depend on the order in which components are created.

Attacks get streams that do not reveal the root seed: :func:`keyed_rng`, keyed with
:func:`private_key` (a digest of the seed and the parties' private rows that stays in the driver).
"""

from __future__ import annotations

import hashlib
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


def private_key(root: int, arrays) -> bytes:
    """A 256-bit key from the root seed and private arrays (each party's rows): what an attack's
    random stream is derived from (:func:`keyed_rng`), so that the stream reveals neither the
    seed nor anything that fixes the partition. ``arrays``: (name, array) pairs, in a fixed order.
    """
    h = hashlib.blake2b(digest_size=32, person=b"testbed-attack")
    h.update(int(root).to_bytes(64, "little", signed=False))
    for name, a in arrays:
        a = np.ascontiguousarray(a)
        if a.dtype.hasobject:  # e.g. string labels: their values, never their addresses
            a = np.frombuffer(repr(a.tolist()).encode(), dtype=np.uint8)
        for part in (str(name).encode(), a.dtype.str.encode(), repr(a.shape).encode()):
            h.update(len(part).to_bytes(8, "little") + part)
        h.update(a.nbytes.to_bytes(8, "little"))
        h.update(a.tobytes())  # copies one array at a time
    return h.digest()


def keyed_rng(key: bytes, *path: str | int) -> np.random.Generator:
    """A Generator for the component named by ``path``, seeded with a keyed BLAKE2b of the path:
    its ``bit_generator.seed_seq.entropy`` is that 128-bit digest, which says nothing of ``key``
    (and so nothing of the root seed) to whoever does not hold it."""
    if len(key) < 16:
        raise ValueError("keyed_rng needs a key of at least 128 bits")
    h = hashlib.blake2b(key=key[:64], digest_size=16, person=b"testbed-rng")
    for p in path:
        part = f"{type(p).__name__}:{p}".encode()
        h.update(len(part).to_bytes(8, "little") + part)
    return np.random.default_rng(np.random.SeedSequence(int.from_bytes(h.digest(), "little")))
