"""Payloads: what a message may carry (Measure, scalar, string, array, mapping of these), frozen
copies of them, their size on the wire and their content digest."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from testbed.measure import Measure, immutable

Payload = Any  # Measure | float | int | str | np.ndarray | Mapping[str, Payload]

__all__ = [
    "Payload",
    "freeze_payload",
    "iter_arrays",
    "map_arrays",
    "payload_digest",
    "payload_nbytes",
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
        h.update(a.tobytes())
    elif isinstance(p, Mapping):
        h.update(b"D")
        for k in sorted(p):
            h.update(f"K{k}".encode())
            _digest_update(h, p[k])
    else:
        h.update(f"S{type(p).__name__}:{p!r}".encode())


def payload_digest(p: Payload) -> str:
    """SHA-256 over a canonical encoding of the payload (types, shapes, dtypes, bytes)."""
    h = hashlib.sha256()
    _digest_update(h, p)
    return h.hexdigest()
