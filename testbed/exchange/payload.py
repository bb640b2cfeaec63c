"""Payloads: what a message may carry (Measure, scalar, string, array, mapping of these), frozen
copies of them, their size on the wire and their content digest."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from testbed.measure import Measure, immutable

try:  # a cryptographic hash, several times faster than SHA-256 on large arrays
    from blake3 import blake3 as _blake3
except ImportError:  # pragma: no cover - blake3 is a declared dependency
    _blake3 = None

Payload = Any  # Measure | float | int | str | np.ndarray | Mapping[str, Payload]

__all__ = [
    "Payload",
    "freeze_payload",
    "iter_arrays",
    "map_arrays",
    "payload_digest",
    "payload_nbytes",
    "DIGEST_ALGORITHM",
    "digest_algorithm",
]


# ----------------------------------------------------------------------------- payloads
def _ro(a) -> np.ndarray:
    return immutable(np.asarray(a))


def freeze_payload(p: Payload) -> Payload:
    """Deep-copy a payload and make every array read-only."""
    if isinstance(p, Measure):
        return p  # Measure arrays are private read-only copies already
    if isinstance(p, np.ndarray):
        return _ro(p)
    if isinstance(p, (bool, np.bool_)):
        return bool(p)
    if isinstance(p, (int, np.integer)):
        return int(p)
    if isinstance(p, (float, np.floating)):
        return float(p)
    if isinstance(p, str):
        return p
    if isinstance(p, Mapping):
        return MappingProxyType({str(k): freeze_payload(v) for k, v in p.items()})
    if isinstance(p, (list, tuple)):
        return _ro(np.asarray(p))
    raise TypeError(f"unsupported payload type {type(p).__name__}")


def iter_arrays(p: Payload, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(path, array)`` for every array inside a payload (Measure -> support, weights)."""
    if isinstance(p, Measure):
        yield f"{prefix}support", p.support
        yield f"{prefix}weights", p.weights
    elif isinstance(p, np.ndarray):
        yield prefix.rstrip("/") or "value", p
    elif isinstance(p, Mapping):
        for k, v in p.items():
            yield from iter_arrays(v, f"{prefix}{k}/")


def map_arrays(p: Payload, fn) -> Payload:
    """Return a new payload with ``fn(path, array)`` applied to every float array.

    Measure supports are transformed; Measure weights are left alone (``fn`` may return a
    ``Measure`` for a whole measure by handling ``path`` ending in ``support``)."""

    def rec(q, prefix):
        if isinstance(q, Measure):
            return Measure(fn(f"{prefix}support", q.support), q.weights)
        if isinstance(q, np.ndarray):
            return fn(prefix.rstrip("/") or "value", q)
        if isinstance(q, Mapping):
            return {k: rec(v, f"{prefix}{k}/") for k, v in q.items()}
        if isinstance(q, float):
            return float(np.asarray(fn(prefix.rstrip("/") or "value", np.asarray([q])))[0])
        return q

    return rec(p, "")


def payload_nbytes(p: Payload) -> int:
    """Bytes on the wire: array bytes plus 8 per scalar."""
    if isinstance(p, Mapping):
        return sum(payload_nbytes(v) for v in p.values())
    if isinstance(p, Measure):
        return p.support.nbytes + p.weights.nbytes
    if isinstance(p, np.ndarray):
        return int(p.nbytes)
    if isinstance(p, str):
        return len(p.encode())
    return 8


def _digest_update(h, p: Payload) -> None:
    if isinstance(p, Measure):
        h.update(b"M")
        _digest_update(h, p.support)
        _digest_update(h, p.weights)
    elif isinstance(p, np.ndarray):
        a = np.ascontiguousarray(p)
        h.update(f"A{a.dtype.str}{a.shape}".encode())
        if a.dtype.hasobject:
            h.update(a.tobytes())
        else:  # the array's own buffer: no copy
            h.update(memoryview(a.reshape(-1)).cast("B"))
    elif isinstance(p, Mapping):
        h.update(b"D")
        for k in sorted(p):
            h.update(f"K{k}".encode())
            _digest_update(h, p[k])
    else:
        h.update(f"S{type(p).__name__}:{p!r}".encode())


#: The content hash of new payloads. Digests carry it as a prefix (``"blake3:<hex>"``); a digest
#: without a prefix is SHA-256 (transcripts saved before the switch still verify).
DIGEST_ALGORITHM = "blake3" if _blake3 is not None else "sha256"


def digest_algorithm(digest: str) -> str:
    """The algorithm that produced ``digest`` (its prefix; none means SHA-256)."""
    head, sep, _ = digest.partition(":")
    return head if sep else "sha256"


def payload_digest(p: Payload, algorithm: str | None = None) -> str:
    """Content hash over a canonical encoding of the payload (types, shapes, dtypes, bytes).

    BLAKE3 by default (a cryptographic hash: finding another payload with the same digest is
    as hard as for SHA-256, so a tampered transcript is still detected) and returned as
    ``"blake3:<hex>"``; ``algorithm="sha256"`` gives the unprefixed SHA-256 digest older
    transcripts stored.
    """
    algorithm = algorithm or DIGEST_ALGORITHM
    if algorithm == "blake3":
        if _blake3 is None:
            raise RuntimeError("digest needs the blake3 package (pip install blake3)")
        h = _blake3()
    elif algorithm == "sha256":
        h = hashlib.sha256()
    else:
        raise ValueError(f"unknown digest algorithm {algorithm!r}")
    _digest_update(h, p)
    return h.hexdigest() if algorithm == "sha256" else f"{algorithm}:{h.hexdigest()}"
