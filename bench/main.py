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

import time
from typing import Any

from bench.cases import BenchOptions
from bench.sections import bench_clients, bench_overhead, bench_pairs, logging_rows
from bench.target_checks import bench_targets
from bench.timing import fit_exponent, machine_info
from testbed.errors import TestbedError

__all__ = ["WAITS_SKIPPED", "exponents", "run_bench"]

#: why the "what a user waits for" section did not run (``BenchOptions.waits`` false: the
#: command line narrowed the grid with --n/--d/--clients/--cases, a targeted measurement)
WAITS_SKIPPED = (
    "the grid is narrowed by --n/--d/--clients/--cases; `testbed bench` without them (or with "
    "--full) runs it: FedBary 100 x 500 from `testbed run` with the guard on and off, the "
    "command line against a bare import, the pairs at n = 2000"
)


def run_bench(opts: BenchOptions, command: str = "") -> dict[str, Any]:
    """Run every section asked for; return the JSON-able result."""
    if len(opts.ns) == 0 or len(opts.ds) == 0:
        raise TestbedError("bench: --n and --d need at least one value each")
    import ot  # noqa: F401  (POT and torch: loaded before anything is timed)

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
    from bench.guard import bench_guard

    guard = bench_guard(opts)
    from bench.transcript import bench_transcript_hash

    transcript_hash = bench_transcript_hash(opts)
    if opts.targets:
        transcript_hash["logging"] = logging_rows(opts)
    from bench.isolation import isolation_rows

    isolation = isolation_rows(opts) if opts.cases is None or "isolation" in opts.cases else []
    targets = bench_targets(opts, pairs, overhead) if opts.targets else []
    exps = exponents(pairs, clients)
    pairwise = _pairwise(opts)
    waits, waits_skipped = None, None
    if opts.waits:
        waits = _waits(opts, pairs)
    else:  # said, never dropped in silence
        waits_skipped = WAITS_SKIPPED
        opts.log(f"waits: not run: {WAITS_SKIPPED}")
    return {
        "waits": waits,
        "waits_skipped": waits_skipped,
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
        "guard": guard,
        "transcript_hash": transcript_hash,
        "isolation": isolation,
        "targets": targets,
        "exponents": exps,
        "notes": sorted(set(notes)),
    }


def _waits(opts: BenchOptions, pairs: list[dict]) -> dict[str, Any]:
    """What a user waits for (bench.waits), with the pair rows at n = 2000, d = 64
    (measured here when the grid stops below)."""
    from dataclasses import replace

    from bench.waits import waits

    at2000 = [r for r in pairs if r["n"] == 2000 and r["d"] == 64]
    if not at2000:
        at2000, _ = bench_pairs(
            replace(
                opts,
                ns=(2000,),
                ds=(64,),
                cases=["fedwad_paper", "fedwad_public", "triangle_wad"],
                memory=False,
            )
        )
    return waits(at2000, opts.log)


def _pairwise(opts: BenchOptions) -> list[dict]:
    if not opts.pairwise_clients:
        return []
    from bench.pairwise import PairwiseOptions, bench_pairwise

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
