"""``testbed run SCENARIO``: run a scenario (or its sweep), write the report, print a summary."""

from __future__ import annotations

from testbed.cli._common import (
    announce_run_dir,
    failed_attacks,
    fmt_bytes,
    fmt_value,
    load_checked,
    planned_run_dir,
    print_attack_rows,
    table,
)
from testbed.cli.summary import privacy_lines, record_line, sweep_rows
from testbed.errors import EngineFault
from testbed.report.fmt import pct
from testbed.report.model import (
    UTILITY_SHOWN_EXCEPT,
    error_key,
    error_label,
    error_words,
    natural,
)
from testbed.report.writer import write_report
from testbed.run.execute import execute
from testbed.run.rundir import check_replaceable
from testbed.run.sweep import run_sweep
from testbed.scenario.preflight import preflight
from testbed.scenario.resolve import ResolvedScenario
from testbed.scoring.names import Metric


def run(args) -> int:
    sc = load_checked(args)
    rs = ResolvedScenario.of(sc)  # the loader's record: every plugin's config, validated once
    skipped = preflight(rs)  # refuse before running what a cell would refuse
    out_dir = planned_run_dir(sc, args.out, rs.config_hash if not sc.is_sweep else None)
    check_replaceable(out_dir, scenario=sc.name)  # before anything is computed
    announce_run_dir(out_dir, args.scenario)
    finish = _finisher(args.sign, progress=not args.quiet)
    if sc.is_sweep:
        return _run_sweep(sc, args, out_dir, skipped, finish)
    out = _execute(rs, out_dir, args, finish)
    r = out.results
    run_cols = [
        r["transcript"]["rounds"],
        r["transcript"]["messages"],
        fmt_bytes(r["transcript"]["bytes"]),
        f"{out.elapsed:.2f} s",
    ]
    rows, hidden = quantity_rows(r["accuracy"], r.get("parties") or {})
    rows = [row + run_cols for row in rows]
    print(f"{sc.name}: protocol {r['protocol']['name']} ({r['protocol']['mode']}), seed {sc.seed}")
    print(
        table(
            rows,
            [
                "quantity",
                Metric.ESTIMATE,
                Metric.EXACT,
                "rel. error",
                "rounds",
                "messages",
                "bytes",
                "time",
            ],
        )
    )
    if hidden:
        print(f"({hidden} more quantities in results.json and results.csv)")
    for line in headline_lines(r.get("accuracy_headline") or {}):
        print(line)
    util = {
        k: v
        for k, v in (r.get("utility") or {}).items()
        if f"utility.{k}" not in UTILITY_SHOWN_EXCEPT
    }
    if util:  # the task's own metrics (FedBary's contribution Spearman, detection AUC, ...)
        print("task utility: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(util.items())))
    for line in privacy_lines(r):
        print(line)
    print_attack_rows(r.get("attacks", []))
    if r.get("attacks_without_output"):  # ran and gave nothing: said, never read as "no leak"
        from testbed.run.rerun import why_no_rows  # lazy: keeps refused input fast

        for line in why_no_rows(sc, r.get("attacks", []), ran_only=True):
            print(f"attack {line}")
    for line in skipped:
        print(line)
    print(f"results: {out.out_dir / 'results.json'}")
    report = out.out_dir / "report.html"
    if report.exists():
        print(f"report:  {report}")
    return failed_attacks(r.get("attacks", []))


def headline_lines(head: dict) -> list[str]:
    """The headline accuracy, when the quantity table does not already say it: a ranking
    (FedBary's contributions: Spearman and top-k overlap against the central ranking) with its
    secondary error, or one error over several quantities (FedBary's distances)."""
    if "spearman" in head:
        n, k = len(head.get("keys") or ()), int(head.get("top_k") or 0)
        out = [
            f"headline accuracy ({head['quantity']}, {n} parties): Spearman "
            f"{head['spearman']:.3f}, top-{k} overlap {head['top_k_overlap']:.2f} against the "
            "central ranking"
        ]
        sec = head.get("secondary") or {}
        if sec:
            m = len(sec.get("keys") or ())
            what = sec["quantity"] + (f", {m} values" if m > 1 else "")
            out.append(f"secondary: relative error ({what}): {pct(sec[Metric.RELATIVE_ERROR])}")
        return out
    if len(head.get("keys") or ()) > 1:  # one error over several quantities
        n = len(head["keys"])
        return [
            f"headline error ({head['quantity']}, {n} values): {pct(head[Metric.RELATIVE_ERROR])}"
        ]
    return []


def _execute(sc, out_dir, args, finish):
    """:func:`execute`; a dead engine node or worker is said with what was kept of the run."""
    had = out_dir.exists()
    try:
        return execute(sc, out_dir=out_dir, progress=not args.quiet, finish=finish)
    except EngineFault as exc:
        kept = f"{out_dir} keeps its previous run" if had else "no run directory was written"
        raise EngineFault(f"{exc}; nothing of this run was kept ({kept})") from exc


#: a group of per-party quantities (``distance_client_1``, ...) longer than this shows its
#: first :data:`SHOWN_PER_GROUP` rows and one row for the rest
GROUP_ROWS = 5
SHOWN_PER_GROUP = 3


def quantity_rows(accuracy: dict, parties) -> tuple[list[list[str]], int]:
    """The quantity table's rows (quantity, estimate, exact, rel. error) and how many quantities
    it leaves out: a run with many parties has one quantity per party and kind (FedBary with 100
    clients: 200), so each such group longer than :data:`GROUP_ROWS` shows its first
    :data:`SHOWN_PER_GROUP` and a row ``... 97 more distance_*`` with the largest error of
    those it leaves out."""
    groups: dict[str, list[str]] = {}
    for k in accuracy:
        owner = next((p for p in parties if k.endswith("_" + p)), None)
        stem = f"{k[: -len(owner) - 1]}_*" if owner else k
        groups.setdefault(stem, []).append(k)
    rows, hidden = [], 0
    for stem, keys in groups.items():
        keys = sorted(keys, key=natural)  # client_2 before client_10
        shown = keys if len(keys) <= GROUP_ROWS else keys[:SHOWN_PER_GROUP]
        for k in shown:
            acc = accuracy[k]
            rows.append(
                [
                    k,
                    fmt_value(acc[Metric.ESTIMATE]),
                    fmt_value(acc[Metric.EXACT]),
                    pct(acc[Metric.RELATIVE_ERROR]),
                ]
            )
        rest = keys[len(shown) :]
        if rest:
            worst = max(accuracy[k][Metric.RELATIVE_ERROR] for k in rest)
            rows.append([f"... {len(rest)} more {stem}", "", "", f"max {pct(worst)}"])
            hidden += len(rest)
    return rows, hidden


def _finisher(sign_key, progress: bool = False):
    """What ``testbed run`` does once the run directory is in place, before its lock is
    released: sign the manifest (``--sign``), then write the report."""
    from testbed.run.manifest import (  # lazy: keeps refused input fast
        load_private_key,
        write_manifest,
    )

    if sign_key is not None:
        load_private_key(sign_key)  # a bad key file stops before the run, not after

    def finish(out_dir):
        if sign_key is not None:
            write_manifest(out_dir, sign_key)
        write_report(out_dir, progress=progress)

    return finish


def _run_sweep(sc, args, out_dir, skipped: list[str], finish) -> int:
    out = run_sweep(sc, out_dir=out_dir, progress=not args.quiet, jobs=args.jobs, finish=finish)
    header, rows, attacks = sweep_rows(out.rows)
    print(
        f"{sc.name}: sweep of {len(out.rows)} cells ({out.computed} computed, {out.cached} cached)"
    )
    print(table(rows, header))
    if "rel. error" in header:
        label = error_label(out.rows, error_key(out.rows))
        print(f"rel. error: {error_words(label)}, mean over seeds")
    if attacks:
        shown = [h for h in (Metric.LEAKAGE, Metric.COVERAGE, "TPR@0.1%FPR") if h in header]
        print(
            f"{', '.join(shown)}: worst attack and target, mean over seeds (intervals in the report)"
            + (
                "; TPR@0.1%FPR at FPR 1/#non-members when below 1000"
                if shown[-1:] == ["TPR@0.1%FPR"]
                else ""
            )
        )
    record = record_line(out.rows)
    if record:
        print(record)
    report = out.out_dir / "report.html"
    for line in skipped:
        print(line)
    print(f"results: {out.out_dir / 'results.jsonl'}")
    print(f"report:  {report}")
    return failed_attacks([a for r in out.rows for a in r.get("results", {}).get("attacks", [])])
