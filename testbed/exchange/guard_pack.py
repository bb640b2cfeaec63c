"""How a batch's payloads travel to the privacy guard's worker
(:mod:`testbed.exchange.guard_worker`): their arrays copied one after another into the shared
memory, their numbers and strings in a list, and a template per payload that says how they fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from testbed.measure import Measure

__all__ = ["ALIGN", "ArrayReader", "pack_payloads", "unpack_payload"]

ALIGN = 64  # every leaf starts at a multiple of this in the shared memory

# A frozen payload travels as its arrays, copied one after another into the shared memory (each
# at a multiple of ALIGN), its numbers and strings (a batch's list of values) and a template
# that says how they fit: ("M", dtype, shape, dtype, shape) a Measure of the next two arrays,
# ("A", dtype, shape) the next array, ("D", ((key, template), ...)) a mapping in its own order,
# "v" the next value; an int k: the same object as the batch's payload k (a broadcast). A run
# sends the same few shapes thousands of times: each template is one shared tuple, which a
# batch's pickle writes once and refers to after.
_F8 = np.dtype(np.float64)
_MEASURES: dict[tuple, tuple] = {}  # (support shape, weights shape) -> template, float64 both
_TEMPLATES: dict[tuple, tuple] = {}
_SCALARS = (bool, int, float, str)


def _shared(template: tuple) -> tuple:
    got = _TEMPLATES.get(template)
    if got is None:
        got = template
        if len(_TEMPLATES) < 4096:
            _TEMPLATES[template] = template
    return got


def pack_payloads(payloads: list, arrays: list[np.ndarray], values: list) -> list:
    """The templates of a batch's payloads; their arrays are appended to ``arrays`` and their
    numbers and strings to ``values``, in the order :func:`unpack_payload` takes them."""
    out: list = []
    first: dict[int, int] = {}  # id -> index: the batch holds every payload, so ids are unique
    for p in payloads:
        k = first.get(id(p))
        if k is not None:
            out.append(k)
        else:
            first[id(p)] = len(out)
            out.append(_pack(p, arrays, values))
    return out


def _pack(p, arrays: list, values: list):
    t = type(p)
    if t is Measure:  # the common case first: float64 arrays, a few shapes per run
        s, w = p.support, p.weights
        if s.dtype is _F8 and w.dtype is _F8:
            arrays.append(s)
            arrays.append(w)
            got = _MEASURES.get((s.shape, w.shape))
            if got is None:
                got = _shared(("M", _F8.str, s.shape, _F8.str, w.shape))
                if len(_MEASURES) < 4096:
                    _MEASURES[(s.shape, w.shape)] = got
            return got
    elif t is float:
        values.append(p)
        return "v"
    elif t is MappingProxyType:  # every mapping of a frozen payload (freeze_payload)
        return _pack_mapping(p, arrays, values)
    if isinstance(p, Measure):
        s, w = p.support, p.weights
        arrays.append(s)
        arrays.append(w)
        return _shared(("M", s.dtype.str, s.shape, w.dtype.str, w.shape))
    if isinstance(p, np.ndarray):
        arrays.append(p)
        return _shared(("A", p.dtype.str, p.shape))
    if isinstance(p, Mapping):
        return _pack_mapping(p, arrays, values)
    if type(p) in _SCALARS:
        values.append(p)
        return "v"
    raise TypeError(f"unsupported payload type {type(p).__name__}")


def _pack_mapping(p, arrays: list, values: list) -> tuple:
    return _shared(("D", tuple([(k, _pack(v, arrays, values)) for k, v in p.items()])))


class ArrayReader:
    """The arrays of a batch, read in order from ``buffer`` where the bus copied them (the
    next one at the next multiple of ALIGN): views, no copy."""

    def __init__(self, buffer):
        self.buffer, self.at = buffer, 0

    def next(self, dtype: str, shape: tuple) -> np.ndarray:
        a = np.ndarray(shape, np.dtype(dtype), buffer=self.buffer, offset=self.at)
        self.at += -(-a.nbytes // ALIGN) * ALIGN
        return a


def unpack_payload(template, read: ArrayReader, values) -> Any:
    """A payload equal to the one :func:`pack_payloads` packed (same types, keys in the same
    order, arrays of the same dtype, shape and bytes): it hashes and reads the same.
    ``values``: an iterator over the batch's values."""
    if template == "v":
        return next(values)
    tag = template[0]
    if tag == "M":  # built as Measure itself does (its arrays are checked copies already)
        m = object.__new__(Measure)
        object.__setattr__(m, "support", read.next(template[1], template[2]))
        object.__setattr__(m, "weights", read.next(template[3], template[4]))
        return m
    if tag == "A":
        return read.next(template[1], template[2])
    if tag == "D":
        return {k: unpack_payload(v, read, values) for k, v in template[1]}
    raise ValueError(f"unknown payload template {tag!r}")
