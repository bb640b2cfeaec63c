"""``testbed bench --scaling``: time and peak memory against the support size n and the number of
clients N, per protocol case and engine, as a table (``scaling.md``), the numbers
(``scaling.json``) and a figure (``scaling.png``).

Kept apart from :mod:`bench.sections`; it reuses the cases
(:mod:`bench.cases`) and data generators:

- against n (two parties, d = 64): every case of ``PAIR_CASES`` for n in ``ns``;
- against N (``points_per_client`` rows each, d = 64): every case of ``CLIENT_CASES`` for N in
  ``clients``, on the in-process engine and, when Ray is installed, on the Ray engine.

Each point is one run (time), then one more under ``tracemalloc`` for the peak of Python and
NumPy allocations when the first took at most ``memory_budget`` seconds. A case stops growing
once a run took more than ``point_budget`` seconds, or the whole section passed ``budget``
seconds; every skipped point is named in the notes with the reason (and the fitted exponent,
from which its cost can be read). Protocols that need protocol-specific parties (a validation
set, teachers and a transfer set, labelled clients for federated learning) are not in the grid;
the notes list them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ScalingOptions", "bench_scaling", "write_scaling"]


@dataclass
class ScalingOptions:
    ns: Sequence[int] = (250, 500, 1000, 2000, 4000)
    clients: Sequence[int] = (10, 30, 100, 300, 1000)
    d: int = 64
    points_per_client: int = 50
    point_budget: float = 60.0
    memory_budget: float = 20.0
    budget: float = 780.0
    ray: bool | None = None  # None: when installed
    cases: Sequence[str] | None = None  # case keys (default: every case)
    seed: int = 0
    log: Any = field(default=lambda s: None)


def _point(run, opts: ScalingOptions) -> dict[str, Any]:
    from bench.timing import peak_memory, timed

    sec = timed(run)
    row: dict[str, Any] = {"seconds": sec, "peak_mib": None}
    if sec <= opts.memory_budget:
        row["peak_mib"] = peak_memory(run) / 2**20
    return row


def _grow(case_key, engine, sizes, make_run, opts, started, rows, notes, axis):
    """Run sizes in ascending order until a point is too slow or the budget is spent."""
    for i, x in enumerate(sizes):
        if time.perf_counter() - started > opts.budget:
            notes.append(f"{case_key} [{engine}]: {axis}={x} and larger skipped (section budget)")
            return
        run = make_run(x)
        if run is None:
            notes.append(f"{case_key} [{engine}]: {axis}={x} skipped (the case's own size cap)")
            continue
        opts.log(f"scaling[{engine}]: {case_key} {axis}={x}")
        row = _point(run, opts)
        row.update(case=case_key, engine=engine, axis=axis, size=x)
        rows.append(row)
        if row["seconds"] > opts.point_budget and i + 1 < len(sizes):
            notes.append(
                f"{case_key} [{engine}]: {axis} > {x} skipped ({axis}={x} took "
                f"{row['seconds']:.0f} s > {opts.point_budget:.0f} s per point)"
            )
            return


def bench_scaling(opts: ScalingOptions) -> dict[str, Any]:
    import ot  # noqa: F401  (POT and torch: loaded before anything is timed)

    from bench.cases import CLIENT_CASES, PAIR_CASES, registered, run_protocol
    from bench.data import make_clients, make_pair
    from bench.timing import fit_exponent, machine_info

    started = time.perf_counter()
    info = machine_info()
    rows: list[dict] = []
    notes: list[str] = []
    for c in PAIR_CASES:
        if not registered(c.protocol) or (opts.cases is not None and c.key not in opts.cases):
            continue

        def pair_run(n, c=c):
            if c.max_n is not None and n > c.max_n:
                return None
            return run_protocol(c, make_pair(n, opts.d, opts.seed), seed=opts.seed)

        _grow(c.key, "inprocess", opts.ns, pair_run, opts, started, rows, notes, "n")
    use_ray = opts.ray if opts.ray is not None else importlib.util.find_spec("ray") is not None
    engines = ["inprocess"] + (["ray"] if use_ray else [])
    if not use_ray:
        notes.append("ray: not measured: Ray is not installed (pip install '.[ray]')")
    session = None
    try:
        for engine in engines:
            factory = None
            if engine == "ray":
                from testbed.exchange.engines.ray_bus import RayBus, RaySession

                session = RaySession(num_cpus=os.cpu_count() or 2)
                factory = lambda ps: RayBus(parties=ps)  # noqa: E731
            for c in CLIENT_CASES:
                if not registered(c.protocol):
                    continue
                if opts.cases is not None and c.key not in opts.cases:
                    continue

                def client_run(N, c=c, engine=engine, factory=factory):
                    cap = c.max_ray_clients if engine == "ray" else c.max_clients
                    if cap is not None and N > cap:
                        return None
                    parties = make_clients(N, opts.points_per_client, opts.d, opts.seed)
                    run = run_protocol(c, parties, factory, opts.seed)
                    if factory is None:
                        return run

                    def closing():
                        try:
                            run()
                        finally:
                            run.bus.close()

                    return closing

                _grow(c.key, engine, opts.clients, client_run, opts, started, rows, notes, "N")
    finally:
        if session is not None:
            session.stop()
    from testbed.registry import PROTOCOLS

    covered = {c.protocol for c in (*PAIR_CASES, *CLIENT_CASES)}
    others = sorted(k for k, _ in PROTOCOLS.items() if k not in covered)
    if others:
        notes.append(
            "not in the grid (need protocol-specific parties, see the scenarios): "
            + ", ".join(others)
        )
    fits = []
    for key in sorted({(r["case"], r["engine"], r["axis"]) for r in rows}):
        pts = [r for r in rows if (r["case"], r["engine"], r["axis"]) == key]
        e = fit_exponent([r["size"] for r in pts], [r["seconds"] for r in pts])
        fits.append({"case": key[0], "engine": key[1], "axis": key[2], "exponent": e})
    return {
        "machine": info,
        "load_average_end": machine_info()["load_average"],
        "seconds": time.perf_counter() - started,
        "d": opts.d,
        "points_per_client": opts.points_per_client,
        "rows": rows,
        "exponents": fits,
        "notes": notes,
    }


def _markdown(res: dict[str, Any], command: str) -> str:
    m = res["machine"]
    lines = [
        "# Scaling: time and peak memory against n and N",
        "",
        f"Made by: `{command}`" if command else "",
        "",
        f"Took {res['seconds']:.0f} s on {m['cpus']} CPUs, load average at start "
        f"{m['load_average']}, at end {res['load_average_end']} (the machine was shared: read "
        f"the slopes, not the seconds). d = {res['d']}; N-client cases have "
        f"{res['points_per_client']} points per client. Peak memory: tracemalloc (Python and "
        "NumPy) over a second run, '-' when the first run was too long to repeat.",
        "",
        "| case | engine | axis | size | seconds | peak MiB |",
        "|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        mem = "-" if r["peak_mib"] is None else f"{r['peak_mib']:.3g}"
        lines.append(
            f"| {r['case']} | {r['engine']} | {r['axis']} | {r['size']} | "
            f"{r['seconds']:.3g} | {mem} |"
        )
    lines += ["", "| case | engine | axis | time exponent |", "|---|---|---|---|"]
    for f in res["exponents"]:
        e = "-" if f["exponent"] is None else f"{f['exponent']:.2f}"
        lines.append(f"| {f['case']} | {f['engine']} | {f['axis']} | {e} |")
    lines += ["", "## Notes", ""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"


def _plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for j, axis in enumerate(("n", "N")):
        for key in sorted({(r["case"], r["engine"]) for r in res["rows"] if r["axis"] == axis}):
            pts = [r for r in res["rows"] if r["axis"] == axis and (r["case"], r["engine"]) == key]
            label = f"{key[0]} [{key[1]}]"
            axes[0][j].loglog(
                [r["size"] for r in pts], [r["seconds"] for r in pts], "o-", label=label
            )
            mem = [r for r in pts if r["peak_mib"] is not None]
            if mem:
                axes[1][j].loglog(
                    [r["size"] for r in mem], [r["peak_mib"] for r in mem], "o-", label=label
                )
        axes[0][j].set(xlabel=axis, ylabel="seconds", title=f"time against {axis}")
        axes[1][j].set(xlabel=axis, ylabel="peak MiB", title=f"peak memory against {axis}")
        for ax in (axes[0][j], axes[1][j]):
            if ax.lines:
                ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_scaling(res: dict[str, Any], out_dir: str | Path, command: str = "") -> list[Path]:
    """scaling.json, scaling.md and scaling.png in ``out_dir``, each written atomically."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "scaling.json", out / "scaling.md", out / "scaling.png"]
    texts = [
        json.dumps({**res, "command": command}, indent=1, default=float),
        _markdown(res, command),
    ]
    for p, text in zip(paths, texts):
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, p)
    tmp = paths[2].with_name("scaling.tmp.png")
    _plot(res, tmp)
    os.replace(tmp, paths[2])
    return paths
