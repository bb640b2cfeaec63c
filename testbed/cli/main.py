"""Command line: ``testbed run | report | validate | plugins | transcript | new-attack |
new-protocol | scorecard | bench``.

Bad input ends with a one-line ``error: ...`` on stderr and exit code 2 (never a traceback).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import traceback
from pathlib import Path

from testbed.errors import TestbedError
from testbed.scenario.resources import CellTimeoutError

__all__ = ["main"]


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _fmt_value(v) -> str:
    """A scalar as 6 significant digits; an array (e.g. a distance matrix) by its shape."""
    if hasattr(v, "shape") and getattr(v, "ndim", 0) > 0:
        return "[" + "x".join(str(n) for n in v.shape) + " array]"
    return f"{v:.6g}"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([line, sep, *body])


def _load_checked(args):
    """Load a scenario with the command line's limit overrides, then check its memory estimate
    (testbed/scenario/resources.py) before anything is allocated."""
    from testbed.scenario.resources import check_scenario, set_cli_overrides
    from testbed.scenario.schema import load_scenario

    set_cli_overrides(
        allow_large=getattr(args, "allow_large", False) or None,
        max_cells=getattr(args, "max_cells", None),
    )
    sc = load_scenario(args.scenario)
    check_scenario(sc)
    return sc


def cmd_run(args) -> int:
    from testbed.report.writer import write_report
    from testbed.run.execute import execute

    sc = _load_checked(args)
    if sc.is_sweep:
        return _run_sweep(sc, args)
    out = execute(sc, out_dir=args.out, progress=not args.quiet)
    write_report(out.out_dir)
    r = out.results
    rows = []
    for k, acc in r["accuracy"].items():
        rows.append(
            [
                k,
                _fmt_value(acc["estimate"]),
                _fmt_value(acc["exact"]),
                f"{100 * acc['relative_error']:.3f} %",
                r["transcript"]["rounds"],
                r["transcript"]["messages"],
                _fmt_bytes(r["transcript"]["bytes"]),
                f"{out.elapsed:.2f} s",
            ]
        )
    print(f"{sc.name}: protocol {r['protocol']['name']} ({r['protocol']['mode']}), seed {sc.seed}")
    print(
        _table(
            rows,
            ["quantity", "estimate", "exact", "rel. error", "rounds", "messages", "bytes", "time"],
        )
    )
    _print_attack_rows(r.get("attacks", []))
    print(f"results: {out.out_dir / 'results.json'}")
    report = out.out_dir / "report.html"
    if report.exists():
        print(f"report:  {report}")
    return 0


def _run_sweep(sc, args) -> int:
    from testbed.report.writer import ANY_ATTACK, _aggregate, _error_key, write_report
    from testbed.run.sweep import run_sweep

    out = run_sweep(sc, out_dir=args.out, progress=not args.quiet, jobs=args.jobs)
    agg = _aggregate(out.rows)  # the report's own aggregation: mean over seeds per setting
    err_q = _error_key(out.rows)
    cols = [
        (f"{err_q}.relative_error", "rel. error", lambda x: f"{100 * x:.2f} %"),
        (f"{ANY_ATTACK}.leakage", "leakage", lambda x: f"{x:.2f}"),
        (f"{ANY_ATTACK}.coverage", "coverage", lambda x: f"{x:.2f}"),
    ]
    cols = [c for c in cols if any(c[0] in a for a in agg.values())]
    rows = []
    for (series, point), a in sorted(agg.items()):
        eps = [v[0] for k, v in a.items() if k.startswith("eps_claimed[")]
        rows.append(
            [series[:30], point[:70], a["n"]]
            + [fmt(a[key][0]) if key in a else "-" for key, _, fmt in cols]
            + [f"{max(eps):.4g}" if eps else "inf"]
        )
    print(
        f"{sc.name}: sweep of {len(out.rows)} cells ({out.computed} computed, {out.cached} cached)"
    )
    header = ["protocol", "setting", "seeds"] + [c[1] for c in cols] + ["claimed eps"]
    print(_table(rows, header))
    if any(c[0].startswith(ANY_ATTACK) for c in cols):
        print(
            "leakage, coverage: worst attack and target, mean over seeds (intervals in the report)"
        )
    report = write_report(out.out_dir)
    print(f"results: {out.out_dir / 'results.jsonl'}")
    print(f"report:  {report}")
    return 0


def _print_attack_rows(rows) -> None:
    for a in rows:
        keys = [
            k
            for k in (
                "leakage",
                "w2_ratio",
                "coverage",
                "exact_recovery",
                "matching_rate",
                "matching_rate_any",
                "auc",
                "tv",
            )
            if k in a
        ]
        print(
            f"attack {a['attack']}{' (' + a['method'] + ')' if 'method' in a else ''} "
            f"on {a['target']} (observer {a['observer']}): "
            + ", ".join(f"{k}={a[k]:.4g}" for k in keys)
        )


def cmd_attack(args) -> int:
    import json

    attacks = None
    if args.attack:
        attacks = []
        for spec in args.attack:
            name, _, params = spec.partition(":")
            try:
                p = json.loads(params) if params else {}
            except json.JSONDecodeError as exc:
                raise TestbedError(
                    f"--attack {spec!r}: params after ':' must be JSON ({exc.msg})"
                ) from None
            if not isinstance(p, dict):
                raise TestbedError(f"--attack {spec!r}: params after ':' must be a JSON object")
            attacks.append({"name": name, "params": p})
    colluders = args.colluders.split(",") if args.colluders else None
    run_dir = Path(args.run_dir)
    if (run_dir / "results.jsonl").is_file():  # a sweep: every finished cell
        cells = sorted(d for d in (run_dir / "cells").glob("*") if (d / "results.json").is_file())
        if not cells:
            raise TestbedError(f"{run_dir}: a sweep directory without finished cells")
    else:
        cells = [run_dir]
    total = 0
    for cell in cells:
        rows, sc, out = _attack_run_dir(cell, attacks, args.observer, colluders)
        total += len(rows)
        print(f"{sc.name}: {len(rows)} attack row(s) on the saved transcript (protocol not re-run)")
        _print_attack_rows(rows)
        print(f"rows: {out}")
    if len(cells) > 1:
        print(f"{len(cells)} cells, {total} rows; `testbed report {run_dir}` shows them")
    return 0


def _attack_run_dir(run_dir, attacks, observer, colluders):
    """Re-run attacks on one saved run (or sweep cell); write ``attacks-<tag>.json`` beside its
    results, which ``testbed report`` merges in (labels suffixed ``@observer``)."""
    import json

    from testbed.exchange.bus import atomic_write_bytes
    from testbed.run.rerun import rerun_attacks
    from testbed.run.results import jsonable
    from testbed.scenario.schema import config_hash

    rows, sc = rerun_attacks(run_dir, attacks, observer, colluders)
    spec = {
        "attacks": [a.model_dump(mode="json") for a in sc.attacks],
        "threat_model": sc.threat_model.model_dump(mode="json"),
    }
    tag = config_hash(spec)[:8]
    out = Path(run_dir) / f"attacks-{tag}.json"
    for r in rows:
        r["label"] = f"{r.get('label') or r['attack']}@{sc.threat_model.observer}"
        r["source"] = out.name
    payload = {**spec, "rows": rows}
    atomic_write_bytes(
        out, (json.dumps(jsonable(payload), indent=2, sort_keys=True) + "\n").encode()
    )
    return rows, sc, out


def cmd_audit(args) -> int:
    from testbed.run import execute
    from testbed.run.audit import canary_audit

    sc = _load_checked(args)
    if sc.is_sweep:
        raise TestbedError(
            f"{args.scenario}: audit takes a single-run scenario (remove sweep/seeds)"
        )
    world = execute(sc, until="world").world
    parties = args.party or [p for p in world.parties][:2]
    rows = []
    for party in parties:
        r = canary_audit(world, party, trials=args.trials, delta=args.delta)
        rows.append(
            [
                party,
                f"{r.claimed_epsilon:.4g}",
                f"{r.audited_epsilon:.4g}",
                "-" if r.claimed_mu is None else f"{r.claimed_mu:.4g}",
                f"{r.mu_lower:.4g}",
                f"{r.epsilon_gdp:.4g}",
                f"{r.tpr:.3f}",
                f"{r.fpr:.3f}",
                "consistent" if r.consistent else "VIOLATION",
            ]
        )
    print(f"{sc.name}: canary audit, {args.trials} trials per world, delta {args.delta:g}")
    print(
        _table(
            rows,
            [
                "party",
                "claimed ε",
                "audited ε ≥",
                "claimed μ",
                "audited μ ≥",
                "ε(μ≥)",
                "TPR",
                "FPR",
                "status",
            ],
        )
    )
    from testbed.run.audit import AUDIT_METHOD

    print(f"method: {AUDIT_METHOD} (c = 0.95)")
    return 0


def cmd_report(args) -> int:
    from testbed.report.writer import write_report

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise TestbedError(f"{run_dir}: run directory not found")
    print(f"report: {write_report(run_dir)}")
    return 0


def cmd_validate(args) -> int:
    from testbed.scenario.resources import set_cli_overrides
    from testbed.scenario.schema import config_hash, load_scenario, resolve

    set_cli_overrides(max_cells=args.max_cells)
    sc = load_scenario(args.scenario)
    cells = ""
    if sc.is_sweep:
        from testbed.run.sweep import expand_cells

        cells = f", sweep of {len(expand_cells(sc))} cells"
    print(
        f"{args.scenario}: ok (scenario {sc.name!r}, protocol {sc.protocol.name}, config hash {config_hash(resolve(sc))[:12]}{cells})"
    )
    return 0


def cmd_plugins(args) -> int:
    from testbed.registry import ATTACKS, DATASETS, DEFENSES, PARTITIONERS, PROTOCOLS, TRANSFORMS

    for title, reg in [
        ("protocols", PROTOCOLS),
        ("attacks", ATTACKS),
        ("defenses", DEFENSES),
        ("datasets", DATASETS),
        ("partitioners", PARTITIONERS),
        ("transforms", TRANSFORMS),
    ]:
        print(f"{title}:")
        items = reg.listing()  # built-ins described from their source, not imported
        broken = reg.broken()
        if not items:
            print("  (none)")
        width = max((len(n) for n, _ in items), default=0)
        for name, doc in items:
            print(f"  {name.ljust(width)}  {doc}")
        for name, why in broken.items():  # listed, never fatal: only its users fail
            print(f"  {name.ljust(width)}  BROKEN: {why}")
    return 0


def _payload_summary(p) -> str:
    from collections.abc import Mapping

    import numpy as np

    from testbed.measure import Measure

    if isinstance(p, Measure):
        return f"measure {p.n}x{p.d}"
    if isinstance(p, np.ndarray):
        return f"array {'x'.join(map(str, p.shape))}"
    if isinstance(p, Mapping):
        return "{" + ", ".join(f"{k}: {_payload_summary(v)}" for k, v in p.items()) + "}"
    if isinstance(p, float):
        return f"{p:.6g}"
    return repr(p)


def cmd_transcript(args) -> int:
    from collections import defaultdict

    from testbed.exchange.bus import Transcript

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise TestbedError(f"{run_dir}: run directory not found")
    tr = Transcript.load(run_dir)
    envs = list(tr)
    shown = envs if args.all or len(envs) <= args.limit else envs[: args.limit]
    rows = [
        [
            e.seq,
            e.round,
            f"{e.sender} -> {e.receiver}",
            e.kind,
            _payload_summary(e.payload),
            _fmt_bytes(e.nbytes),
        ]
        for e in shown
    ]
    print(_table(rows, ["#", "round", "route", "kind", "payload", "size"]))
    if len(shown) < len(envs):
        print(f"... {len(envs) - len(shown)} more (use --all)")
    by = defaultdict(lambda: [0, 0])
    for e in envs:
        by[(e.kind, e.sender, e.receiver)][0] += 1
        by[(e.kind, e.sender, e.receiver)][1] += e.nbytes
    print()
    print(
        _table(
            [[k, f"{s} -> {r}", n, _fmt_bytes(b)] for (k, s, r), (n, b) in sorted(by.items())],
            ["kind", "route", "messages", "bytes"],
        )
    )
    print(
        f"total: {len(envs)} messages, {_fmt_bytes(tr.nbytes)}, transcript digest {tr.digest()[:16]}"
    )
    return 0


def _ints(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def _bench_scaling(args) -> int:
    from testbed.bench.scaling import ScalingOptions, bench_scaling, write_scaling

    kw = {k: getattr(args, k) for k in ("ns", "clients") if getattr(args, k) is not None}
    if args.ds is not None:
        kw["d"] = args.ds[0]
    if args.cases is not None:
        kw["cases"] = [c for c in args.cases.split(",") if c]
    opts = ScalingOptions(
        **kw,
        log=(lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True)),
    )
    command = "testbed bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else ""
    paths = write_scaling(bench_scaling(opts), args.out, command)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _bench_sweep_bookkeeping(args) -> int:
    """Sweep bookkeeping per cell at 2 000 and 20 000 trivial cells (testbed/bench/sweep.py)."""
    import json

    from testbed.bench.sweep import run_bookkeeping

    rows = run_bookkeeping(log=(lambda s: None) if args.quiet else print)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sweep_bookkeeping.json"
    command = "testbed bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else ""
    path.write_text(json.dumps({"command": command, "rows": rows}, indent=2) + "\n")
    ratio = rows[-1]["us_per_cell"] / rows[0]["us_per_cell"]
    print(f"time per cell at {rows[-1]['cells']} vs {rows[0]['cells']} cells: {ratio:.2f}x")
    print(f"wrote {path}")
    return 0


def cmd_bench(args) -> int:
    from testbed.bench.main import BenchOptions, run_bench, write_outputs

    if args.scaling:
        return _bench_scaling(args)
    if args.sweep_bookkeeping:
        return _bench_sweep_bookkeeping(args)
    kw = {}
    for key in ("ns", "ds", "clients"):
        if getattr(args, key) is not None:
            kw[key] = getattr(args, key)
    if args.cases is not None:
        kw["cases"] = [c for c in args.cases.split(",") if c]
    if args.ray_clients is not None:
        kw.update(ray=True, ray_clients=args.ray_clients)
    if args.scenario is not None:
        kw.update(report_scenario=args.scenario, targets=True)
    if args.targets:
        kw["targets"] = True
    if args.no_memory:
        kw["memory"] = False
    if args.pairwise is not None:
        kw["pairwise_clients"] = args.pairwise
    if args.pairwise_pairs is not None:
        kw["pairwise_pairs"] = None if args.pairwise_pairs == "all" else args.pairwise_pairs
    kw["progress"] = not args.quiet and sys.stderr.isatty()
    kw["log"] = (
        (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    )
    opts = BenchOptions.full(**kw) if args.full else BenchOptions.quick(**kw)
    command = "testbed bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else ""
    res = run_bench(opts, command=command)
    paths = write_outputs(res, args.out)
    for t in res["targets"]:
        state = "met" if t["met"] else f"MISSED ({t['factor']:.2f}x the limit)"
        print(f"target: {t['text']}: {t['measured']:.4g} {t['unit']} -> {state}")
    if res["targets"]:
        from testbed.bench.targets import issue15_rows

        for r in issue15_rows(res):
            value = r["detail"] if r["value"] is None else f"{r['value']:.4g} {r['unit']}"
            print(f"issue 15: {r['quantity']}: {value}")
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def cmd_new_attack(args) -> int:
    from testbed.plugins.scaffold import new_attack

    root = new_attack(args.name, args.dir)
    print(f"created attack plugin {args.name!r} in {root}")
    print(f"next: pip install -e {root} && testbed plugins")
    return 0


# ----------------------------------------------------------------------------- protocol kit
def _add_protocol_kit_commands(sub) -> None:
    """``testbed new-protocol NAME [DIR]`` and ``testbed scorecard PROTOCOL|SCENARIO [-o DIR]``."""

    def new_protocol_cmd(args) -> int:
        from testbed.plugins.scaffold import new_protocol

        root = new_protocol(args.name, args.dir)
        print(f"created protocol plugin {args.name!r} in {root}")
        print(f"next: pip install -e {root} && testbed plugins && pytest {root / 'tests'}")
        return 0

    def scorecard_cmd(args) -> int:
        from testbed.plugins.scorecard import scorecard

        card = scorecard(args.target, args.out, progress=not args.quiet)
        for line in card.summary_lines():
            print(line)
        print(f"scorecard: {card.paths['html']}")
        return 0

    p = sub.add_parser("new-protocol", help="scaffold a protocol plugin package")
    p.add_argument("name", help="snake_case protocol name (== YAML key == entry-point name)")
    p.add_argument("dir", nargs="?", help="target directory (default: ./NAME)")
    p.set_defaults(fn=new_protocol_cmd)
    p = sub.add_parser(
        "scorecard",
        help="run a protocol once, then every applicable attack under every threat model",
    )
    p.add_argument("target", help="a protocol name (its small contract scenario) or a scenario")
    p.add_argument("-o", "--out", help="output directory (default: runs/scorecard-<name>)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(fn=scorecard_cmd)


def _pairs_arg(text: str):
    """``all`` or a positive integer (``--pairwise-pairs``)."""
    return "all" if text.strip().lower() == "all" else _positive_int(text)


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= v <= 1_000_000:
        raise argparse.ArgumentTypeError(f"must be between 1 and 1000000, got {v}")
    return v


def _open_unit(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(v) and 0 < v < 1):
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {text}")
    return v


def _limit_flags(p) -> None:
    p.add_argument(
        "--allow-large",
        action="store_true",
        help="run even when the memory estimate exceeds the available memory",
    )
    p.add_argument(
        "--max-cells",
        type=_cell_count,
        help="accept a sweep of up to N cells (default 10000; also limits: {max_cells: N})",
    )


def _cell_count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= v <= 100_000_000:
        raise argparse.ArgumentTypeError(f"must be between 1 and 100000000, got {v}")
    return v


def _version() -> str:
    """The installed distribution's version (its metadata; nothing imported), else the
    package's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ot-testbed")
    except PackageNotFoundError:
        from testbed import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="testbed",
        description="Privacy-auditing testbed for federated optimal-transport protocols.",
    )
    ap.add_argument("--version", action="version", version=f"testbed {_version()}")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run a scenario and write its run directory")
    p.add_argument("scenario")
    p.add_argument("--out", help="run directory (default: runs/<name>-<hash8>)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "-j", "--jobs", type=_positive_int, default=1, help="sweep cells run in this many processes"
    )
    _limit_flags(p)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser(
        "audit", help="canary distinguishing game: audited ε lower bound vs the claim"
    )
    p.add_argument("scenario")
    p.add_argument(
        "--party", action="append", help="party to audit (repeatable; default: first two)"
    )
    p.add_argument("--trials", type=_positive_int, default=200, help="trials per world (D and D')")
    p.add_argument("--delta", type=_open_unit, default=1e-5)
    _limit_flags(p)
    p.set_defaults(fn=cmd_audit)
    p = sub.add_parser(
        "attack", help="run attacks on a saved run's transcript (protocol not re-run)"
    )
    p.add_argument("run_dir")
    p.add_argument(
        "--attack",
        action="append",
        help="NAME or NAME:{json params} (repeatable; default: the run's own attacks)",
    )
    p.add_argument("--observer", help="threat model observer (default: the run's)")
    p.add_argument("--colluders", help="comma-separated colluding parties")
    p.set_defaults(fn=cmd_attack)
    p = sub.add_parser("report", help="render report.html/.md and results.csv of a run directory")
    p.add_argument("run_dir")
    p.set_defaults(fn=cmd_report)
    p = sub.add_parser(
        "bench",
        help="time every protocol as a ratio to one exact ot.emd (quick subset by default)",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", action="store_true", help="quick subset for CI smoke runs (the default)"
    )
    size.add_argument("--full", action="store_true", help="the full grid and the issue-6 targets")
    p.add_argument("--n", dest="ns", type=_ints, help="points per party, e.g. 250,500,1000")
    p.add_argument("--d", dest="ds", type=_ints, help="dimensions, e.g. 2,64,784")
    p.add_argument("--clients", type=_ints, help="client counts N, e.g. 5,20,100")
    p.add_argument("--cases", help="comma-separated case keys (default: all registered)")
    p.add_argument("--ray-clients", type=_ints, help="also run the N-client cases on Ray")
    p.add_argument("--scenario", help="also time this scenario end to end (target: 3 min)")
    p.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    p.add_argument("--targets", action="store_true", help="check the issue-6 targets")
    p.add_argument(
        "--scaling",
        action="store_true",
        help="only the scaling curves: time and peak memory against n (--n) and N (--clients), "
        "every engine available (about 15 min on 2 cores)",
    )
    p.add_argument(
        "--sweep-bookkeeping",
        action="store_true",
        help="only the sweep's own bookkeeping per cell at 2000 and 20000 trivial cells",
    )
    p.add_argument(
        "--pairwise",
        type=_ints,
        help="pairwise FedWAD on Ray for these N, peak RSS of the process tree "
        "(--full: 100,200,400,1000)",
    )
    p.add_argument(
        "--pairwise-pairs",
        type=_pairs_arg,
        help="run the first K pairs of each N, or 'all' (default 500; all pairs when fewer)",
    )
    p.add_argument("--out", default="runs/bench", help="output folder (default: runs/bench)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(fn=cmd_bench)
    p = sub.add_parser("validate", help="check a scenario without running it")
    p.add_argument("scenario")
    p.add_argument("--max-cells", type=_cell_count, help="accept a sweep of up to N cells")
    p.set_defaults(fn=cmd_validate)
    p = sub.add_parser("plugins", help="list registered protocols, attacks, defenses, datasets")
    p.set_defaults(fn=cmd_plugins)
    p = sub.add_parser("new-attack", help="scaffold an attack plugin package")
    p.add_argument("name", help="snake_case attack name (== YAML key == entry-point name)")
    p.add_argument("dir", nargs="?", help="target directory (default: ./NAME)")
    p.set_defaults(fn=cmd_new_attack)
    _add_protocol_kit_commands(sub)
    p = sub.add_parser("transcript", help="show what was exchanged in a run")
    p.add_argument("run_dir")
    p.add_argument("--limit", type=_positive_int, default=40)
    p.add_argument("--all", action="store_true")
    p.set_defaults(fn=cmd_transcript)
    return ap


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _interruptible() -> None:
    """SIGINT raises KeyboardInterrupt even when the testbed was started with SIGINT ignored
    (a background job of a non-interactive shell inherits that, and Python then leaves it
    ignored), so that `kill -INT` and Ctrl-C always end a run quietly with its results kept."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    """Every command wrapped: bad input exits 2 with one line naming file/line/field, a runtime
    fault exits 1 with one line, ``--debug`` shows the traceback; a closed pipe and Ctrl-C end
    quietly (results are written atomically as they are computed, so nothing is lost)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if debug:
        argv.remove("--debug")
    args = build_parser().parse_args(argv)
    _interruptible()
    try:
        from testbed.threads import limit_blas_threads

        limit_blas_threads()  # small BLAS products: one thread (see testbed/threads.py)
        rc = args.fn(args)
        sys.stdout.flush()  # inside the try: a closed pipe is handled below, not at exit
        return rc
    except BrokenPipeError:
        # the reader stopped early (`testbed transcript RUN | head`): end quietly; stdout goes
        # to /dev/null so the interpreter's final flush does not raise again
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except TestbedError as exc:
        if debug:
            traceback.print_exc()
            details = getattr(exc, "details", None)  # e.g. an isolated attack's own traceback
            if details:
                print(f"--- traceback in the attack's process ---\n{details}", file=sys.stderr)
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except CellTimeoutError as exc:  # a runtime stop: finished cells are on disk
        if debug:
            traceback.print_exc()
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (RecursionError, MemoryError) as exc:
        if debug:
            traceback.print_exc()
        what = "input nested too deeply" if isinstance(exc, RecursionError) else "out of memory"
        print(
            f"error: {what} ({type(exc).__name__}); rerun with --debug for details", file=sys.stderr
        )
        return 1
    except OSError as exc:
        if debug:
            traceback.print_exc()
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"error: {where}{exc.strerror or _one_line(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:  # a fault, not bad input: one line, traceback on --debug
        if debug:
            traceback.print_exc()
        print(
            f"error: {type(exc).__name__}: {_one_line(exc)} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
