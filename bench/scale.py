"""``testbed bench --scale``: FedBary and pairwise FedWAD end to end (``testbed run`` in a fresh
process, with the defaults: guard on, the engine's default workers) against the number of
clients N, the rows per client and the dimension d, with wall time and peak memory; fitted growth
exponents; and a projection, on paper, for 10^4 - 10^5 clients on a cluster of nodes.

Each point writes a scenario like ``scenarios/fedbary_100_clients.yaml`` (five Gaussian
components, an iid partition, N parties of ``rows`` rows in dimension d, observer the server, no
attack) and runs ``python -m testbed run SCENARIO -q`` on it. Peak memory is the largest sum of
resident memory over that process and its descendants (the pool workers and the guard's worker;
read from /proc every ``interval`` seconds, so pages shared between processes count once per
process: an upper bound), the largest summed proportional set size (each shared page once: the
memory the run really holds), and the largest single process. CPU seconds are those of the process
and the descendants it waited for (``RUSAGE_CHILDREN``): on a shared machine they move far less
with the load than the wall time. The protocol's own time is
``run_info.json``'s ``seconds``; the transcript's size is results.json's ``transcript.bytes``.

Points are run smallest first; a case stops growing along an axis past ``point_budget`` seconds
(the skipped points are named in the notes). 1000 clients run only when asked (``--clients
10,100,1000``): FedBary 1000 x 500 takes minutes, pairwise FedWAD's 499 500 pairs hours.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "GOAL",
    "ScaleOptions",
    "bench_scale",
    "goal_lines",
    "projection",
    "scale_lines",
    "scenario_text",
]

#: Issue 50's goal: FedBary, 1000 clients x 500 rows, d = 64, 10 iterations, the defaults, on
#: the 2-core machine, within 8 minutes and 6 GB (scenarios/fedbary_1000_clients.yaml is the
#: same scenario); run with ``--clients 10,100,1000 --cases fedbary``
GOAL = {"case": "fedbary", "clients": 1000, "rows": 500, "d": 64, "seconds": 480.0, "mib": 6144.0}

#: the protocols measured and their params (the defaults, K = 10 for FedBary as issue 50 states)
CASES = {
    "fedbary": ("fedbary", "{iterations: 10}"),
    "fedwad_pairwise": ("fedwad_clustering", "{}"),
}


@dataclass
class ScaleOptions:
    clients: Sequence[int] = (10, 100)
    rows: int = 500
    d: int = 64
    #: at N = ``axis_clients``: rows per client and dimensions (the other two axes)
    rows_axis: Sequence[int] = (100, 500, 2000)
    d_axis: Sequence[int] = (16, 64, 256)
    axis_clients: int = 10
    cases: Sequence[str] = tuple(CASES)
    point_budget: float = 900.0
    interval: float = 0.5
    seed: int = 0
    log: Any = field(default=lambda s: None)
    #: called with the rows measured so far after each point (the CLI writes them to disk, so a
    #: long run interrupted keeps its finished points)
    on_point: Any = field(default=lambda rows: None)


def scenario_text(case: str, N: int, rows: int, d: int, seed: int = 0) -> str:
    """The scenario of one point: N clients of ``rows`` rows each in dimension d."""
    proto, params = CASES[case]
    comp = N * rows // 5
    extra = N * rows - 5 * comp
    comps = "\n".join(
        f"        - {{n: {comp + (1 if i < extra else 0)}, mean: {m}}}"
        for i, m in enumerate((-2.0, -1.0, 0.0, 1.0, 2.0))
    )
    return (
        f"name: scale_{case}_{N}x{rows}_d{d}\nseed: {seed}\ndata:\n  dataset:\n"
        f"    name: gaussians\n    params:\n      d: {d}\n      components:\n{comps}\n"
        f"  partition:\n    name: iid\n  parties: {N}\nprotocol:\n  name: {proto}\n"
        f"  params: {params}\nthreat_model:\n  observer: server\n"
    )


def _tree(root: int) -> list[int]:
    from bench.pairwise import _children

    kids, seen, todo = _children(), [], [root]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.append(p)
            todo.extend(kids.get(p, ()))
    return seen


def _pss(pid: int) -> int:
    """Proportional set size in bytes (a page shared by k processes counts 1/k in each), 0 when
    the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _watch(proc: subprocess.Popen, interval: float) -> dict[str, int]:
    """Peaks, until ``proc`` ends, of the summed RSS of its tree (an upper bound: the pages
    forked workers share with the driver count once per process), of the summed proportional
    set size (each shared page counted once over the tree) and of its largest process's RSS."""
    from bench.pairwise import _rss

    peak = {"tree": 0, "pss": 0, "process": 0}
    while proc.poll() is None:
        tree = _tree(proc.pid)
        sizes = [_rss(p) for p in tree]
        peak["tree"] = max(peak["tree"], sum(sizes))
        peak["pss"] = max(peak["pss"], sum(_pss(p) for p in tree))
        peak["process"] = max(peak["process"], max(sizes, default=0))
        time.sleep(interval)
    return peak


def run_point(case: str, N: int, rows: int, d: int, opts: ScaleOptions) -> dict[str, Any]:
    """One ``testbed run`` of the point's scenario in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        scn = Path(tmp) / "scenario.yaml"
        scn.write_text(scenario_text(case, N, rows, d, opts.seed))
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "testbed", "run", str(scn), "--out", str(out), "-q"]
        load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ
        )
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
        reader.start()
        peak = _watch(proc, opts.interval)
        reader.join()
        sec = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        row: dict[str, Any] = {
            "case": case,
            "clients": N,
            "rows": rows,
            "d": d,
            "seconds": sec,
            "cpu_seconds": cpu,
            "peak_tree_mib": peak["tree"] / 2**20,
            "peak_pss_mib": peak["pss"] / 2**20,
            "peak_process_mib": peak["process"] / 2**20,
            "returncode": proc.returncode,
            "load_average_start": load,
        }
        if proc.returncode != 0:
            row["error"] = (err[0] if err else "").strip().splitlines()[-1:]
            return row
        res = json.loads((out / "results.json").read_text())
        info = json.loads((out / "run_info.json").read_text())
        row.update(
            protocol_seconds=float(info["seconds"]),
            messages=int(res["transcript"]["messages"]),
            transcript_bytes=int(res["transcript"]["bytes"]),
        )
    return row


def _points(opts: ScaleOptions) -> list[tuple[str, str, int, int, int]]:
    """(case, axis, N, rows, d), each axis smallest first."""
    pts = []
    for case in opts.cases:
        pts += [(case, "clients", N, opts.rows, opts.d) for N in sorted(opts.clients)]
        pts += [(case, "rows", opts.axis_clients, r, opts.d) for r in sorted(opts.rows_axis)]
        pts += [(case, "d", opts.axis_clients, opts.rows, d) for d in sorted(opts.d_axis)]
    return pts


def bench_scale(opts: ScaleOptions) -> dict[str, Any]:
    """Every point (a point shared by two axes runs once), the exponents and the notes."""
    from bench.timing import fit_exponent

    rows: list[dict] = []
    notes: list[str] = []
    done: dict[tuple, dict] = {}
    stopped: set[tuple[str, str]] = set()
    for case, axis, N, r, d in _points(opts):
        key = (case, N, r, d)
        if (case, axis) in stopped:
            notes.append(f"{case}: N={N}, rows={r}, d={d} skipped (past the point budget)")
            continue
        if key not in done:
            opts.log(f"scale: {case} N={N} rows={r} d={d}")
            done[key] = run_point(case, N, r, d, opts)
            rows.append(done[key])
            opts.on_point(rows)
        if done[key]["seconds"] > opts.point_budget:
            stopped.add((case, axis))
    fixed = {  # the axis, and what the other two are held at
        "clients": {"rows": opts.rows, "d": opts.d},
        "rows": {"clients": opts.axis_clients, "d": opts.d},
        "d": {"clients": opts.axis_clients, "rows": opts.rows},
    }
    exps = []
    for case in opts.cases:
        for axis, held in fixed.items():
            pts = sorted(
                (
                    x
                    for x in rows
                    if x["case"] == case
                    and x["returncode"] == 0
                    and all(x[c] == v for c, v in held.items())
                ),
                key=lambda x: x[axis],
            )
            for what in ("seconds", "cpu_seconds", "protocol_seconds", "peak_pss_mib"):
                e = fit_exponent([x[axis] for x in pts], [x.get(what) for x in pts])
                if e is not None:
                    exps.append({"case": case, "against": axis, "of": what, "exponent": e})
    return {"rows": rows, "exponents": exps, "notes": notes, "held": fixed["clients"]}


def projection(
    res: dict[str, Any], targets=(10_000, 100_000), nodes=(1, 10, 100), cores: int = 2
) -> list[dict]:
    """On paper, per case: the CPU seconds each added client costs end to end (the slope between
    the smallest and the largest N of the clients axis: the run's fixed start-up cancels) and the
    transcript bytes per client at the largest N, scaled linearly to ``targets`` clients and
    spread over ``nodes`` nodes of ``cores`` cores (the parties' work is independent within a
    round; the server's share, which does not spread, is counted as if it did: a lower bound)."""
    held = res.get("held", {})
    out = []
    for case in sorted({r["case"] for r in res["rows"]}):
        pts = sorted(
            (
                r
                for r in res["rows"]
                if r["case"] == case
                and r["returncode"] == 0
                and all(r[k] == v for k, v in held.items())
            ),
            key=lambda r: r["clients"],
        )
        if len(pts) < 2 or pts[-1]["clients"] == pts[0]["clients"]:
            continue
        lo, hi = pts[0], pts[-1]
        per_client = (hi["cpu_seconds"] - lo["cpu_seconds"]) / (hi["clients"] - lo["clients"])
        for M in targets:
            for n in nodes:
                out.append(
                    {
                        "case": case,
                        "clients": M,
                        "nodes": n,
                        "cpu_seconds_per_client": per_client,
                        "hours": per_client * M / (n * cores) / 3600,
                        "transcript_gib": hi["transcript_bytes"] * M / hi["clients"] / 2**30,
                    }
                )
    return out


def goal_lines(res: dict[str, Any]) -> list[str]:
    """The goal's point against :data:`GOAL`: wall time, peak memory (summed proportional set
    size, and the summed RSS, which counts pages shared by forked workers once per process),
    CPU seconds and the load; "not measured" without that point."""
    g = GOAL
    got = [
        r
        for r in res["rows"]
        if (r["case"], r["clients"], r["rows"], r["d"])
        == (g["case"], g["clients"], g["rows"], g["d"])
    ]
    head = f"goal: FedBary {g['clients']} x {g['rows']}, d = {g['d']}, <= {g['seconds']:.0f} s and <= {g['mib']:.0f} MiB"
    if not got:
        return [f"{head}: not measured (run with --clients 10,100,1000 --cases fedbary)"]
    r = got[0]
    if r["returncode"] != 0:
        return [f"{head}: failed ({' '.join(r.get('error') or [])})"]
    ok_t = r["seconds"] <= g["seconds"]
    ok_m = r["peak_pss_mib"] <= g["mib"]
    return [
        f"{head}: {r['seconds']:.0f} s ({'met' if ok_t else 'missed'}), peak "
        f"{r['peak_pss_mib']:.0f} MiB PSS ({'met' if ok_m else 'missed'}; summed RSS "
        f"{r['peak_tree_mib']:.0f} MiB), {r['cpu_seconds']:.0f} CPU s, load "
        f"{r['load_average_start']:.1f} at start"
    ]


def scale_lines(res: dict[str, Any]) -> list[str]:
    """The markdown of ``scale.md``: the points, the exponents, the projection."""
    lines = [
        "| case | N | rows | d | seconds (end to end) | CPU s | protocol s "
        "| peak MiB (PSS / RSS tree / largest) | messages | transcript MiB | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        if r["returncode"] != 0:
            lines.append(
                f"| {r['case']} | {r['clients']} | {r['rows']} | {r['d']} | failed: "
                f"{' '.join(r.get('error') or [])} | | | | | | |"
            )
            continue
        lines.append(
            f"| {r['case']} | {r['clients']} | {r['rows']} | {r['d']} | {r['seconds']:.1f} | "
            f"{r['cpu_seconds']:.1f} | {r['protocol_seconds']:.1f} | "
            f"{r.get('peak_pss_mib', float('nan')):.0f} / {r['peak_tree_mib']:.0f} / "
            f"{r['peak_process_mib']:.0f} | {r['messages']} | "
            f"{r['transcript_bytes'] / 2**20:.1f} | {r['load_average_start']:.1f} |"
        )
    lines += ["", "| case | against | of | exponent |", "|---|---|---|---|"]
    lines += [
        f"| {e['case']} | {e['against']} | {e['of']} | {e['exponent']:.2f} |"
        for e in res["exponents"]
    ]
    lines += [
        "",
        "| case | clients | nodes (2 cores) | CPU s per client | hours (projected) "
        "| transcript GiB |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {p['case']} | {p['clients']} | {p['nodes']} | {p['cpu_seconds_per_client']:.2f} | "
        f"{p['hours']:.2f} | "
        f"{p['transcript_gib']:.1f} |"
        for p in projection(res)
    ]
    lines += [""] + [f"- {n}" for n in res["notes"]]
    return [*lines, "", *goal_lines(res)]
