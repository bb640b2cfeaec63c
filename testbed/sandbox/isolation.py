"""Attacks run in a process of their own, which receives only the serialised View.

Isolation by convention (an attack *should not* look up the call stack) is no isolation: Python
code can walk frames, list every live object with ``gc.get_objects()``, read module globals or
make a read-only array writable. So each attack runs in a fresh process forked from a
``multiprocessing`` *forkserver*: the server is a new interpreter that has only imported the
testbed's code (never the driver's data), and each child starts as a copy of it. The child
receives bytes: the observer's envelopes, its own data and a copy of the public information;
it rebuilds them with every array immutable (backed by ``bytes``, so ``setflags(write=True)``
fails), runs ``attack.run`` and ``attack.baseline`` and sends back their outputs as JSON plus
an ``.npz`` of numeric arrays, which the driver decodes without unpickling anything (a
pickle from the child could run code in the driver). Ground truth,
other parties' rows, noise masks and the runner's objects never exist in that process, and
nothing an attack does there can change what another attack sees.

Cost: one fork of a warm server per attack plus pickling the view (measured in
docs/isolation.md).
"""

from __future__ import annotations

import io
import json
import multiprocessing as mp
import pickle
import traceback
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from testbed.errors import TestbedError
from testbed.exchange.bus import Envelope, PublicInfo, View
from testbed.measure import Measure, immutable

__all__ = ["AttackFailedError", "freeze_tree", "pack_view", "run_isolated", "unpack_view"]

_CTX: Any = None


class AttackFailedError(TestbedError):
    """An attack raised (or its process died) while it ran."""


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


def pack_view(view: View, public: PublicInfo) -> bytes:
    """Serialise exactly what an attack may know: the view's envelopes, own data and public info."""
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
    return pickle.dumps(
        (view.observer, tuple(view.colluders), envs, own, pub), protocol=pickle.HIGHEST_PROTOCOL
    )


def unpack_view(blob: bytes) -> tuple[View, PublicInfo]:
    """Rebuild a View and PublicInfo from :func:`pack_view`'s bytes, every array immutable."""
    observer, colluders, envs, own, pub = pickle.loads(blob)
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
    )
    return view, public


def _to_safe(x: Any, arrays: dict[str, np.ndarray]) -> Any:
    """JSON-able form of an attack's output; arrays go to ``arrays`` (numeric dtypes only)."""
    if isinstance(x, np.ndarray):
        if x.dtype.hasobject:
            raise TypeError("object arrays cannot leave the attack process")
        key = f"a{len(arrays)}"
        arrays[key] = np.ascontiguousarray(x)
        return {"__array__": key}
    if isinstance(x, (np.generic,)):
        return _to_safe(x.item(), arrays)
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, tuple):
        return {"__tuple__": [_to_safe(v, arrays) for v in x]}
    if isinstance(x, list):
        return [_to_safe(v, arrays) for v in x]
    if isinstance(x, Mapping):
        if not all(isinstance(k, str) for k in x):
            raise TypeError("mapping keys must be str")
        return {"__map__": {k: _to_safe(v, arrays) for k, v in x.items()}}
    if is_dataclass(x) and type(x).__name__ == "AttackOutput":
        return {"__output__": {f.name: _to_safe(getattr(x, f.name), arrays) for f in fields(x)}}
    raise TypeError(f"{type(x).__name__} cannot leave the attack process")


def _from_safe(x: Any, arrays) -> Any:
    if isinstance(x, list):
        return [_from_safe(v, arrays) for v in x]
    if isinstance(x, dict):
        if "__array__" in x:
            return np.array(arrays[x["__array__"]])
        if "__tuple__" in x:
            return tuple(_from_safe(v, arrays) for v in x["__tuple__"])
        if "__map__" in x:
            return {k: _from_safe(v, arrays) for k, v in x["__map__"].items()}
        if "__output__" in x:
            from attacks._base import AttackOutput

            kw = {k: _from_safe(v, arrays) for k, v in x["__output__"].items()}
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
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    doc = json.loads(arrays.pop("__json__").tobytes().decode())
    return _from_safe(doc, arrays)


def _thread_limits() -> dict[str, int]:
    """The driver's thread counts (BLAS, OpenMP, torch), so the child computes as the driver
    would: a forked child does not inherit threadpoolctl's limits, and two-thread BLAS or torch
    on a loaded 2-core machine is many times slower than one thread (testbed/threads.py)."""
    import sys

    from threadpoolctl import threadpool_info

    out: dict[str, int] = {}
    for lib in threadpool_info():
        api = lib.get("user_api")
        if api in ("blas", "openmp"):
            out[api] = min(out.get(api, lib["num_threads"]), lib["num_threads"])
    if "torch" in sys.modules:
        out["torch"] = int(sys.modules["torch"].get_num_threads())
    return out


def _apply_thread_limits(limits: dict[str, int]) -> None:
    from threadpoolctl import threadpool_limits

    for api in ("blas", "openmp"):
        if api in limits:
            threadpool_limits(limits=limits[api], user_api=api)
    if "torch" in limits:
        import torch

        torch.set_num_threads(limits["torch"])


def _child(conn, cls, params: dict, blob: bytes, rng, base_rng, limits) -> None:
    """Runs in the attack's own process: rebuild the inputs, run, send the outputs back."""
    phase = "setup"
    try:
        _apply_thread_limits(limits)
        view, public = unpack_view(blob)
        del blob
        attack = cls(cls.Config(**params))
        phase = "run"
        outputs = attack.run(view, public, rng)
        phase = "baseline"
        baseline = attack.baseline(view, public, base_rng)
        phase = "output"
        msg = encode_result({"ok": [list(outputs), list(baseline)]})
    except BaseException as exc:  # reported to the parent, which decides what to do
        msg = encode_result(
            {"error": [phase, f"{type(exc).__name__}: {exc}", traceback.format_exc()]}
        )
    conn.send_bytes(msg)
    conn.close()


def _context():
    global _CTX
    if _CTX is None:
        ctx = mp.get_context("forkserver")
        # the server imports the testbed's plugins once, never __main__ (a user's script, or
        # pytest's) and never the driver's data; each attack forks from it
        ctx.set_forkserver_preload(
            [
                "testbed.sandbox.isolation",
                "testbed.run.execute",
                "testbed.run.sweep",
                "attacks",
                "protocols",
                "defenses",
            ]
        )
        _CTX = ctx
    return _CTX


def run_isolated(
    cls, params: dict, view: View, public: PublicInfo, rng, base_rng
) -> tuple[list, list]:
    """Run ``cls(params).run`` and ``.baseline`` in a fresh process; return their outputs.

    The attack class travels by reference (module and name), so a plugin must be defined at
    module level of an importable module (as entry-point plugins are).
    """
    name = getattr(cls, "name", cls.__name__)
    try:
        pickle.dumps(cls)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise AttackFailedError(
            f"attack {name!r}: its class cannot be sent to the isolated attack process "
            f"(define it at module level of an importable module): {exc}"
        ) from None
    blob = pack_view(view, public)
    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_child,
        args=(send, cls, dict(params), blob, rng, base_rng, _thread_limits()),
        daemon=True,
    )
    proc.start()
    send.close()
    try:
        msg = decode_result(recv.recv_bytes())
    except (EOFError, OSError, ValueError, KeyError, TypeError):
        proc.join()
        raise AttackFailedError(
            f"attack {name!r}: its process ended without a readable result "
            f"(exit code {proc.exitcode})"
        ) from None
    except BaseException:  # Ctrl-C or limits.cell_seconds in the parent: the attack stops too
        proc.kill()
        proc.join()
        raise
    finally:
        recv.close()
    proc.join()
    if not isinstance(msg, dict) or not ({"ok"} == set(msg) or {"error"} == set(msg)):
        raise AttackFailedError(f"attack {name!r}: its process sent a malformed result")
    if "error" in msg:
        phase, line, tb = (str(v) for v in msg["error"])
        err = AttackFailedError(f"attack {name!r} failed in {phase}: {line}")
        err.details = tb
        raise err
    outputs, baseline = msg["ok"]
    return outputs, baseline
