"""Benchmarks: what each protocol costs, as a ratio to one exact ``ot.emd`` on the same data.

``testbed bench`` (and ``make bench``) measures, in one process:

- **pairs**: every two-party protocol (FedWAD paper mode at the paper's S = 10, K = 20, FedWAD
  accurate mode, TriangleWad, ...) on two Gaussian samples of n points in dimension d, wall time
  and peak memory divided by those of one exact ``ot.emd(a, b, M)`` on the same two samples (the
  cost matrix ``M = ot.dist(X, Y)`` is built outside the timed call, so the denominator is the
  network simplex alone and the ratio is the stricter one);
- **clients**: protocols over N clients (FedBary, pairwise FedWAD) for N in {5, 20, 100, 1000},
  with the ratio to one exact ``ot.emd`` between two clients' samples;
- **the public FedWAD algorithm**: the published code's loop (barycentric interpolation with the
  map n·P·Y and POT's default ``ot.emd`` iteration cap), re-implemented here for timing only
  (:func:`fedwad_public_algorithm`; not the public code), against our FedWAD at the same settings;
- **transcript overhead**: each protocol on the normal bus (payload copies, digests, append-only
  transcript) against :class:`BareBus`, which delivers payloads as they are and logs nothing;
- **targets** (issue 6): each met, or missed with the measured factor and a cProfile of where the
  time goes.

Times are the minimum over repeats, taken interleaved with the baseline so that both see the same
machine load; ratios are therefore far more stable than absolute seconds on a shared machine.
Peak memory is the ``tracemalloc`` peak of the call (Python and NumPy allocations; the network
simplex's internal C++ graph is not traced), taken in a separate, untimed call.
"""

from __future__ import annotations

import cProfile
import io
import json
import math
import os
import platform
import pstats
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import ot

from testbed.bench.data import make_clients, make_pair  # noqa: F401  (re-exported)
from testbed.errors import TestbedError
from testbed.exchange.bus import Bus, Envelope

__all__ = [
    "BareBus",
    "TimedBus",
    "BenchOptions",
    "CLIENT_CASES",
    "PAIR_CASES",
    "TARGETS",
    "BenchCase",
    "fedwad_public_algorithm",
    "fit_exponent",
    "make_clients",
    "make_pair",
    "run_bench",
    "time_interleaved",
    "write_outputs",
]

FULL_N = (250, 500, 1000, 2000, 4000)
FULL_D = (2, 64, 784)
FULL_CLIENTS = (5, 20, 100, 1000)
QUICK_N = (250, 500)
QUICK_D = (2, 64)
QUICK_CLIENTS = (5, 20)


# ----------------------------------------------------------------------------- a bus that logs nothing
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


class TimedBus(Bus):
    """The normal bus, timing itself: ``send_seconds`` is the wall time spent inside
    :meth:`send` (freezing, sizing, hashing, defenses, guard, logging)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.send_seconds = 0.0

    def send(self, *args, **kw) -> Envelope:
        t0 = time.perf_counter()
        try:
            return super().send(*args, **kw)
        finally:
            self.send_seconds += time.perf_counter() - t0


# ----------------------------------------------------------------------------- the public FedWAD loop
def fedwad_public_algorithm(
    X: np.ndarray,
    Y: np.ndarray,
    support_size: int = 10,
    iterations: int = 20,
    t: float = 0.5,
    rng: np.random.Generator | None = None,
    xi0: np.ndarray | None = None,
) -> float:
    """The public FedWAD code's *algorithm*, re-implemented for timing (the code is not copied).

    Barycentric interpolating measures with uniform weights and the map ``n * P @ Y`` (support on
    the smaller side), POT's default ``ot.emd`` (iteration cap 1e5; its warnings are swallowed, as
    in the public code), t fixed, distances only at the end, xi's weights taken uniform.
    Returns :math:`W(\\mu, \\xi^{(K)}) + W(\\xi^{(K)}, \\nu)`.
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if xi0 is None:
        rng = rng if rng is not None else np.random.default_rng(0)
        xi0 = rng.normal(0.0, 1.0, size=(support_size, X.shape[1]))
    xi = np.asarray(xi0, dtype=np.float64)

    def emd(A, B):
        a, b = ot.unif(len(A)), ot.unif(len(B))
        return ot.emd(a, b, ot.dist(A, B))

    def interp(A, B):
        P = emd(A, B)
        if len(A) <= len(B):
            return (1.0 - t) * A + t * len(A) * (P @ B)
        return (1.0 - t) * len(B) * (P.T @ A) + t * B

    def w(A, B):
        M = ot.dist(A, B)
        P = ot.emd(ot.unif(len(A)), ot.unif(len(B)), M)
        return math.sqrt(max(float(np.sum(P * M)), 0.0))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(iterations):
            xi_mu = interp(X, xi)
            xi_nu = interp(Y, xi)
            xi = interp(xi_mu, xi_nu)
        return w(X, xi) + w(xi, Y)


# ----------------------------------------------------------------------------- measuring
def _timed(fn: Callable[[], Any]) -> float:
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
    ``min_repeats``, at most ``max_repeats`` pairs); return (min fn time, min baseline time, pairs)."""
    tf, tb = [], []
    spent = 0.0
    while len(tf) < max_repeats and (len(tf) < min_repeats or spent < budget):
        b = _timed(baseline)
        f = _timed(fn)
        tb.append(b)
        tf.append(f)
        spent += b + f
    return min(tf), min(tb), len(tf)


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


# ----------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class BenchCase:
    """One protocol setting to time. ``max_n`` / ``max_clients`` cap it in the full grid (its
    cost there is noted in the output instead)."""

    key: str
    protocol: str
    params: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    max_n: int | None = None
    max_clients: int | None = None
    max_ray_clients: int | None = None
    points_per_client: int = 50
    dim: int = 64


PAIR_CASES: tuple[BenchCase, ...] = (
    BenchCase(
        "fedwad_paper",
        "fedwad",
        {"support_size": 10, "iterations": 20, "trace": False},
        "FedWAD, paper mode, S=10, K=20",
    ),
    BenchCase(
        "fedwad_accurate",
        "fedwad",
        {"mode": "accurate", "trace": False},
        "FedWAD, accurate mode",
        max_n=500,
    ),
    BenchCase("triangle_wad", "triangle_wad", {}, "TriangleWad, known t, defaults"),
)

CLIENT_CASES: tuple[BenchCase, ...] = (
    BenchCase(
        "fedbary",
        "fedbary",
        {"trace": False},
        "FedBary, no validation set, K=10, S=points per client",
        points_per_client=50,
        dim=64,
    ),
    BenchCase(
        "fedwad_pairwise",
        "fedwad_clustering",
        {"fedwad": {"support_size": 10, "iterations": 10, "init_scale": 5.0, "trace": False}},
        "pairwise FedWAD + spectral clustering, S=10, K=10",
        max_clients=100,
        max_ray_clients=20,
        points_per_client=50,
        dim=64,
    ),
)

#: Issue 6 targets, checked on the measured rows.
TARGETS = {
    "triangle_wad_vs_emd": "TriangleWad end to end <= 4x one exact ot.emd at n = 2000",
    "fedwad_vs_public": "FedWAD (S=10, K=20) at least as fast as the public code's algorithm",
    "fedbary_100x500": "FedBary, 100 clients x 500 points, d = 64, <= 60 s",
    "transcript_overhead": "transcript overhead <= 5 %",
    "report_scenario": "the default report scenario in <= 3 min",
}


@dataclass
class BenchOptions:
    ns: Sequence[int] = QUICK_N
    ds: Sequence[int] = QUICK_D
    clients: Sequence[int] = QUICK_CLIENTS
    cases: Sequence[str] | None = None  # case keys; None = every case whose protocol exists
    memory: bool = True
    overhead_n: Sequence[int] = (500,)
    overhead_d: Sequence[int] = (64,)
    public_fedwad: bool = True
    targets: bool = False
    report_scenario: str | None = None
    budget: float = 2.0
    seed: int = 0
    ray: bool = False
    ray_clients: Sequence[int] = ()
    pairwise_clients: Sequence[int] = ()  # pairwise FedWAD on Ray (testbed.bench.pairwise)
    pairwise_pairs: int | None = 500  # None: every pair
    log: Callable[[str], None] = field(default=lambda s: None)
    progress: bool = False  # progress bars on long sections (the full pairwise run)
    #: what a user waits for (testbed.bench.waits): on in ``testbed bench`` (quick and full)
    waits: bool = False

    @classmethod
    def quick(cls, **kw) -> BenchOptions:
        return cls(**{"waits": True, **kw})

    @classmethod
    def full(cls, **kw) -> BenchOptions:
        base = dict(
            ns=FULL_N,
            ds=FULL_D,
            clients=FULL_CLIENTS,
            overhead_n=(1000,),
            overhead_d=(64, 784),
            targets=True,
            pairwise_clients=(100, 200, 400, 1000),
            waits=True,
        )
        base.update(kw)
        return cls(**base)


def _registered(name: str) -> bool:
    import protocols  # noqa: F401  (registers the built-ins)
    from testbed.registry import PROTOCOLS

    return name in dict(PROTOCOLS.items())


def _fit_clusters(case: BenchCase, n_clients: int) -> BenchCase:
    """Spectral clustering of N clients into at most N - 1 clusters: asking for as many
    clusters as clients (5 planted groups, N = 5) makes scikit-learn's spectral embedding ask
    ARPACK for k >= N eigenvectors, which warns ("k >= N") and solves densely instead."""
    if case.protocol != "fedwad_clustering":
        return case
    k = min(int(case.params.get("n_clusters", 5)), n_clients - 1)
    return replace(case, params={**case.params, "n_clusters": k})


def _protocol(case: BenchCase):
    from testbed.registry import PROTOCOLS

    cls = PROTOCOLS.get(case.protocol)
    return cls(cls.Config(**dict(case.params)))


def _emd_baseline(X: np.ndarray, Y: np.ndarray) -> Callable[[], Any]:
    a, b = ot.unif(len(X)), ot.unif(len(Y))
    M = ot.dist(X, Y)

    def run():
        return ot.emd(a, b, M, numItermax=10_000_000)

    return run


def _run_protocol(case: BenchCase, parties, bus_factory=None, seed: int = 0):
    proto = _protocol(case)

    def run():
        bus = bus_factory(parties) if bus_factory else Bus(parties=parties)
        run.bus = bus  # the last run's bus (its transcript digest is compared across engines)
        return proto.run(parties, bus, np.random.default_rng(seed))

    return run


def _measure(fn, baseline, opts: BenchOptions, memory: bool) -> dict[str, Any]:
    """Time ``fn`` against ``baseline``; ``_result`` holds what the last call of ``fn`` returned."""
    last: list[Any] = []

    def call():
        last[:] = [fn()]

    t_fn, t_base, reps = time_interleaved(call, baseline, budget=opts.budget)
    row = {
        "seconds": t_fn,
        "emd_seconds": t_base,
        "ratio": t_fn / t_base,
        "repeats": reps,
        "_result": last[0],
    }
    if memory:
        m_fn, m_base = peak_memory(fn), peak_memory(baseline)
        row.update(peak_mib=m_fn / 2**20, emd_peak_mib=m_base / 2**20, mem_ratio=m_fn / m_base)
    return row


def _pick(cases: Sequence[BenchCase], opts: BenchOptions) -> list[BenchCase]:
    return [c for c in cases if opts.cases is None or c.key in opts.cases]


# ----------------------------------------------------------------------------- the sections
def bench_pairs(opts: BenchOptions) -> tuple[list[dict], list[str]]:
    rows: list[dict] = []
    notes: list[str] = []
    cases = _pick(PAIR_CASES, opts)
    for c in cases:
        if not _registered(c.protocol):
            notes.append(f"{c.key}: protocol {c.protocol!r} is not registered on this branch")
    cases = [c for c in cases if _registered(c.protocol)]
    want_public = opts.public_fedwad and (opts.cases is None or "fedwad_public" in opts.cases)
    for d in opts.ds:
        for n in opts.ns:
            parties = make_pair(n, d, opts.seed)
            X, Y = parties["alice"].X, parties["bob"].X
            base = _emd_baseline(X, Y)
            for c in cases:
                if c.max_n is not None and n > c.max_n and len(opts.ns) > 2:
                    if d == opts.ds[0]:
                        notes.append(f"{c.key}: skipped for n > {c.max_n} (cost budget)")
                    continue
                opts.log(f"pairs: {c.key} n={n} d={d}")
                run = _run_protocol(c, parties, seed=opts.seed)
                row = {"case": c.key, "label": c.label, "n": n, "d": d}
                row.update(_measure(run, base, opts, opts.memory))
                res = row.pop("_result")
                row["estimate"] = float(next(iter(res.estimates.values())))
                rows.append(row)
            if want_public:
                opts.log(f"pairs: fedwad_public n={n} d={d}")

                def pub(X=X, Y=Y):
                    return fedwad_public_algorithm(X, Y, 10, 20, 0.5, np.random.default_rng(0))

                row = {
                    "case": "fedwad_public",
                    "label": "public FedWAD code's algorithm (re-implemented), S=10, K=20",
                    "n": n,
                    "d": d,
                }
                row.update(_measure(pub, base, opts, opts.memory))
                row["estimate"] = float(row.pop("_result"))
                rows.append(row)
    return rows, notes


def bench_clients(
    opts: BenchOptions, engine: str = "inprocess", digests: dict | None = None
) -> tuple[list[dict], list[str]]:
    """N-client cases on one engine. ``digests`` maps (case, N) to the in-process transcript
    digest: filled by the in-process pass, compared by the Ray pass."""
    rows: list[dict] = []
    notes: list[str] = []
    cases = _pick(CLIENT_CASES, opts)
    for c in cases:
        if not _registered(c.protocol):
            notes.append(f"{c.key}: protocol {c.protocol!r} is not registered on this branch")
    cases = [c for c in cases if _registered(c.protocol)]
    Ns = opts.ray_clients if engine == "ray" else opts.clients
    session = None
    digests = {} if digests is None else digests
    if engine == "ray" and cases and Ns:
        from testbed.exchange.engines.ray_bus import RaySession

        t0 = time.perf_counter()
        session = RaySession(num_cpus=os.cpu_count() or 2)
        notes.append(
            f"ray: local cluster started in {time.perf_counter() - t0:.1f} s (not counted)"
        )
        lat = _ray_latency()
        notes.append(
            f"ray: one bus.local round trip (no-op, 2 parties) takes {1e3 * lat:.2f} ms here; "
            "FedBary makes K+3 batched local_map calls of N each (no validation set), pairwise "
            "FedWAD K+2 batched calls of 2 per pair, i.e. about N^2/2 * (K+2) round trips"
        )
    try:
        for c in cases:
            for N in Ns:
                cap = c.max_ray_clients if engine == "ray" else c.max_clients
                if cap is not None and N > cap:
                    notes.append(
                        f"{c.key} [{engine}]: N={N} skipped (cost budget; see the fitted exponent)"
                    )
                    continue
                parties = make_clients(N, c.points_per_client, c.dim, opts.seed)
                c = _fit_clusters(c, N)
                names = list(parties)
                base = _emd_baseline(parties[names[0]].X, parties[names[1]].X)
                opts.log(f"clients[{engine}]: {c.key} N={N}")
                if engine == "ray":
                    row = _ray_run(c, parties, opts.seed)
                    if (c.key, N) in digests:
                        row["same_transcript"] = row["digest"] == digests[(c.key, N)]
                    row["emd_seconds"] = min(_timed(base) for _ in range(3))
                    row["ratio"] = row["seconds"] / row["emd_seconds"]
                else:
                    run = _run_protocol(c, parties, seed=opts.seed)
                    row = _measure(run, base, opts, opts.memory and N <= 20)
                    row.pop("_result")
                    row["digest"] = run.bus.transcript.digest()
                    digests[(c.key, N)] = row["digest"]
                row.update(
                    case=c.key,
                    label=c.label,
                    engine=engine,
                    clients=N,
                    points_per_client=c.points_per_client,
                    d=c.dim,
                )
                rows.append(row)
    finally:
        if session is not None:
            session.stop()
    return rows, notes


def _noop(party) -> int:
    return 0


def _ray_latency(calls: int = 200) -> float:
    """Median seconds of one ``bus.local`` round trip to a Ray actor (no-op function)."""
    from testbed.exchange.engines.ray_bus import RayBus

    parties = make_clients(2, 2, 2)
    with RayBus(parties=parties) as bus:
        times = []
        for i in range(calls):
            t0 = time.perf_counter()
            bus.local(f"client_{i % 2}", _noop)
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _ray_run(case: BenchCase, parties, seed: int) -> dict[str, Any]:
    """One run on the Ray engine: actor start-up with the data shipped once, then the protocol;
    the transcript digest is compared with the in-process run's when that is cheap."""
    from testbed.exchange.engines.ray_bus import RayBus

    t0 = time.perf_counter()
    bus = RayBus(parties=parties)
    try:
        t1 = time.perf_counter()
        _protocol(case).run(parties, bus, np.random.default_rng(seed))
        t2 = time.perf_counter()
    finally:
        bus.close()
    return {
        "seconds": t2 - t1,
        "ship_seconds": t1 - t0,
        "repeats": 1,
        "digest": bus.transcript.digest(),
    }


def _in_run_share(case: BenchCase, parties, guard, seed: int, repeats: int) -> tuple[float, float]:
    """Fastest of ``repeats`` runs on a :class:`TimedBus`: (share of the rest of the run spent in
    ``send``, total seconds). Both numbers come from the same run, so machine load cancels."""
    best = None
    proto = _protocol(case)
    for _ in range(repeats):
        bus = TimedBus(guard=guard, parties=parties)
        t0 = time.perf_counter()
        proto.run(parties, bus, np.random.default_rng(seed))
        total = time.perf_counter() - t0
        if best is None or total < best[1]:
            best = (bus.send_seconds / max(total - bus.send_seconds, 1e-12), total)
    return best


#: The cases whose logging share is measured (n, d as in issue 15).
LOGGING_CASES = (("triangle_wad", 2000, 784), ("fedwad_paper", 2000, 784))


def logging_rows(opts) -> list[dict]:
    """Share of each run spent in ``Bus.send``, against the rest of the run (same run)."""
    by_key = {c.key: c for c in PAIR_CASES}
    rows = []
    for key, n, d in LOGGING_CASES:
        case = by_key.get(key)
        if case is None or not _registered(case.protocol):
            continue
        opts.log(f"transcript logging: {key} n={n} d={d}")
        share, total = _in_run_share(case, make_pair(n, d, opts.seed), None, opts.seed, 3)
        rows.append({"case": key, "n": n, "d": d, "logging_share": share, "run_seconds": total})
    return rows


def bench_overhead(opts: BenchOptions) -> list[dict]:
    """What the transcript costs: the share of each run spent in ``Bus.send`` (same run, robust
    to load), and the A/B comparison with :class:`BareBus` (separate runs, noisier)."""
    from testbed.exchange.bus import PrivacyGuard

    rows = []
    cases = [c for c in _pick(PAIR_CASES, opts) if _registered(c.protocol)]
    for d in opts.overhead_d:
        for n in opts.overhead_n:
            parties = make_pair(n, d, opts.seed)
            for c in cases:
                if c.max_n is not None and n > c.max_n:
                    continue
                opts.log(f"overhead: {c.key} n={n} d={d}")
                guard = PrivacyGuard(_protocol(c).private_arrays(parties))
                share, total = _in_run_share(c, parties, None, opts.seed, 3)
                gshare, _ = _in_run_share(c, parties, guard, opts.seed, 3)
                bare = _run_protocol(c, parties, lambda p: BareBus(parties=p), opts.seed)
                normal = _run_protocol(c, parties, seed=opts.seed)
                t_norm, t_bare, reps = time_interleaved(
                    normal, bare, min_repeats=3, max_repeats=9, budget=3 * opts.budget
                )
                rows.append(
                    {
                        "case": c.key,
                        "n": n,
                        "d": d,
                        "run_seconds": total,
                        "transcript_overhead": share,
                        "guard_overhead": gshare,
                        "bare_seconds": t_bare,
                        "transcript_seconds": t_norm,
                        "ab_overhead": t_norm / t_bare - 1.0,
                        "repeats": reps,
                    }
                )
    return rows


def _time_scenario(path: str, jobs: int = 2) -> dict[str, Any]:
    """Wall time of ``testbed run PATH --jobs JOBS`` in a fresh process (as ``make demo``)."""
    with tempfile.TemporaryDirectory(prefix="bench-scn-") as tmp:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "testbed", "run", path, "--out", tmp, "-q", "--jobs", str(jobs)],
            capture_output=True,
            text=True,
            env={**os.environ, "MPLBACKEND": "Agg"},
        )
        sec = time.perf_counter() - t0
    return {
        "scenario": path,
        "jobs": jobs,
        "seconds": sec,
        "returncode": proc.returncode,
        "stderr_tail": proc.stderr.strip().splitlines()[-3:],
    }


def fedbary_target(
    opts: BenchOptions, workers: int = 2, clients: int = 100, points: int = 500, limit: float = 60.0
) -> tuple:
    """FedBary, 100 clients x 500 points, d = 64 (K = 10, no validation set, trace off) on the
    in-process engine with ``workers`` worker processes (testbed.exchange.engines.pool): one timed run.
    When it misses 60 s, the same run on the plain bus is profiled (where the solves happen) and
    its transcript digest is compared with the pool run's (they must be equal). Returns the
    arguments of the target row."""
    from testbed.exchange.engines.pool import PoolBus

    # the opt-in assignment solver (FedBary's default solves every plan with ot.emd)
    c = BenchCase(
        "fedbary",
        "fedbary",
        {"trace": False, "assignment_solver": True},
        points_per_client=points,
        dim=64,
    )
    parties = make_clients(clients, points, 64, opts.seed)
    opts.log(f"targets: fedbary {clients} x {points} ({workers} worker processes)")
    load = os.getloadavg()
    run = _run_protocol(c, parties, lambda ps: PoolBus(parties=ps, workers=workers), opts.seed)
    t0 = time.perf_counter()
    try:
        run()
    finally:
        run.bus.close()
    sec = time.perf_counter() - t0
    detail = (
        f"assignment_solver: true, {workers} worker processes, one run, load average {load[0]:.1f} at start "
        f"({os.cpu_count()} CPUs)"
    )
    prof = None
    if sec > limit:
        pool_digest = run.bus.transcript.digest()
        seq = _run_protocol(c, parties, seed=opts.seed)
        prof = profile_top(seq)
        same = seq.bus.transcript.digest() == pool_digest
        detail += f"; profile of the sequential run (same transcript: {same})"
    return ("fedbary_100x500", sec, limit, "s", sec <= limit, detail, prof)


def bench_targets(opts: BenchOptions, pairs: list[dict], overhead: list[dict]) -> list[dict]:
    """Check the issue-6 targets on the measured rows; profile every miss."""
    out = []

    def add(key, measured, limit, unit, met, detail="", profile=None):
        out.append(
            {
                "target": key,
                "text": TARGETS[key],
                "measured": measured,
                "limit": limit,
                "unit": unit,
                "met": met,
                "factor": (measured / limit) if (limit and measured is not None) else None,
                "detail": detail,
                "profile": profile or [],
            }
        )

    tri = [r for r in pairs if r["case"] == "triangle_wad" and r["n"] == 2000]
    if tri:
        worst = max(tri, key=lambda r: r["ratio"])
        prof = None
        if worst["ratio"] > 4.0:
            c = next(c for c in PAIR_CASES if c.key == "triangle_wad")
            prof = profile_top(_run_protocol(c, make_pair(2000, worst["d"], opts.seed)))
        add(
            "triangle_wad_vs_emd",
            worst["ratio"],
            4.0,
            "x ot.emd",
            worst["ratio"] <= 4.0,
            "worst over d = " + ", ".join(f"{r['d']}: {r['ratio']:.2f}x" for r in tri),
            prof,
        )
    ours = {(r["n"], r["d"]): r for r in pairs if r["case"] == "fedwad_paper"}
    pub = {(r["n"], r["d"]): r for r in pairs if r["case"] == "fedwad_public"}
    common = sorted(set(ours) & set(pub))
    if common:
        ratios = {k: ours[k]["seconds"] / pub[k]["seconds"] for k in common}
        worst_k = max(ratios, key=ratios.get)
        prof = None
        if ratios[worst_k] > 1.0:
            c = next(c for c in PAIR_CASES if c.key == "fedwad_paper")
            prof = profile_top(_run_protocol(c, make_pair(*worst_k, opts.seed)))
        add(
            "fedwad_vs_public",
            ratios[worst_k],
            1.0,
            "x public algorithm",
            ratios[worst_k] <= 1.0,
            "ours/public by (n, d): "
            + ", ".join(f"({n}, {d}): {v:.2f}" for (n, d), v in sorted(ratios.items())),
            prof,
        )
    if _registered("fedbary") and (opts.cases is None or "fedbary" in opts.cases):
        add(*fedbary_target(opts))
    if overhead:
        worst = max(overhead, key=lambda r: r["transcript_overhead"])
        add(
            "transcript_overhead",
            100 * worst["transcript_overhead"],
            5.0,
            "%",
            worst["transcript_overhead"] <= 0.05,
            "worst over "
            + ", ".join(
                f"{r['case']} (n={r['n']}, d={r['d']}): {100 * r['transcript_overhead']:+.1f} %"
                for r in overhead
            ),
        )
    if opts.report_scenario:
        opts.log(f"targets: scenario {opts.report_scenario}")
        r = _time_scenario(opts.report_scenario)
        ok = r["returncode"] == 0 and r["seconds"] <= 180.0
        detail = f"testbed run {r['scenario']} --jobs {r['jobs']}, exit code {r['returncode']}"
        if r["returncode"] != 0:
            detail += ": " + " | ".join(r["stderr_tail"])
        add("report_scenario", r["seconds"], 180.0, "s", ok, detail)
    return out


# ----------------------------------------------------------------------------- driver
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


def run_bench(opts: BenchOptions, command: str = "") -> dict[str, Any]:
    """Run every section asked for; return the JSON-able result."""
    if len(opts.ns) == 0 or len(opts.ds) == 0:
        raise TestbedError("bench: --n and --d need at least one value each")
    started = time.time()
    info_start = machine_info()
    pairs, notes = bench_pairs(opts)
    digests: dict = {}
    clients, notes2 = bench_clients(opts, digests=digests)
    notes += notes2
    if opts.ray and opts.ray_clients:
        ray_rows, notes3 = bench_clients(opts, engine="ray", digests=digests)
        clients += ray_rows
        notes += notes3
    overhead = bench_overhead(opts)
    from testbed.bench.transcript import bench_transcript_hash

    transcript_hash = bench_transcript_hash(opts)
    if opts.targets:
        transcript_hash["logging"] = logging_rows(opts)
    from testbed.bench.isolation import isolation_rows

    isolation = isolation_rows(opts) if opts.cases is None or "isolation" in opts.cases else []
    targets = bench_targets(opts, pairs, overhead) if opts.targets else []
    exps = exponents(pairs, clients)
    pairwise = _pairwise(opts)
    waits = None
    if opts.waits:
        from testbed.bench.waits import waits as bench_waits

        at2000 = [r for r in pairs if r["n"] == 2000 and r["d"] == 64]
        if not at2000:  # the quick grid stops below n = 2000: measure that size for the section
            at2000, _ = bench_pairs(
                replace(
                    opts,
                    ns=(2000,),
                    ds=(64,),
                    cases=["fedwad_paper", "fedwad_public", "triangle_wad"],
                    memory=False,
                )
            )
        waits = bench_waits(at2000, opts.log)
    return {
        "waits": waits,
        "pairwise": pairwise,
        "pairwise_1000": next((r for r in pairwise if r["clients"] == 1000), None),
        "command": command,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": time.time() - started,
        "machine": info_start,
        "load_average_end": machine_info()["load_average"],
        "baseline": "one ot.emd(a, b, M, numItermax=1e7) on the same data, M precomputed",
        "pairs": pairs,
        "clients": clients,
        "overhead": overhead,
        "transcript_hash": transcript_hash,
        "isolation": isolation,
        "targets": targets,
        "exponents": exps,
        "notes": sorted(set(notes)),
    }


def _pairwise(opts: BenchOptions) -> list[dict]:
    if not opts.pairwise_clients:
        return []
    from testbed.bench.pairwise import PairwiseOptions, bench_pairwise

    return bench_pairwise(
        PairwiseOptions(
            clients=opts.pairwise_clients,
            pairs=opts.pairwise_pairs,
            seed=opts.seed,
            log=opts.log,
            progress=opts.progress,
        )
    )


def exponents(pairs: list[dict], clients: list[dict]) -> list[dict]:
    """Fitted log-log slopes: seconds vs n per (case, d), and seconds vs N per (case, engine)."""
    out = []
    keys = sorted({(r["case"], r["d"]) for r in pairs})
    for case, d in keys:
        rs = sorted((r for r in pairs if r["case"] == case and r["d"] == d), key=lambda r: r["n"])
        e = fit_exponent([r["n"] for r in rs], [r["seconds"] for r in rs])
        eb = fit_exponent([r["n"] for r in rs], [r["emd_seconds"] for r in rs])
        if e is not None:
            out.append({"case": case, "against": "n", "d": d, "exponent": e, "emd_exponent": eb})
    for case, eng in sorted({(r["case"], r.get("engine", "inprocess")) for r in clients}):
        rs = sorted(
            (r for r in clients if r["case"] == case and r.get("engine", "inprocess") == eng),
            key=lambda r: r["clients"],
        )
        e = fit_exponent([r["clients"] for r in rs], [r["seconds"] for r in rs])
        if e is not None:
            out.append({"case": case, "against": "N", "engine": eng, "exponent": e})
    return out


# ----------------------------------------------------------------------------- output
def _fmt(x, digits=3):
    if x is None:
        return "-"
    if isinstance(x, float):
        if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
            return f"{x:.2e}"
        return f"{x:.{digits}g}"
    return str(x)


def _md_table(rows: list[dict], cols: list[tuple[str, str]]) -> list[str]:
    if not rows:
        return ["(none)", ""]
    out = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(_fmt(r.get(k)) for k, _ in cols) + " |")
    out.append("")
    return out


def to_markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    lines = [
        "# Benchmarks",
        "",
        f"Made by: `{res['command']}`" if res["command"] else "",
        "",
        f"Started {res['started_utc']}, took {res['seconds']:.0f} s on {m['cpus']} CPUs "
        f"({m['platform']}, Python {m['python']}, NumPy {m['numpy']}, POT {m['POT']}, "
        f"BLAS threads {m.get('blas_threads')}); "
        f"load average at start {_fmt_load(m['load_average'])}, at end "
        f"{_fmt_load(res['load_average_end'])}.",
        "",
        f"Baseline (denominator of every ratio): {res['baseline']}. Times are minima over "
        "interleaved repeats; peak memory is the tracemalloc peak (Python + NumPy).",
        "",
    ]
    if res.get("waits"):
        from testbed.bench.waits import to_markdown as waits_lines

        lines += waits_lines(res["waits"])
    from testbed.bench.targets import issue15_lines

    lines += issue15_lines(res)
    if res["targets"]:
        lines += ["## Targets", ""]
        for t in res["targets"]:
            verdict = "met" if t["met"] else f"**missed** by {t['factor']:.2f}x"
            lines.append(
                f"- {t['text']}: measured {_fmt(t['measured'])} {t['unit']} — {verdict}"
                + (f" ({t['detail']})" if t["detail"] else "")
            )
            if t["profile"]:
                lines.append("")
                lines.append("  Where the time goes (cProfile, own time):")
                lines.append("")
                for p in t["profile"][:8]:
                    lines.append(
                        f"  - `{p['function']}`: {p['own_s']:.3f} s own ({100 * p['own_share']:.0f} %), "
                        f"{p['calls']} calls"
                    )
        lines.append("")
    lines += ["## Two parties: cost against n and d", ""]
    lines += _md_table(
        res["pairs"],
        [
            ("case", "case"),
            ("n", "n"),
            ("d", "d"),
            ("seconds", "seconds"),
            ("emd_seconds", "ot.emd s"),
            ("ratio", "time / ot.emd"),
            ("peak_mib", "peak MiB"),
            ("mem_ratio", "memory / ot.emd"),
            ("estimate", "estimate"),
        ],
    )
    lines += ["## Many clients: cost against N", ""]
    lines += _md_table(
        res["clients"],
        [
            ("case", "case"),
            ("engine", "engine"),
            ("clients", "N"),
            ("points_per_client", "points/client"),
            ("d", "d"),
            ("seconds", "seconds"),
            ("ship_seconds", "actors + data s"),
            ("same_transcript", "same transcript as in process"),
            ("ratio", "time / ot.emd"),
            ("peak_mib", "peak MiB"),
        ],
    )
    from testbed.bench.pairwise import pairwise_lines

    lines += pairwise_lines(res.get("pairwise") or [])
    lines += [
        "## Transcript overhead",
        "",
        "Time inside `Bus.send` (read-only copies, sizes, BLAKE3 digests, transcript) divided by "
        "the rest of the same run, without and with the privacy guard; and, as a cross-check, "
        "separate runs on the normal bus against a bus that logs nothing (noisier under load).",
        "",
    ]
    lines += _md_table(
        res["overhead"],
        [
            ("case", "case"),
            ("n", "n"),
            ("d", "d"),
            ("run_seconds", "run s"),
            ("transcript_overhead", "transcript overhead"),
            ("guard_overhead", "transcript + guard overhead"),
            ("bare_seconds", "bare bus s"),
            ("transcript_seconds", "normal bus s"),
            ("ab_overhead", "A/B overhead"),
        ],
    )
    if res.get("isolation"):
        lines += [
            "## Attack isolation",
            "",
            "Each attack runs in a fresh process from a forkserver (testbed/sandbox/isolation.py). One "
            "attack (run + baseline) called in process against the same call isolated, on the "
            "same View; minimum over repeats.",
            "",
        ]
        lines += _md_table(
            res["isolation"],
            [
                ("scenario", "scenario"),
                ("attack", "attack"),
                ("in_process_s", "in process s"),
                ("isolated_s", "isolated s"),
                ("overhead_ms", "overhead ms"),
                ("overhead_ratio", "isolated / in process"),
            ],
        )
    lines += ["## Fitted exponents (cost ~ x^e, least squares on log-log)", ""]
    lines += _md_table(
        res["exponents"],
        [
            ("case", "case"),
            ("against", "x"),
            ("d", "d"),
            ("engine", "engine"),
            ("exponent", "e"),
            ("emd_exponent", "e of ot.emd"),
        ],
    )
    if res["notes"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in res["notes"]] + [""]
    return "\n".join(lines)


def _fmt_load(v):
    return "-" if not v else "/".join(f"{x:.2f}" for x in v)


def plot(res: dict[str, Any], path: Path) -> None:
    """Log-log plot: seconds against n (one line per case, at each d), and against N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = sorted({r["d"] for r in res["pairs"]}) or [None]
    fig, axes = plt.subplots(1, len(ds) + 1, figsize=(5.2 * (len(ds) + 1), 4.8), squeeze=False)
    axes = axes[0]
    exps = {(e["case"], e.get("d")): e["exponent"] for e in res["exponents"] if e["against"] == "n"}
    cases = sorted({r["case"] for r in res["pairs"]})
    colours = {c: f"C{i}" for i, c in enumerate(cases)}
    for ax, d in zip(axes, ds):
        rows = [r for r in res["pairs"] if r["d"] == d]
        for case in cases:
            rs = sorted((r for r in rows if r["case"] == case), key=lambda r: r["n"])
            if not rs:
                continue
            e = exps.get((case, d))
            ax.loglog(
                [r["n"] for r in rs],
                [r["seconds"] for r in rs],
                marker="o",
                color=colours[case],
                label=case + (f" (e={e:.2f})" if e is not None else ""),
            )
        rs = sorted({r["n"]: r for r in rows}.values(), key=lambda r: r["n"])
        if rs:
            eb = fit_exponent([r["n"] for r in rs], [r["emd_seconds"] for r in rs])
            ax.loglog(
                [r["n"] for r in rs],
                [r["emd_seconds"] for r in rs],
                "--",
                color="black",
                marker="x",
                label="one ot.emd" + (f" (e={eb:.2f})" if eb is not None else ""),
            )
            ax.legend(fontsize=7)
        ax.set_xlabel("n (points per party)")
        ax.set_ylabel("seconds")
        ax.set_title(f"two parties, d = {d}: cost against n")
    ax = axes[-1]
    expN = {
        (e["case"], e.get("engine")): e["exponent"] for e in res["exponents"] if e["against"] == "N"
    }
    for case, eng in sorted({(r["case"], r.get("engine")) for r in res["clients"]}):
        rs = sorted(
            (r for r in res["clients"] if r["case"] == case and r.get("engine") == eng),
            key=lambda r: r["clients"],
        )
        e = expN.get((case, eng))
        ax.loglog(
            [r["clients"] for r in rs],
            [r["seconds"] for r in rs],
            marker="o",
            label=f"{case} [{eng}]" + (f" (e={e:.2f})" if e is not None else ""),
        )
    ax.set_xlabel("N (clients)")
    ax.set_ylabel("seconds")
    ax.set_title("many clients: cost against N")
    if res["clients"]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no multi-client protocol measured", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(res: dict[str, Any], out_dir: str | Path, stem: str = "bench") -> list[Path]:
    """Write ``<stem>.json``, ``<stem>.md`` and ``<stem>.png`` into ``out_dir``."""
    from testbed.exchange.bus import atomic_write_bytes
    from testbed.run.results import jsonable

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pj, pm, pp = out / f"{stem}.json", out / f"{stem}.md", out / f"{stem}.png"
    atomic_write_bytes(pj, (json.dumps(jsonable(res), indent=2, sort_keys=True) + "\n").encode())
    atomic_write_bytes(pm, (to_markdown(res) + "\n").encode())
    plot(res, pp)
    return [pj, pm, pp]
