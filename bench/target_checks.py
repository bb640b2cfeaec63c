"""The issue-6 targets checked on the measured rows (each met, or missed with the measured
factor and a cProfile of where the time goes), with the two targets that need runs of their own:
FedBary at 100 clients x 500 points, and the default report scenario end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.cases import PAIR_CASES, BenchCase, BenchOptions, registered, run_protocol
from bench.data import make_clients, make_pair
from bench.timing import profile_top

__all__ = ["TARGETS", "bench_targets", "fedbary_target"]

#: Issue 6 targets, checked on the measured rows.
TARGETS = {
    "triangle_wad_vs_emd": "TriangleWad end to end <= 4x one exact ot.emd at n = 2000",
    "fedwad_vs_public": "FedWAD paper mode (S=10, K=20) / the public code's algorithm at equal "
    "error <= 0.5x (issue 49; issue 6 asked <= 1x)",
    "fedbary_100x500": "FedBary, 100 clients x 500 points, d = 64, <= 60 s",
    "transcript_overhead": "transcript overhead <= 5 %",
    "report_scenario": "the default report scenario in <= 3 min",
}


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

    # FedBary's defaults: plans between uniform measures of equal size by assignment
    c = BenchCase(
        "fedbary",
        "fedbary",
        {"trace": False},
        points_per_client=points,
        dim=64,
    )
    parties = make_clients(clients, points, 64, opts.seed)
    opts.log(f"targets: fedbary {clients} x {points} ({workers} worker processes)")
    load = os.getloadavg()
    run = run_protocol(c, parties, lambda ps: PoolBus(parties=ps, workers=workers), opts.seed)
    t0 = time.perf_counter()
    try:
        run()
    finally:
        run.bus.close()
    sec = time.perf_counter() - t0
    detail = (
        f"default solvers (assignments), {workers} worker processes, one run, load average {load[0]:.1f} at start "
        f"({os.cpu_count()} CPUs)"
    )
    prof = None
    if sec > limit:
        pool_digest = run.bus.transcript.digest()
        seq = run_protocol(c, parties, seed=opts.seed)
        prof = profile_top(seq)
        same = seq.bus.transcript.digest() == pool_digest
        detail += f"; profile of the sequential run (same transcript: {same})"
    return ("fedbary_100x500", sec, limit, "s", sec <= limit, detail, prof)


#: FedWAD paper mode / the public algorithm, wall time of the fastest interleaved runs (issue 49)
FEDWAD_VS_PUBLIC_LIMIT = 0.5


def _fedwad_vs_public(ours: dict, pub: dict, common: list, opts: BenchOptions) -> tuple:
    """The target row: the worst (n, d) wall-time ratio of the head-to-head runs, with each
    (n, d)'s CPU-time ratio beside it (the clients' two threads lower the first, not the
    second) and a cProfile of our run where it misses."""
    ratios = {
        k: pub[k].get("paper_over_public") or ours[k]["seconds"] / pub[k]["seconds"] for k in common
    }
    worst_k = max(ratios, key=ratios.get)
    prof = None
    if ratios[worst_k] > FEDWAD_VS_PUBLIC_LIMIT:
        c = next(c for c in PAIR_CASES if c.key == "fedwad_paper")
        prof = profile_top(run_protocol(c, make_pair(*worst_k, opts.seed)))

    def cpu(k):
        r = pub[k].get("paper_over_public_cpu")
        return "" if r is None else f" (CPU {r:.2f})"

    return (
        "fedwad_vs_public",
        ratios[worst_k],
        FEDWAD_VS_PUBLIC_LIMIT,
        "x public algorithm",
        ratios[worst_k] <= FEDWAD_VS_PUBLIC_LIMIT,
        "ours/public, wall (CPU) by (n, d): "
        + ", ".join(f"({n}, {d}): {v:.2f}{cpu((n, d))}" for (n, d), v in sorted(ratios.items())),
        prof,
    )


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
            prof = profile_top(run_protocol(c, make_pair(2000, worst["d"], opts.seed)))
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
        add(*_fedwad_vs_public(ours, pub, common, opts))
    if registered("fedbary") and (opts.cases is None or "fedbary" in opts.cases):
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
