"""How the benchmarks measure: interleaved minimum times against a baseline, tracemalloc peaks,
cProfile tops, log-log exponents, the machine's description, and two buses (one that logs
nothing, one that times its own ``send``) to isolate what the transcript costs."""

from __future__ import annotations

import cProfile
import io
import math
import os
import platform
import pstats
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.exchange.bus import Bus, Envelope
from testbed.exchange.engines.pool import PoolBus, resolve_workers

__all__ = [
    "BareBus",
    "TimedBus",
    "TimedPoolBus",
    "fit_exponent",
    "machine_info",
    "peak_memory",
    "profile_top",
    "time_interleaved",
    "time_side_by_side",
    "timed",
    "timed_engine_bus",
]


class BareBus(Bus):
    """A bus with the same routing as :class:`~testbed.exchange.bus.Bus` that keeps no transcript.

    ``send`` hands the payload over as it is: no read-only copy, no size, no digest, no guard, no
    defenses, nothing appended. Used only to measure what the transcript costs.
    """

    def __init__(self, parties=None):
        super().__init__(parties=parties)
        self._seq = 0

    def send(self, sender, receiver, kind, payload, round=0, meta=None) -> Envelope:
        self._seq += 1
        return Envelope(
            seq=self._seq - 1,
            round=int(round),
            sender=sender,
            receiver=receiver,
            kind=kind,
            payload=payload,
        )


class _SendTimer:
    """Mixin for a bus class: ``send_seconds`` is the wall time spent inside :meth:`send`,
    :meth:`flush`, :meth:`finish` and :meth:`await_guard` (freezing, sizing, hashing, defenses, guard, logging)."""

    send_seconds = 0.0
    _timing = False

    def _timed(self, call, *args, **kw):
        if self._timing:  # a flush inside send: counted once, by send
            return call(*args, **kw)
        self._timing = True
        t0 = time.perf_counter()
        try:
            return call(*args, **kw)
        finally:
            self.send_seconds += time.perf_counter() - t0
            self._timing = False

    def send(self, *args, **kw) -> Envelope:
        return self._timed(super().send, *args, **kw)

    def flush(self, wait: bool = True) -> None:
        return self._timed(super().flush, wait)

    def finish(self, released=None, wait: bool = True) -> None:
        return self._timed(super().finish, released, wait)

    def await_guard(self) -> None:
        return self._timed(super().await_guard)


class TimedBus(_SendTimer, Bus):
    """The normal bus, timing itself (``send_seconds``)."""

    def close(self) -> None:
        """Nothing to stop (the parties live in this process)."""


class TimedPoolBus(_SendTimer, PoolBus):
    """The worker-process bus (:class:`~testbed.exchange.engines.pool.PoolBus`), timing itself."""


def timed_engine_bus(guard, parties):
    """The bus ``testbed run`` opens by default (``engine: inprocess``, ``workers: auto``: one
    worker process per CPU for large runs, else the plain bus), timing its ``send`` like
    :class:`TimedBus`. Close it when done (``close`` exists on both)."""
    workers = resolve_workers("auto", parties)
    if workers == 1:
        return TimedBus(guard=guard, parties=parties)
    return TimedPoolBus(guard=guard, parties=parties, workers=workers)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_interleaved(
    fn: Callable[[], Any],
    baseline: Callable[[], Any],
    min_repeats: int = 1,
    max_repeats: int = 5,
    budget: float = 2.0,
) -> tuple[float, float, int]:
    """Alternate ``baseline`` and ``fn`` until ``budget`` seconds are spent (at least
    ``min_repeats``, at most ``max_repeats`` pairs); return (min fn time, min baseline time, pairs)
    in wall seconds (:func:`time_side_by_side`'s loop)."""
    t = time_side_by_side(fn, baseline, min_repeats, max_repeats, budget)
    return t["fn_wall_min"], t["base_wall_min"], t["repeats"]


def time_side_by_side(
    fn: Callable[[], Any],
    baseline: Callable[[], Any],
    min_repeats: int = 5,
    max_repeats: int = 15,
    budget: float = 6.0,
) -> dict[str, Any]:
    """Alternate ``baseline`` and ``fn`` (baseline first) until ``budget`` wall seconds are spent
    (at least ``min_repeats``, at most ``max_repeats`` pairs), timing each call in
    wall seconds and in CPU seconds of this process (``time.process_time``: every thread, so
    work spread over threads counts in full and other sessions' load does not). Returns each
    clock's fastest and median per side, and the pairs run."""
    out: dict[str, list[float]] = {k: [] for k in ("fn_wall", "base_wall", "fn_cpu", "base_cpu")}
    spent = 0.0
    while len(out["fn_wall"]) < max_repeats and (
        len(out["fn_wall"]) < min_repeats or spent < budget
    ):
        for side, call in (("base", baseline), ("fn", fn)):
            c0, w0 = time.process_time(), time.perf_counter()
            call()
            out[f"{side}_wall"].append(time.perf_counter() - w0)
            out[f"{side}_cpu"].append(time.process_time() - c0)
            spent += out[f"{side}_wall"][-1]
    res: dict[str, Any] = {"repeats": len(out["fn_wall"])}
    for key, xs in out.items():
        res[f"{key}_min"] = min(xs)
        res[f"{key}_median"] = float(np.median(xs))
    return res


def peak_memory(fn: Callable[[], Any]) -> int:
    """Peak bytes allocated (tracemalloc: Python and NumPy) during one call of ``fn``."""
    was = tracemalloc.is_tracing()
    if not was:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if not was:
            tracemalloc.stop()
    return max(int(peak - base), 0)


def profile_top(fn: Callable[[], Any], limit: int = 10) -> list[dict[str, Any]]:
    """cProfile one call; the ``limit`` functions with the largest own time."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    st = pstats.Stats(prof, stream=io.StringIO())
    total = sum(v[2] for v in st.stats.values()) or 1.0
    rows = []
    for (fname, line, func), (_cc, nc, tt, ct, _callers) in st.stats.items():
        rows.append(
            {
                "function": f"{Path(fname).name}:{line}({func})",
                "calls": nc,
                "own_s": tt,
                "cum_s": ct,
                "own_share": tt / total,
            }
        )
    rows.sort(key=lambda r: -r["own_s"])
    return rows[:limit]


def fit_exponent(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Slope of the least-squares line through (log x, log y): cost ~ x^slope."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y and y > 0]
    if len(pts) < 2 or len({p[0] for p in pts}) < 2:
        return None
    lx, ly = np.array(pts).T
    return float(np.polyfit(lx, ly, 1)[0])


def machine_info() -> dict[str, Any]:
    import importlib.metadata as md

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        info["load_average"] = list(os.getloadavg())
    except OSError:
        info["load_average"] = None
    from threadpoolctl import threadpool_info

    info["blas_threads"] = sorted(
        {i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"}
    )
    for pkg in ("numpy", "POT", "scipy", "ray"):
        try:
            info[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            info[pkg] = None
    return info
