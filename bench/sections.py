"""The benchmark's protocol sections: two parties against n and d, N clients (in process and
on Ray), and what the transcript costs (share of each run spent in ``Bus.send``)."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from bench.cases import (
    CLIENT_CASES,
    PAIR_CASES,
    BenchCase,
    BenchOptions,
    emd_baseline,
    fedwad_public_algorithm,
    make_protocol,
    measure_against,
    pick,
    registered,
    run_protocol,
)
from bench.data import make_clients, make_pair
from bench.timing import BareBus, TimedBus, time_interleaved, time_side_by_side, timed

__all__ = ["LOGGING_CASES", "bench_clients", "bench_overhead", "bench_pairs", "logging_rows"]


def bench_pairs(opts: BenchOptions) -> tuple[list[dict], list[str]]:
    rows: list[dict] = []
    notes: list[str] = []
    cases = pick(PAIR_CASES, opts)
    for c in cases:
        if not registered(c.protocol):
            notes.append(f"{c.key}: protocol {c.protocol!r} is not registered on this branch")
    cases = [c for c in cases if registered(c.protocol)]
    want_public = opts.public_fedwad and (opts.cases is None or "fedwad_public" in opts.cases)
    for d in opts.ds:
        for n in opts.ns:
            parties = make_pair(n, d, opts.seed)
            X, Y = parties["alice"].X, parties["bob"].X
            base = emd_baseline(X, Y)
            xi0 = ours = None  # our FedWAD paper run and its xi^(0) (the public run starts there)
            for c in cases:
                if c.max_n is not None and n > c.max_n and len(opts.ns) > 2:
                    if d == opts.ds[0]:
                        notes.append(f"{c.key}: skipped for n > {c.max_n} (cost budget)")
                    continue
                opts.log(f"pairs: {c.key} n={n} d={d}")
                run = run_protocol(c, parties, seed=opts.seed)
                row = {"case": c.key, "label": c.label, "n": n, "d": d}
                row.update(measure_against(run, base, opts, opts.memory))
                res = row.pop("_result")
                row["estimate"] = float(next(iter(res.estimates.values())))
                rows.append(row)
                if c.key == "fedwad_paper":
                    xi0, ours = _first_xi(run.bus.transcript), run
            if want_public:
                opts.log(f"pairs: fedwad_public n={n} d={d}")

                def pub(X=X, Y=Y, xi0=xi0):
                    return fedwad_public_algorithm(
                        X, Y, 10, 20, 0.5, np.random.default_rng(0), xi0=xi0
                    )

                row = {
                    "case": "fedwad_public",
                    "label": "public FedWAD code's algorithm (re-implemented), S=10, K=20, "
                    + ("our xi^(0)" if xi0 is not None else "own xi^(0)"),
                    "n": n,
                    "d": d,
                }
                row.update(measure_against(pub, base, opts, opts.memory))
                row["estimate"] = float(row.pop("_result"))
                if ours is not None:
                    row.update(_head_to_head(ours, pub, opts))
                rows.append(row)
    return rows, notes


def _head_to_head(ours, public, opts: BenchOptions) -> dict[str, Any]:
    """Our FedWAD paper run and the public algorithm timed against each other, alternating: the
    ratio of two rows timed apart swings with the load of a shared machine; this one does not.
    ``paper_over_public`` is the wall-time ratio of the fastest runs (our two clients compute
    at once, on two threads, as two parties would; the public loop runs them one after the
    other); ``paper_over_public_cpu`` the ratio of CPU seconds (every thread counted), which
    parallel clients cannot lower: the two answer different questions (docs/findings/benchmarks.md)."""
    t = time_side_by_side(ours, public, min_repeats=5, max_repeats=15, budget=3 * opts.budget)
    h = {
        "paper_seconds": t["fn_wall_min"],
        "public_seconds": t["base_wall_min"],
        "paper_cpu_seconds": t["fn_cpu_min"],
        "public_cpu_seconds": t["base_cpu_min"],
        "paper_median_seconds": t["fn_wall_median"],
        "public_median_seconds": t["base_wall_median"],
        "paper_median_cpu_seconds": t["fn_cpu_median"],
        "public_median_cpu_seconds": t["base_cpu_median"],
        "repeats": t["repeats"],
    }
    return {
        "paper_over_public": h["paper_seconds"] / h["public_seconds"],
        "paper_over_public_cpu": h["paper_cpu_seconds"] / h["public_cpu_seconds"],
        "head_to_head": h,
    }


def _first_xi(transcript):
    """The support of the first ``fedwad.xi`` message (the server's xi^(0)), or None: with it,
    the public algorithm's iterates are ours up to rounding, so the two are timed at equal
    error (tests/test_bench.py)."""
    for env in transcript:
        if env.kind == "fedwad.xi":
            return np.array(env.payload.support)
    return None


def bench_clients(
    opts: BenchOptions, engine: str = "inprocess", digests: dict | None = None
) -> tuple[list[dict], list[str]]:
    """N-client cases on one engine. ``digests`` maps (case, N) to the in-process transcript
    digest: filled by the in-process pass, compared by the Ray pass."""
    rows: list[dict] = []
    notes: list[str] = []
    cases = pick(CLIENT_CASES, opts)
    for c in cases:
        if not registered(c.protocol):
            notes.append(f"{c.key}: protocol {c.protocol!r} is not registered on this branch")
    cases = [c for c in cases if registered(c.protocol)]
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
                names = list(parties)
                base = emd_baseline(parties[names[0]].X, parties[names[1]].X)
                opts.log(f"clients[{engine}]: {c.key} N={N}")
                if engine == "ray":
                    row = _ray_run(c, parties, opts.seed)
                    if (c.key, N) in digests:
                        row["same_transcript"] = row["digest"] == digests[(c.key, N)]
                    row["emd_seconds"] = min(timed(base) for _ in range(3))
                    row["ratio"] = row["seconds"] / row["emd_seconds"]
                else:
                    run = run_protocol(c, parties, seed=opts.seed)
                    row = measure_against(run, base, opts, opts.memory and N <= 20)
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
        make_protocol(case).run(parties, bus, np.random.default_rng(seed))
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
    proto = make_protocol(case)
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
        if case is None or not registered(case.protocol):
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
    cases = [c for c in pick(PAIR_CASES, opts) if registered(c.protocol)]
    for d in opts.overhead_d:
        for n in opts.overhead_n:
            parties = make_pair(n, d, opts.seed)
            for c in cases:
                if c.max_n is not None and n > c.max_n:
                    continue
                opts.log(f"overhead: {c.key} n={n} d={d}")
                guard = PrivacyGuard.for_parties(parties)
                share, total = _in_run_share(c, parties, None, opts.seed, 3)
                gshare, _ = _in_run_share(c, parties, guard, opts.seed, 3)
                bare = run_protocol(c, parties, lambda p: BareBus(parties=p), opts.seed)
                normal = run_protocol(c, parties, seed=opts.seed)
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
