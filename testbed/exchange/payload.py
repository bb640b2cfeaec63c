"""Payloads: what a message may carry (Measure, scalar, string, array, mapping of these), frozen
copies of them, their size on the wire and their content digest."""

from __future__ import annotations

import hashlib
import struct
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
    "numeric_leaves",
    "payload_digest",
    "payload_nbytes",
    "DIGEST_ALGORITHM",
    "DIGEST_PREFIXES",
    "canonical_bytes",
    "canonical_digest",
    "canonical_update",
    "digest_algorithm",
    "finish_digest",
    "new_hasher",
    "sequence_header",
]


# ----------------------------------------------------------------------------- payloads
def _ro(a) -> np.ndarray:
    return immutable(np.asarray(a))


def freeze_payload(p: Payload) -> Payload:
    """Deep-copy a payload and make every array read-only."""
    t = type(p)  # what a message carries most, first (the same as below)
    if t is Measure:
        return p
    if t is float or t is str:
        return p
    if t is np.float64:  # a float from numpy (a subclass of float)
        return float(p)
    if t is dict or t is MappingProxyType:  # the usual mappings, before the checks below
        return _freeze_mapping(p)
    if isinstance(p, Measure):
        return p  # Measure arrays are private read-only copies already
    if isinstance(p, np.ndarray):
        if p.dtype.hasobject:
            raise TypeError("payload arrays must hold numbers or strings, not Python objects")
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
        return _freeze_mapping(p)
    if isinstance(p, (list, tuple)):
        return freeze_payload(np.asarray(p))
    raise TypeError(f"unsupported payload type {type(p).__name__}")


def _freeze_mapping(p: Mapping) -> MappingProxyType:
    return MappingProxyType(
        {k if type(k) is str else str(k): freeze_payload(v) for k, v in p.items()}
    )


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


def numeric_leaves(payload: Payload, meta: Mapping | None = None) -> dict[str, np.ndarray]:
    """Every number a message carries, by field: ``payload`` (a scalar payload),
    ``payload/support`` and ``payload/weights`` (a measure), ``payload/<key>/...`` (a mapping),
    ``meta/<key>`` (numbers, arrays and lists of numbers in the meta; a list that is not all
    numbers is read item by item, so the strings of ``defended_by`` give nothing). Each leaf is a
    float64 array of its field's shape (a scalar: shape ``()``; booleans and integers as floats).
    What the audits read: the canary audits (:mod:`testbed.run.audit_fields`) and the mechanism
    audit (:mod:`testbed.run.audit_mechanism`)."""
    out: dict[str, np.ndarray] = {}

    def walk(x, path: str) -> None:
        if isinstance(x, Measure):
            walk(x.support, path + "/support")
            walk(x.weights, path + "/weights")
        elif isinstance(x, np.ndarray):
            if x.dtype.kind in "biuf":
                out[path] = np.array(x, dtype=np.float64)
            elif x.dtype == object:
                for i, v in enumerate(x.ravel()):
                    walk(v, f"{path}/{i}")
        elif isinstance(x, bool | int | float | np.number | np.bool_):
            out[path] = np.array(float(x))
        elif isinstance(x, Mapping):
            for k, v in x.items():
                walk(v, f"{path}/{k}")
        elif isinstance(x, list | tuple):
            try:
                out[path] = np.asarray(x, dtype=np.float64)
            except (TypeError, ValueError):
                for i, v in enumerate(x):
                    walk(v, f"{path}/{i}")

    walk(payload, "payload")
    for k, v in (meta or {}).items():
        walk(v, f"meta/{k}")
    return out


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
    t = type(p)  # what a message carries most, first (the same as below)
    if t is Measure:
        return p.support.nbytes + p.weights.nbytes
    if t is float:
        return 8
    if t is MappingProxyType:  # a frozen mapping: a loop costs less than sum() of a generator
        n = 0
        for v in p.values():
            n += payload_nbytes(v)
        return n
    if isinstance(p, Mapping):
        return sum(payload_nbytes(v) for v in p.values())
    if isinstance(p, Measure):
        return p.support.nbytes + p.weights.nbytes
    if isinstance(p, np.ndarray):
        return int(p.nbytes)
    if isinstance(p, str):
        return len(p.encode())
    return 8


# ----------------------------------------------------------------------------- digests
# One typed, length-prefixed encoding for every value a digest covers (payloads, envelope
# records, results rows): each value is a one-byte type tag followed by a big-endian u64 length
# (leaves: byte count; containers: item count) and then its bytes or its items, each of which is
# encoded the same way. Every encoding is self-delimiting, so no two different values share one
# (the old encoding wrote mapping keys without a length, and {"rows": uint8[65,66,67], "z": {}}
# hashed like {"rowsA|u1(3,)ABCKz": {}}).
_U64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")
_C128 = struct.Struct(">dd")
_MEASURE_HEAD = b"M" + _U64.pack(2)
_FLOAT_HEAD = b"F" + _U64.pack(8)


def _leaf(h, tag: bytes, body: bytes) -> None:
    h.update(tag + _U64.pack(len(body)) + body)


def _key_bytes(k) -> bytes:
    """A mapping key's encoding (a string's directly: the common case, kept fast)."""
    if type(k) is str:
        b = k.encode("utf-8", "surrogatepass")
        return b"S" + _U64.pack(len(b)) + b
    return canonical_bytes(k)


def canonical_update(h, x: Any) -> None:
    """Feed the canonical encoding of ``x`` to the hash object ``h`` (anything with ``update``).

    Types: None, bool, int, float, complex, str, bytes, numpy scalars (as the Python value they
    hold), numpy arrays (dtype, shape, C-order bytes; object arrays element by element),
    Measure (support, weights), mappings (items sorted by the encoding of their key) and
    sequences (list and tuple alike, so a value read back from JSON encodes as it was written).
    Anything else is a ``TypeError``."""
    t = type(x)  # the types a message carries most, first (the same encoding as below)
    if t is np.ndarray:
        return _array_update(h, x)
    if t is Measure:
        h.update(_MEASURE_HEAD)
        _array_update(h, x.support)
        return _array_update(h, x.weights)
    if t is float:
        return h.update(_FLOAT_HEAD + _F64.pack(x))
    if isinstance(x, np.ndarray):
        return _array_update(h, x)
    if isinstance(x, np.generic) and not isinstance(x, np.void):
        x = x.item()
    if x is None:
        h.update(b"N" + _U64.pack(0))
    elif isinstance(x, bool):
        _leaf(h, b"B", b"\x01" if x else b"\x00")
    elif isinstance(x, int):
        _leaf(h, b"I", str(x).encode())
    elif isinstance(x, float):
        _leaf(h, b"F", _F64.pack(x))
    elif isinstance(x, complex):
        _leaf(h, b"C", _C128.pack(x.real, x.imag))
    elif isinstance(x, str):
        _leaf(h, b"S", x.encode("utf-8", "surrogatepass"))
    elif isinstance(x, (bytes, bytearray, memoryview)):
        _leaf(h, b"Y", bytes(x))
    elif isinstance(x, Measure):
        h.update(b"M" + _U64.pack(2))
        canonical_update(h, x.support)
        canonical_update(h, x.weights)
    elif isinstance(x, Mapping):
        items = sorted(((_key_bytes(k), v) for k, v in x.items()), key=lambda kv: kv[0])
        h.update(b"D" + _U64.pack(len(items)))
        for k, v in items:
            h.update(k)
            canonical_update(h, v)
    elif isinstance(x, (list, tuple)):
        h.update(b"L" + _U64.pack(len(x)))
        for v in x:
            canonical_update(h, v)
    else:
        raise TypeError(f"no canonical encoding for {type(x).__name__}")


_HEADS: dict[tuple[str, tuple[int, ...]], bytes] = {}  # (dtype, shape) -> encoded header


def _array_head(dt: np.dtype, shape: tuple[int, ...], nbytes: int) -> bytes:
    """The encoding of an array up to its contents (type, dtype, shape; for a buffer of
    numbers or strings also its byte count), remembered per dtype and shape: a run sends the
    same few shapes thousands of times."""
    key = (dt.str, shape)
    head = _HEADS.get(key)
    if head is None:
        code = dt.str.encode()
        dims = [str(int(n)).encode() for n in shape]
        head = b"".join(
            [
                b"O" if dt.hasobject else b"A",
                _U64.pack(3),
                b"S" + _U64.pack(len(code)) + code,  # dtype, then shape: as canonical_update would
                b"L" + _U64.pack(len(dims)),
                *(b"I" + _U64.pack(len(d)) + d for d in dims),
                b"" if dt.hasobject else b"Y" + _U64.pack(nbytes),
            ]
        )
        if len(_HEADS) < 4096:
            _HEADS[key] = head
    return head


def _array_update(h, a: np.ndarray) -> None:
    dt = a.dtype
    if dt.fields is not None or (dt.hasobject and dt.kind != "O"):
        raise TypeError(f"no canonical encoding for arrays of dtype {dt}")
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    h.update(_array_head(dt, a.shape, a.nbytes))
    if dt.hasobject:  # element by element: the buffer holds pointers
        canonical_update(h, a.reshape(-1).tolist())
    else:  # the array's own buffer: no copy
        h.update(memoryview(a.reshape(-1)).cast("B"))


class _Collect:
    """A hash stand-in that keeps what it is fed (bytes, or views of arrays: no copy until
    the parts are joined)."""

    __slots__ = ("parts",)

    def __init__(self):
        self.parts: list = []

    def update(self, b) -> None:
        self.parts.append(b)


def sequence_header(n: int) -> bytes:
    """The encoding's header of a sequence of ``n`` items, for a caller that streams the items
    with :func:`canonical_update` (a long transcript is never gathered in one list)."""
    return b"L" + _U64.pack(n)


def canonical_bytes(x: Any) -> bytes:
    """The canonical encoding of ``x`` as bytes (small values: mapping keys, tests)."""
    c = _Collect()
    canonical_update(c, x)
    return b"".join(c.parts)


#: The hash of new digests. Digests carry it and the encoding's version as a prefix
#: (``"blake3.v2:<hex>"``).
DIGEST_ALGORITHM = "blake3" if _blake3 is not None else "sha256"
_VERSION = "v2"
#: digest prefixes this testbed writes and checks
DIGEST_PREFIXES = tuple(f"{a}.{_VERSION}" for a in ("blake3", "sha256"))


def digest_algorithm(digest: str) -> str:
    """The hash that produced ``digest`` (``"blake3"`` or ``"sha256"``); a digest in another
    format (the ambiguous encoding of testbeds before issue 21, an unknown hash) is a
    ``ValueError`` naming it."""
    head, sep, _ = str(digest).partition(":")
    if sep and head in DIGEST_PREFIXES:
        return head.split(".", 1)[0]
    if not sep or head in ("blake3", "sha256"):
        raise ValueError(
            f"digest {str(digest)[:24]!r} uses the old, ambiguous encoding (a testbed before "
            "issue 21): re-run the scenario"
        )
    raise ValueError(f"unknown digest algorithm {head!r}")


def new_hasher(algorithm: str | None = None):
    """A fresh hash object of ``algorithm`` (default :data:`DIGEST_ALGORITHM`)."""
    algorithm = algorithm or DIGEST_ALGORITHM
    if algorithm == "blake3":
        if _blake3 is None:
            raise RuntimeError("digest needs the blake3 package (pip install blake3)")
        return _blake3()
    if algorithm == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown digest algorithm {algorithm!r}")


def finish_digest(h, algorithm: str | None = None) -> str:
    """``"<algorithm>.v2:<hex>"`` of a hasher made by :func:`new_hasher`."""
    return f"{algorithm or DIGEST_ALGORITHM}.{_VERSION}:{h.hexdigest()}"


def canonical_digest(x: Any, algorithm: str | None = None) -> str:
    """Digest of the canonical encoding of ``x`` (:func:`canonical_update`), e.g.
    ``"blake3.v2:<64 hex>"``."""
    h = new_hasher(algorithm)
    canonical_update(h, x)
    return finish_digest(h, algorithm)


def payload_digest(p: Payload, algorithm: str | None = None) -> str:
    """Content hash of a payload: :func:`canonical_digest` (types, shapes, dtypes, bytes).

    BLAKE3 by default (a cryptographic hash: finding another payload with the same digest is
    as hard as for SHA-256, so a tampered transcript is still detected), returned as
    ``"blake3.v2:<hex>"``; ``algorithm="sha256"`` gives ``"sha256.v2:<hex>"``.
    """
    if type(p) is Measure:  # the commonest payload, encoded as canonical_update encodes it
        s, w = p.support, p.weights
        if s.dtype is _F8 and w.dtype is _F8 and s.flags.c_contiguous and w.flags.c_contiguous:
            heads = _MEASURE_HEADS.get((s.shape, w.shape))
            if heads is None:
                heads = (
                    _MEASURE_HEAD + _array_head(_F8, s.shape, s.nbytes),
                    _array_head(_F8, w.shape, w.nbytes),
                )
                if len(_MEASURE_HEADS) < 4096:
                    _MEASURE_HEADS[(s.shape, w.shape)] = heads
            if s.nbytes + w.nbytes <= _ONE_SHOT:
                h = new_hasher(algorithm)
                h.update(b"".join((heads[0], memoryview(s).cast("B"), heads[1],
                                   memoryview(w).cast("B"))))  # fmt: skip
                return finish_digest(h, algorithm)
    if payload_nbytes(p) > _ONE_SHOT:
        return canonical_digest(p, algorithm)
    # a small payload's encoding is gathered (its arrays as views, joined in one copy) and
    # hashed in one call: a fifth faster than feeding the hash piece by piece; same digest
    h = new_hasher(algorithm)
    h.update(canonical_bytes(p))
    return finish_digest(h, algorithm)


#: payloads up to this many bytes are hashed in one call (:func:`payload_digest`)
_ONE_SHOT = 64 << 10
_F8 = np.dtype(np.float64)
#: (support shape, weights shape) -> the encoding's heads of a float64 Measure
_MEASURE_HEADS: dict[tuple, tuple[bytes, bytes]] = {}
