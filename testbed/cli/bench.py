"""``testbed bench``: time every protocol as a ratio to one exact ``ot.emd`` (quick subset by
default); ``--scaling`` and ``--sweep-bookkeeping`` run one section only.

The benchmarks themselves are not part of the installed library: they live in ``bench/`` at the
top of the source checkout, beside ``testbed/``; this module is their thin entry."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

from testbed.cli._common import bench_command, load_checked, stderr_log
from testbed.errors import TestbedError
from testbed.run.rundir import check_creatable
from testbed.scenario.preflight import preflight

#: the source checkout this testbed was imported from (``bench/`` sits beside ``testbed/``)
CHECKOUT = Path(__file__).resolve().parents[2]


def use_checkout_bench() -> None:
    """Make the checkout's ``bench`` package importable (an installed console script does not
    put the checkout on ``sys.path``); refuse in one line where there is none, e.g. a wheel."""
    if not (CHECKOUT / "bench" / "__init__.py").is_file():
        raise TestbedError(
            "bench: the benchmarks ship with the source checkout (bench/ beside "
            f"testbed/), not with the installed package ({CHECKOUT} has none): run it from a clone"
        )
    if str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))


def _scaling(args) -> int:
    from bench.cases import case_keys  # bench: checkout only
    from bench.scaling import ScalingOptions, bench_scaling, write_scaling  # bench: checkout only

    kw = {k: getattr(args, k) for k in ("ns", "clients") if getattr(args, k) is not None}
    if args.ds is not None:
        kw["d"] = args.ds[0]
    if args.cases is not None:
        kw["cases"] = case_keys(args.cases)
    opts = ScalingOptions(**kw, log=stderr_log(args.quiet))
    paths = write_scaling(bench_scaling(opts), args.out, bench_command())
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _scale(args) -> int:
    """FedBary and pairwise FedWAD end to end against clients, rows and d (bench/scale.py)."""
    from bench.cases import case_keys  # bench: checkout only
    from bench.scale import (  # bench: checkout only
        CASES,
        ScaleOptions,
        bench_scale,
        projection,
        scale_lines,
    )

    kw = {}
    if args.clients is not None:
        kw["clients"] = args.clients
    if args.ns is not None:
        kw["rows_axis"] = args.ns
    if args.ds is not None:
        kw["d_axis"] = args.ds
    if args.cases is not None:
        keys = case_keys(args.cases)
        if any(k not in CASES for k in keys):
            raise TestbedError(f"bench --scale: --cases takes {', '.join(CASES)}")
        kw["cases"] = keys
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def partial(rows):  # every finished point on disk at once
        (out / "scale.json").write_text(json.dumps({"rows": rows, "partial": True}, indent=2))

    res = bench_scale(ScaleOptions(**kw, log=stderr_log(args.quiet), on_point=partial))
    res.update(command=bench_command(), projection=projection(res))
    (out / "scale.json").write_text(json.dumps(res, indent=2) + "\n")
    (out / "scale.md").write_text("\n".join(["# Scale", "", *scale_lines(res)]) + "\n")
    for line in scale_lines(res):
        print(line)
    print(f"wrote {out / 'scale.json'}, {out / 'scale.md'}")
    return 0


def _sweep_bookkeeping(args) -> int:
    """Sweep bookkeeping per cell at 2 000 and 20 000 trivial cells (bench/sweep.py)."""
    from bench.sweep import run_bookkeeping  # bench: checkout only

    rows = run_bookkeeping(log=(lambda s: None) if args.quiet else print)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sweep_bookkeeping.json"
    path.write_text(json.dumps({"command": bench_command(), "rows": rows}, indent=2) + "\n")
    ratio = rows[-1]["us_per_cell"] / rows[0]["us_per_cell"]
    print(f"time per cell at {rows[-1]['cells']} vs {rows[0]['cells']} cells: {ratio:.2f}x")
    print(f"wrote {path}")
    return 0


def _check_scenario(path: str) -> None:
    """``--scenario``: refuse, before anything is measured, what ``testbed run`` would refuse
    (the timed run is the last step of the bench, minutes later)."""
    preflight(load_checked(SimpleNamespace(scenario=path)))


def _options(args):
    from bench.cases import BenchOptions, case_keys  # bench: checkout only

    kw = {}
    for key in ("ns", "ds", "clients"):
        if getattr(args, key) is not None:
            kw[key] = getattr(args, key)
    if args.cases is not None:
        kw["cases"] = case_keys(args.cases)
    if args.ray_clients is not None:
        kw.update(ray=True, ray_clients=args.ray_clients)
    if args.scenario is not None:
        _check_scenario(args.scenario)
        kw.update(report_scenario=args.scenario, targets=True)
    if args.targets:
        kw["targets"] = True
    if args.no_memory:
        kw["memory"] = False
    if args.pairwise is not None:
        kw["pairwise_clients"] = args.pairwise
    if args.pairwise_pairs is not None:
        kw["pairwise_pairs"] = None if args.pairwise_pairs == "all" else args.pairwise_pairs
    if not args.full and {"ns", "ds", "clients", "cases"} & set(kw):
        # a grid narrowed by hand is a targeted measurement: the "what a user waits for"
        # section (FedBary 100 x 500 twice, the n = 2000 pairs: minutes) runs with the defaults
        kw["waits"] = False
    kw["progress"] = not args.quiet and sys.stderr.isatty()
    kw["log"] = stderr_log(args.quiet)
    return BenchOptions.full(**kw) if args.full else BenchOptions.quick(**kw)


def run(args) -> int:
    use_checkout_bench()
    check_creatable(args.out)  # before minutes of measuring, not when writing
    if args.scaling:
        return _scaling(args)
    if args.scale:
        return _scale(args)
    if args.sweep_bookkeeping:
        return _sweep_bookkeeping(args)
    if args.audit:
        from testbed.cli.audit import bench_audit  # audit: scipy, only --audit

        return bench_audit(args)
    opts = _options(args)  # bad input is refused before the bench's imports (seconds)
    from bench.main import run_bench  # bench: checkout only
    from bench.output import write_outputs  # bench: checkout only

    res = run_bench(opts, command=bench_command())
    paths = write_outputs(res, args.out)
    for t in res["targets"]:
        state = "met" if t["met"] else f"MISSED ({t['factor']:.2f}x the limit)"
        print(f"target: {t['text']}: {t['measured']:.4g} {t['unit']} -> {state}")
        if t.get("detail"):
            print(f"  {t['detail']}")
    if res["targets"]:
        from bench.targets import issue15_rows  # bench: checkout only

        for r in issue15_rows(res):
            value = r["detail"] if r["value"] is None else f"{r['value']:.4g} {r['unit']}"
            print(f"issue 15: {r['quantity']}: {value}")
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
