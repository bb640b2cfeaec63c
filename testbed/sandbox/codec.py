"""The bytes that cross the attack process's boundary, both ways.

Into the attack: :func:`pack_view` serialises exactly what an attack may know (the view's
envelopes, the observer's own data, the public information and, for a chained attack, the
outputs of the attack its ``input:`` names); :func:`unpack_views` rebuilds them in the attack's
process with every array immutable (backed by ``bytes``, so ``setflags(write=True)`` fails) and
every mapping read-only.

Out of it: :func:`encode_result` turns the attack's outputs into JSON plus an ``.npz`` of numeric
arrays, which :func:`decode_result` decodes in the driver without unpickling anything (a pickle
from the attack could run code in the driver).
"""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from collections.abc import Mapping
from dataclasses import fields, is_dataclass, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from testbed.exchange.bus import Envelope, PublicInfo, View
from testbed.measure import Measure, immutable

__all__ = [
    "decode_result",
    "encode_result",
    "freeze_tree",
    "pack_view",
    "unpack_view",
    "unpack_views",
]


def freeze_tree(x: Any) -> Any:
    """A deep copy of ``x`` with arrays immutable, mappings read-only and lists as tuples."""
    if isinstance(x, Measure):
        return Measure.restore(x.support, x.weights)
    if isinstance(x, np.ndarray):
        return immutable(x)
    if isinstance(x, Mapping):
        return MappingProxyType({k: freeze_tree(v) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
        return tuple(freeze_tree(v) for v in x)
    if isinstance(x, (set, frozenset)):
        return frozenset(freeze_tree(v) for v in x)
    return x


def _plain(x: Any) -> Any:
    """Picklable plain copy (read-only mapping proxies become dicts)."""
    if isinstance(x, Measure):
        return ("__measure__", np.asarray(x.support), np.asarray(x.weights))
    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_plain(v) for v in x)
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


def _unplain(x: Any) -> Any:
    if isinstance(x, tuple) and len(x) == 3 and x[0] == "__measure__":
        return Measure.restore(x[1], x[2])
    if isinstance(x, dict):
        return {k: _unplain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_unplain(v) for v in x)
    return x


def _plain_outputs(outputs) -> list[dict[str, Any]]:
    """AttackOutputs (a chained attack's input) as plain field mappings."""
    return [{f.name: _plain(getattr(o, f.name)) for f in fields(o)} for o in outputs]


def _outputs(plain) -> tuple:
    """The AttackOutputs of :func:`_plain_outputs`, every array immutable, meta read-only."""
    from attacks._base import AttackOutput  # lazy: keeps refused input fast

    return tuple(AttackOutput(**{k: freeze_tree(_unplain(v)) for k, v in o.items()}) for o in plain)


def pack_view(view: View, public: PublicInfo, baseline_upstream=()) -> bytes:
    """Serialise exactly what an attack may know: the view's envelopes, own data and public info,
    and a chained attack's input: the upstream attack's outputs (``view.upstream``, for ``run``)
    and its baseline's outputs (``baseline_upstream``, for ``baseline``)."""
    envs = [
        (
            e.seq,
            e.round,
            e.sender,
            e.receiver,
            e.kind,
            _plain(e.payload),
            _plain(e.meta),
            e.nbytes,
            e.digest,
        )
        for e in view.envelopes
    ]
    pub = {f.name: _plain(getattr(public, f.name)) for f in fields(PublicInfo)}
    own = {k: np.asarray(v) for k, v in view.own_data.items()}
    up = (_plain_outputs(view.upstream), _plain_outputs(baseline_upstream))
    return pickle.dumps(
        (view.observer, tuple(view.colluders), envs, own, pub, up),
        protocol=pickle.HIGHEST_PROTOCOL,
    )


def unpack_view(blob: bytes) -> tuple[View, PublicInfo]:
    """Rebuild a View and PublicInfo from :func:`pack_view`'s bytes, every array immutable."""
    view, _, public = unpack_views(blob)
    return view, public


def unpack_views(blob: bytes) -> tuple[View, View, PublicInfo]:
    """The View for ``run`` (its ``upstream``: the upstream attack's outputs), the same View for
    ``baseline`` (its ``upstream``: the upstream baseline's outputs) and PublicInfo, from
    :func:`pack_view`'s bytes, every array immutable."""
    observer, colluders, envs, own, pub, (up_run, up_base) = pickle.loads(blob)
    public = PublicInfo(**{k: freeze_tree(_unplain(v)) for k, v in pub.items()})
    envelopes = tuple(
        Envelope(
            seq=seq,
            round=rnd,
            sender=s,
            receiver=r,
            kind=kind,
            payload=freeze_tree(_unplain(payload)),
            meta=freeze_tree(_unplain(meta)),
            nbytes=nbytes,
            digest=digest,
        )
        for seq, rnd, s, r, kind, payload, meta, nbytes, digest in envs
    )
    view = View(
        observer=observer,
        colluders=colluders,
        envelopes=envelopes,
        own_data=MappingProxyType({k: immutable(v) for k, v in own.items()}),
        public=public,
        upstream=_outputs(up_run),
    )
    return view, replace(view, upstream=_outputs(up_base)), public


#: how deep an attack's result may nest (lists, tuples, mappings, outputs): far beyond any real
#: output's meta, and far below what the scorer's and report's recursive code could handle
MAX_RESULT_DEPTH = 100


class UnreadableResult(ValueError):
    """An attack's result that the driver refuses to read; the message says why."""


class NestingError(UnreadableResult):
    """An attack's result nests deeper than :data:`MAX_RESULT_DEPTH`."""


def _to_safe(x: Any, arrays: dict[str, np.ndarray], depth: int = 0) -> Any:
    """JSON-able form of an attack's output; arrays go to ``arrays`` (numeric dtypes only)."""
    if depth > MAX_RESULT_DEPTH:
        raise NestingError(f"its outputs nest deeper than {MAX_RESULT_DEPTH} levels")
    if isinstance(x, np.ndarray):
        if x.dtype.hasobject:
            raise TypeError("object arrays cannot leave the attack process")
        key = f"a{len(arrays)}"
        arrays[key] = np.ascontiguousarray(x)
        return {"__array__": key}
    if isinstance(x, (np.generic,)):
        return _to_safe(x.item(), arrays, depth)
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, tuple):
        return {"__tuple__": [_to_safe(v, arrays, depth + 1) for v in x]}
    if isinstance(x, list):
        return [_to_safe(v, arrays, depth + 1) for v in x]
    if isinstance(x, Mapping):
        if not all(isinstance(k, str) for k in x):
            raise TypeError("mapping keys must be str")
        return {"__map__": {k: _to_safe(v, arrays, depth + 1) for k, v in x.items()}}
    if is_dataclass(x) and type(x).__name__ == "AttackOutput":
        return {
            "__output__": {
                f.name: _to_safe(getattr(x, f.name), arrays, depth + 1) for f in fields(x)
            }
        }
    raise TypeError(f"{type(x).__name__} cannot leave the attack process")


_SENT_TOO_DEEP = f"its process sent a result nested deeper than {MAX_RESULT_DEPTH} levels"


def _from_safe(x: Any, arrays, depth: int = 0) -> Any:
    if depth > MAX_RESULT_DEPTH:
        raise NestingError(_SENT_TOO_DEEP)
    if isinstance(x, list):
        return [_from_safe(v, arrays, depth + 1) for v in x]
    if isinstance(x, dict):
        if "__array__" in x:
            return np.array(arrays[x["__array__"]])
        if "__tuple__" in x:
            return tuple(_from_safe(v, arrays, depth + 1) for v in x["__tuple__"])
        if "__map__" in x:
            return {k: _from_safe(v, arrays, depth + 1) for k, v in x["__map__"].items()}
        if "__output__" in x:
            from attacks._base import AttackOutput  # lazy: keeps refused input fast

            kw = {k: _from_safe(v, arrays, depth + 1) for k, v in x["__output__"].items()}
            kw["meta"] = kw.get("meta") or {}
            return AttackOutput(**kw)
    return x


def encode_result(obj: Any) -> bytes:
    """Bytes that the parent can decode without unpickling anything (npz, allow_pickle off)."""
    arrays: dict[str, np.ndarray] = {}
    doc = json.dumps(_to_safe(obj, arrays), allow_nan=True)
    buf = io.BytesIO()
    np.savez(buf, __json__=np.frombuffer(doc.encode(), dtype=np.uint8), **arrays)
    return buf.getvalue()


def decode_result(blob: bytes) -> Any:
    """The attack's result from :func:`encode_result`'s bytes. Every member must be stored, not
    compressed (``np.savez`` stores), so what is read is at most the bytes received, which the
    driver has capped at ``limits.attack_output_mb``: a deflated member could hold gigabytes."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(blob))
    except zipfile.BadZipFile:
        raise UnreadableResult("its process sent a result that is not an .npz archive") from None
    with zf:
        for info in zf.infolist():
            if info.compress_type != zipfile.ZIP_STORED or info.file_size > len(blob):
                raise UnreadableResult(
                    f"its process sent a compressed result ({info.filename!r} inflates to "
                    f"{info.file_size} bytes)"
                )
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    try:
        return _from_safe(json.loads(arrays.pop("__json__").tobytes().decode()), arrays)
    except RecursionError:  # JSON nested beyond the interpreter's limit: json.loads's own
        raise NestingError(_SENT_TOO_DEEP) from None
