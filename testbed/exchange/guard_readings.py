"""What the privacy guard reads in a payload, ``meta`` or released value: every array-like leaf
at any nesting (arrays of any dtype, Measures, mappings, sequences, objects' fields, strings'
bytes and the numbers written in them, integers wider than 64 bits), then all loose numbers in
order as one vector; and each array along each of its axes."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from testbed.measure import Measure

__all__ = ["mask_public_window", "read_pieces", "readings"]

_MAX_DEPTH = 64
_LOOSE_MAX = 1024  # short lists also join the loose numbers, in order
_NUMBER = re.compile(rb"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _scalar_parts(x) -> list[float]:
    if isinstance(x, (complex, np.complexfloating)):
        return [float(x.real), float(x.imag)]
    try:
        return [float(x)]
    except (OverflowError, ValueError, TypeError):
        return []


def _int_bytes(x: int) -> list[np.ndarray]:
    """A Python integer wider than 64 bits, as its bytes in both byte orders."""
    n = (abs(x).bit_length() + 8) // 8
    raw = abs(x).to_bytes(n, "little")
    return [np.frombuffer(raw, np.uint8), np.frombuffer(raw[::-1], np.uint8)]


def _leaves(obj, path: str, loose: list[float], seen: set[int], depth: int = 0):
    """``(path, array)`` for every array-like leaf of ``obj``; loose numbers go to ``loose``."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(obj, Measure):
        yield f"{path}support", obj.support
        yield f"{path}weights", obj.weights
    elif isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            for i, v in enumerate(obj.reshape(-1).tolist()):
                yield from _leaves(v, f"{path}{i}/", loose, seen, depth + 1)
        elif obj.ndim == 0 or obj.dtype.kind not in "biufc":
            if obj.dtype.kind in "biufc":
                loose.extend(_scalar_parts(obj[()]))
            elif obj.dtype.kind in "SUV":
                yield from _leaves(obj.tobytes(), path, loose, seen, depth + 1)
        else:
            yield path.rstrip("/") or "value", obj
    elif isinstance(obj, (bool, np.bool_, float, complex, np.number)):
        loose.extend(_scalar_parts(obj))
    elif isinstance(obj, int):
        if obj.bit_length() > 63:
            for a in _int_bytes(obj):
                yield path.rstrip("/") or "value", a
        else:
            loose.append(float(obj))
    elif isinstance(obj, (str, bytes, bytearray, memoryview)):
        raw = obj.encode("utf-8", "surrogatepass") if isinstance(obj, str) else bytes(obj)
        if not isinstance(obj, str):
            yield path.rstrip("/") or "value", np.frombuffer(raw, np.uint8)
        nums = [float(m) for m in _NUMBER.findall(raw)]
        if nums:
            yield (path.rstrip("/") or "value") + ".text", np.asarray(nums)
    elif id(obj) in seen:
        return
    elif isinstance(obj, Mapping):
        seen.add(id(obj))
        for k, v in obj.items():
            yield from _leaves(v, f"{path}{k}/", loose, seen, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        seen.add(id(obj))
        items = list(obj)
        try:
            a = np.asarray(items) if items else None
        except (ValueError, TypeError, OverflowError):
            a = None
        if a is not None and a.dtype.kind in "biufc" and a.ndim > 0:
            yield path.rstrip("/") or "value", a
            if a.size <= _LOOSE_MAX and a.dtype.kind != "c":  # a row split into pieces
                loose.extend(a.reshape(-1).astype(np.float64).tolist())
            return
        for i, v in enumerate(items):
            yield from _leaves(v, f"{path}{i}/", loose, seen, depth + 1)
    elif hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
        seen.add(id(obj))
        fields = dict(getattr(obj, "__dict__", {}))
        for name in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, name):
                fields[name] = getattr(obj, name)
        for k, v in fields.items():
            yield from _leaves(v, f"{path}{k}/", loose, seen, depth + 1)


def readings(obj: Any, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
    """Every array-like leaf of a payload, ``meta`` or released value (``(path, array)``),
    then all its loose numbers, in order, as one vector (path ``<prefix>numbers``)."""
    loose: list[float] = []
    yield from _leaves(obj, prefix, loose, set())
    if loose:
        yield f"{prefix}numbers", np.asarray(loose, dtype=np.float64)


def mask_public_window(
    leaves: list, numbers: str, where: str, start: int, d: int, public: np.ndarray, far: float
) -> tuple[str, np.ndarray] | None:
    """``(reading, window)``: the ``d`` numbers where a search found a near-copy (``where``,
    ``start``: values or, 8-aligned, bytes) when they are loose numbers (the reading named
    ``numbers``) or numbers written in a string (a ``.text`` reading) and every one of them is in
    ``public``; else None. The window is then masked in ``leaves`` (its first number made
    ``far``, farther from every private row than any threshold; not NaN, which the search reads
    as 0) so that the search can go on after it: every window that starts earlier and runs
    through it was searched already and held no near-copy."""
    reading = where
    if where.endswith(".bytes@"):
        if start % 8:
            return None
        reading, start = where[: -len(".bytes@")], start // 8
    if reading != numbers and not reading.endswith(".text"):
        return None
    i = next((k for k, (p, _) in enumerate(leaves) if p == reading), None)
    if i is None:
        return None
    window = leaves[i][1][start : start + d]
    if len(window) != d or not np.isin(window, public).all():
        return None
    masked = np.array(leaves[i][1], dtype=np.float64)
    masked[start] = far
    leaves[i] = (reading, masked)
    return reading, window


def _axes(a: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """The array with each axis in turn made the last one (C order), named by that axis: the
    last axis first; axes of length 1 change nothing and are skipped."""
    if a.size == 0:
        return
    last = a.ndim - 1
    yield "", a
    for ax in range(last):
        if a.shape[ax] > 1:
            yield f".axis{ax}", a.transpose([*range(ax), *range(ax + 1, a.ndim), ax])


def read_pieces(arrays) -> tuple[list, list]:
    """The readings of ``(path, array)`` leaves, in the order they are read: by value
    (``(order, path, array, integer?)``, each read as float64 in C order) and by bytes
    (``(order, path, array)``: a float64 array's own bytes, else a uint8 buffer)."""
    values, raw = [], []
    order = itertools.count()  # one numbering across both lists: the reading order
    f64 = np.dtype(np.float64)
    for path, a in arrays:
        if a.dtype == f64 and a.ndim <= 2:  # the common case, read as below but faster
            if not a.size:
                continue
            tr = a.ndim == 2 and a.shape[0] > 1
            values.append((next(order), path, a, False))
            if tr:
                values.append((next(order), path + ".axis0", a.T, False))
            raw.append((next(order), path + ".bytes@", a))
            if tr:
                raw.append((next(order), path + ".axis0.bytes@", values[-1][2]))
            continue
        kind = a.dtype.kind
        parts = [(".real", a.real), (".imag", a.imag)] if kind == "c" else [("", a)]
        native = a.dtype == np.float64
        same: dict[str, np.ndarray] = {}  # a float64 array's readings double as its bytes
        for part, v in parts:
            for axis, b in _axes(v):
                same[axis] = b
                values.append((next(order), path + part + axis, b, kind in "iub"))
        for axis, b in _axes(a):
            if native:
                raw.append((next(order), path + axis + ".bytes@", same[axis]))
                continue
            buf = np.ascontiguousarray(b).reshape(-1).view(np.uint8)
            if buf.size >= 8:
                f = buf[: buf.size // 8 * 8].view(np.float64)
                values.append((next(order), path + axis + ".bytes", f, False))
            raw.append((next(order), path + axis + ".bytes@", buf))
    return values, raw
