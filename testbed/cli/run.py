"""``testbed run SCENARIO``: run a scenario (or its sweep), write the report, print a summary."""

from __future__ import annotations

from testbed.cli._common import fmt_bytes, fmt_value, load_checked, print_attack_rows, table
from testbed.report.model import ANY_ATTACK, aggregate, error_key
from testbed.report.writer import write_report
from testbed.run.execute import execute
from testbed.run.sweep import run_sweep


def run(args) -> int:
    sc = load_checked(args)
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
                fmt_value(acc["estimate"]),
                fmt_value(acc["exact"]),
                f"{100 * acc['relative_error']:.3f} %",
                r["transcript"]["rounds"],
                r["transcript"]["messages"],
                fmt_bytes(r["transcript"]["bytes"]),
                f"{out.elapsed:.2f} s",
            ]
        )
    print(f"{sc.name}: protocol {r['protocol']['name']} ({r['protocol']['mode']}), seed {sc.seed}")
    print(
        table(
            rows,
            ["quantity", "estimate", "exact", "rel. error", "rounds", "messages", "bytes", "time"],
        )
    )
    print_attack_rows(r.get("attacks", []))
    print(f"results: {out.out_dir / 'results.json'}")
    report = out.out_dir / "report.html"
    if report.exists():
        print(f"report:  {report}")
    return 0


def _run_sweep(sc, args) -> int:
    out = run_sweep(sc, out_dir=args.out, progress=not args.quiet, jobs=args.jobs)
    agg = aggregate(out.rows)  # the report's own aggregation: mean over seeds per setting
    err_q = error_key(out.rows)
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
    print(table(rows, header))
    if any(c[0].startswith(ANY_ATTACK) for c in cols):
        print(
            "leakage, coverage: worst attack and target, mean over seeds (intervals in the report)"
        )
    report = write_report(out.out_dir)
    print(f"results: {out.out_dir / 'results.jsonl'}")
    print(f"report:  {report}")
    return 0
