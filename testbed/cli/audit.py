"""``testbed audit SCENARIO``: audited lower bounds beside a defended scenario's privacy claim.

The default is the one-run audit (m canaries, one protocol run; per observer, and per round with
``--per-round``); ``--method many-runs`` plays the reference game over ``--trials`` runs per
world and ``--method both`` runs the two side by side. Each audited party ends with one line
stating what the audit proved; ``--out DIR`` writes every row to ``DIR/audit.csv`` and
``DIR/audit.json``. When the scenario has reconstruction attacks and a μ-GDP claim, the attacks
run once and each one's success within the coverage radius is shown against the reconstruction
bound Φ(Φ⁻¹(κ) + μ).

A sweep (``sweep:`` or ``seeds:``) is audited cell by cell: every row and verdict line names its
setting (``noise_multiplier=0.01``), as ``testbed run``'s summary does. Progress: a bar over the
steps (party x method, and the reconstruction check, per cell) on a terminal, else one line per
step on stderr."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from testbed.cli._common import bench_command, load_checked, stderr_log, table
from testbed.cli.summary import setting_label
from testbed.errors import TestbedError
from testbed.exchange.bus import atomic_write_bytes
from testbed.run import execute
from testbed.run.audit import AUDIT_METHOD, canary_audit, trials_needed
from testbed.run.audit_mechanism import mechanism_audit
from testbed.run.audit_one_run import ONE_RUN_METHOD, canaries_needed, one_run_audit
from testbed.run.audit_recon import reconstruction_checks
from testbed.run.audit_verdict import AuditVerdict, judge
from testbed.run.manifest import MANIFEST_NAME, is_signed, sweep_of, write_manifest
from testbed.run.rundir import check_creatable, run_dir_lock
from testbed.run.verify import verify_run
from testbed.scenario.cells import expand_cells, sweep_hash
from testbed.scenario.resolve import ResolvedScenario
from testbed.scoring.names import Metric
from testbed.scoring.results_models import AuditRow
from testbed.scoring.results_schema import parse_row

__all__ = ["bench_audit", "party_verdicts", "run", "write_audit_rows"]


#: a party no canary audit scores: they read rows of the data's width in the messages an
#: observer saw, and none held any (e.g. a protocol whose releases are all scalars); the
#: reconstruction bound, if the scenario has attacks, is printed above
NO_SCORES = (
    "no message the observers saw holds rows of the data's width, which is what the canary "
    "audits read"
)


def write_audit_rows(rows: list[dict], out_dir) -> list[Path]:
    """``audit.csv`` and ``audit.json`` (written atomically). Into a run directory (one with a
    ``manifest.json``) under its lock, with the manifest refreshed to list them, so that
    ``testbed report`` and ``testbed verify`` accept the run with its audit."""
    out = Path(out_dir)
    text = json.dumps(rows, indent=2, default=float) + "\n"
    for i, row in enumerate(json.loads(text)):  # the results schema's rows, checked as written
        parse_row(AuditRow, row, f"audit.json: row {i}")
    out.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    run_dir = (out / MANIFEST_NAME).is_file()
    sweep = sweep_of(out) if run_dir else None
    with contextlib.ExitStack() as locks:
        if sweep is not None:  # the sweep first, then the cell: testbed attack's order
            locks.enter_context(run_dir_lock(sweep, write=True))
        if run_dir:
            locks.enter_context(run_dir_lock(out, write=True))
            verify_run(sweep if sweep is not None else out)  # never list files changed before
        atomic_write_bytes(out / "audit.csv", buf.getvalue().encode())
        atomic_write_bytes(out / "audit.json", text.encode())
        if run_dir:
            write_manifest(out)
        if sweep is not None:  # its manifest lists the cell's: refreshed with it
            write_manifest(sweep)
    return [out / "audit.csv", out / "audit.json"]


def _check_out(out, sc) -> None:
    """Refuse, before any work, an ``--out`` that is a signed run directory (the audit's files
    would not be covered by its signature; ``testbed attack --sign`` signs again; audit a copy),
    a run directory that does not verify, or a run of another scenario."""
    if out:
        check_creatable(out)
    if out and Path(out).is_dir() and is_signed(out):
        raise TestbedError(
            f"{out}: the run is signed; write the audit to another folder (--out DIR) or audit "
            "a copy of the run"
        )
    sweep = sweep_of(out) if out and Path(out).is_dir() else None
    if sweep is not None and is_signed(sweep):
        raise TestbedError(
            f"{out}: a cell of the signed sweep {sweep}; write the audit to another folder "
            "(--out DIR) or audit a copy of the sweep"
        )
    if out and (Path(out) / MANIFEST_NAME).is_file():  # a run directory: it must verify first
        with run_dir_lock(out, write=False):
            verify_run(out)
            _same_scenario(out, sc)


def _same_scenario(out, sc) -> None:
    """``--out RUN_DIR`` must be a run of the audited scenario (docs/guide/scenarios.md): its
    ``config_hash`` is the scenario's (a sweep's: the sweep hash over its cells), or the report
    would show this audit beside another scenario's results."""
    if sc.is_sweep:
        want = sweep_hash(expand_cells(sc))
    else:
        want = ResolvedScenario.of(sc).config_hash
    try:
        got = (Path(out) / "config_hash").read_text().strip()
    except (OSError, UnicodeDecodeError):
        got = "?"
    if got != want:
        raise TestbedError(
            f"{out}: a run of another scenario (config hash {got[:12]}, {sc.name!r} has "
            f"{want[:12]}); --out must be a run directory of the audited scenario"
        )


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _many_runs(world, party: str, args) -> dict:
    bar = None
    if sys.stderr.isatty():
        bar = tqdm(total=args.trials, desc=f"audit {party}: trials", leave=False)
    t0 = time.perf_counter()
    r = canary_audit(
        world,
        party,
        trials=args.trials,
        delta=args.delta,
        confidence=args.confidence,
        progress=(lambda i: bar.update(1)) if bar is not None else None,
    )
    if bar is not None:
        bar.close()
    return {
        "party": party,
        "method": "many-runs",
        "observer": r.observer,
        "rounds": "all",
        "runs": 2 * args.trials,
        "canaries": 1,
        "confidence": r.confidence,
        "delta": r.delta,
        Metric.EPS_LOWER: r.audited_epsilon,
        "mu_lower": r.mu_lower,
        "eps_lower_gdp": r.epsilon_gdp,
        Metric.EPSILON_CLAIMED: r.claimed_epsilon,
        "mu_claimed": r.claimed_mu,
        "violated": r.violated,
        "scope": "protocol",
        "ceiling_epsilon": r.ceiling_epsilon,
        "verdict": r.verdict().verdict,
        "threshold": f"held out ({r.statistic}, t = {r.threshold:.4g})",
        "seconds": time.perf_counter() - t0,
    }


def _one_run(world, party: str, args) -> list[dict]:
    t0 = time.perf_counter()
    rows = one_run_audit(
        world,
        party,
        canaries=args.canaries,
        delta=args.delta,
        confidence=args.confidence,
        per_round=args.per_round,
    )
    secs = time.perf_counter() - t0
    return [
        {
            "method": "one-run",
            **r.row(),
            "threshold": f"Bonferroni over {r.bound.candidates} rules",
            "seconds": secs,
        }
        for r in rows
    ]


def _reconstruction(sc, world) -> list[dict]:
    """The scenario's attacks, run once, against the reconstruction bound of each μ-GDP claim."""
    out = execute(sc, write=False, world=world, progress=True)  # a message bar on a terminal
    ledger = out.exchange.ledger if out.exchange is not None else world.ledger
    return reconstruction_checks(out.rows, ledger, world.parties)


def _print_rows(rows: list[dict]) -> None:
    sweep = any("setting" in r for r in rows)
    cells = [
        [
            *([r.get("setting", "")] if sweep else []),
            r["party"],
            r["method"],
            r["observer"],
            r["rounds"],
            f"{r[Metric.EPSILON_CLAIMED]:.3g}",
            f"{r[Metric.EPS_LOWER]:.3g}",
            "-" if r["mu_claimed"] is None else f"{r['mu_claimed']:.3g}",
            f"{r['mu_lower']:.3g}",
            f"{r['eps_lower_gdp']:.3g}",
            f"{r['ceiling_epsilon']:.3g}",
            r["verdict"],
        ]
        for r in rows
    ]
    header = ["party", "audit", "observer", "rounds", "claimed ε", "ε̂ ≥", "claimed μ", "μ̂ ≥"]
    print(table(cells, [*(["setting"] if sweep else []), *header, "ε(μ̂)", "ceiling", "verdict"]))


def _targets(sc) -> list[tuple[str, object]]:
    """``(setting, scenario)`` to audit: the scenario itself, or each cell of its sweep (the
    setting names the cell, and its seed when the scenario repeats seeds)."""
    if not sc.is_sweep:
        return [("", sc)]
    out = []
    for c in expand_cells(sc):
        label = setting_label({"labels": c.labels, "setting": c.setting})
        parts = [c.scenario.protocol.name] if "protocol" in c.labels else []
        parts += [label] if label != "base" else []
        parts += [f"seed {c.seed}"] if sc.seeds else []
        out.append((", ".join(parts) or "base", c.scenario))
    return out


class _Steps:
    """Progress over the audit's steps (one per party and method, one per reconstruction check,
    in every cell): a tqdm bar when stderr is a terminal, else one line per step."""

    def __init__(self, total: int, name: str):
        self.bar = None
        if sys.stderr.isatty():
            self.bar = tqdm(total=total, desc=f"audit {name}", unit="step", dynamic_ncols=True)

    def start(self, text: str) -> None:
        if self.bar is None:
            _log(text)
        else:
            self.bar.set_postfix_str(text[:70])

    def done(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


#: the largest --canaries / --trials the advice of an inconclusive verdict suggests
MAX_CANARIES, MAX_TRIALS = 1 << 14, 1 << 16


def _advice(row: dict, args, accountant: str) -> str:
    """What would raise the ceiling of ``row``'s audit above its claim."""
    gaussian = row.get("mu_claimed") is not None
    claimed = float(row[Metric.EPSILON_CLAIMED])
    if row["method"] == "one-run":
        cap = max(MAX_CANARIES, 2 * args.canaries)
        n = canaries_needed(
            claimed, args.delta, args.confidence, gaussian, accountant, 2 * args.canaries, cap
        )
        flag = f"--canaries {n}" if n else None
    else:
        cap = max(MAX_TRIALS, 2 * args.trials)
        n = trials_needed(
            claimed, args.delta, args.confidence, gaussian, accountant, 2 * args.trials, cap
        )
        flag = f"--trials {n}" if n else None
    if flag is None:
        what = "--canaries" if row["method"] == "one-run" else "--trials"
        return f"the mechanism audit (no {what} up to {cap} reaches it)"
    return f"{flag} or the mechanism audit"


def party_verdicts(
    parties: list[str], rows: list[dict], recon: list[dict], args, accountant: str = "rdp"
) -> list[AuditVerdict]:
    """One protocol-scope verdict per party from its rows (every observer, method and scope of
    rounds): VIOLATION when any row (or a reconstruction check against the party) refutes the
    claim; else, for the claim over all rounds, "holds" only when some audit's ceiling is above
    it, "inconclusive" when none is, "not audited" without a claim (a leak measured is said)."""
    out = []
    for party in parties:
        mine = [r for r in rows if r["party"] == party]
        broken = [c for c in recon if c["target"] == party and c["violated"]]
        if not mine:
            out.append(
                AuditVerdict(party, "protocol", math.nan, 0.0, math.nan, "not audited", NO_SCORES)
            )
            continue
        whole = [r for r in mine if r["rounds"] == "all"] or mine
        best = max(whole, key=lambda r: (r["ceiling_epsilon"], r[Metric.EPS_LOWER]))
        claimed = max(float(r[Metric.EPSILON_CLAIMED]) for r in whole)
        audited = max(float(r[Metric.EPS_LOWER]) for r in mine)
        violated = [r for r in mine if r["violated"]]
        if violated:
            best = max(violated, key=lambda r: r[Metric.EPS_LOWER])
            claimed, audited = float(best[Metric.EPSILON_CLAIMED]), float(best[Metric.EPS_LOWER])
        ceiling = float(best["ceiling_epsilon"])
        stuck = not (violated or broken) and math.isfinite(claimed) and claimed >= ceiling
        v = judge(
            party,
            "protocol",
            claimed,
            audited,
            ceiling,
            bool(violated or broken),
            args.confidence,
            advice=_advice(best, args, accountant) if stuck else "",
        )
        if broken and not violated:
            c = broken[0]
            v = replace(
                v,
                reason=f"reconstruction {c['attack']} -> {party}: success ≥ "
                f"{c['success_lower']:.3g} above the bound Φ(Φ⁻¹(κ) + μ) = {c['bound']:.3g} of "
                f"the claim ε = {claimed:.3g}",
            )
        if v.verdict == "not audited" and audited > 0:
            who = max(mine, key=lambda r: r[Metric.EPS_LOWER])
            v = replace(v, reason=f"{v.reason} (observer {who['observer']}, {who['method']})")
        out.append(v)
    return out


def _extra_scopes(scenario, setting: str, world, args, parties, steps) -> tuple[list, list]:
    """Verdicts of other scopes for one cell, appended after the protocol audit's: the
    mechanism audit (:mod:`testbed.run.audit_mechanism`), one per party, with its rows for
    ``audit.json``."""
    if getattr(args, "scope", "both") == "protocol":
        return [], []
    where = f"{setting}: " if setting else ""
    verdicts, rows = [], []
    for party in parties:
        steps.start(f"{where}mechanism audit {party}: {args.mechanism_trials} coupled trials")
        r = mechanism_audit(
            world, party, trials=args.mechanism_trials, delta=args.delta, confidence=args.confidence
        )
        steps.done()
        verdicts.append(
            AuditVerdict(
                party,
                "mechanism",
                r.claimed_epsilon,
                r.audited_epsilon,
                r.ceiling_epsilon if r.verdict != "not audited" else math.nan,
                r.verdict,
                r.reason,
                setting,
            )
        )
        rows.append(
            {
                **({"setting": setting} if setting else {}),
                "party": party,
                "method": "mechanism",
                "observer": "every receiver (white box)",
                "rounds": "all",
                "scope": "mechanism",
                Metric.EPSILON_CLAIMED: r.claimed_epsilon,
                Metric.EPS_LOWER: r.audited_epsilon,
                "ceiling_epsilon": r.ceiling_epsilon,
                "verdict": r.verdict,
                "violated": r.verdict == "VIOLATION",
                "trials": r.trials,
                "failed_checks": ", ".join(r.failed),
                "findings": " | ".join(r.findings),
                "checks": " | ".join(r.checks),
            }
        )
    return verdicts, rows


def _audit_cell(sc, setting: str, args, steps: _Steps):
    """One single-run scenario: its rows, reconstruction checks and verdicts (every scope)."""
    where = f"{setting}: " if setting else ""
    world = execute(sc, until="world").world
    if not world.defenses:
        _log(
            f"{args.scenario}: {where}no defense on the messages: the audit holds the protocol's "
            "own claim, if it makes one"
        )
    parties = args.party or list(world.parties)
    rows: list[dict] = []
    for party in parties if getattr(args, "scope", "both") != "mechanism" else []:
        if args.method in ("one-run", "both"):
            steps.start(f"{where}audit {party}: one protocol run with {args.canaries} canaries")
            rows += _one_run(world, party, args)
            steps.done()
        if args.method in ("many-runs", "both"):
            steps.start(f"{where}audit {party}: {args.trials} trials per world (many runs)")
            rows.append(_many_runs(world, party, args))
            steps.done()
    recon = []
    if args.reconstruction and sc.attacks:
        steps.start(
            f"{where}audit: running the scenario's attacks once for the reconstruction bound"
        )
        recon = _reconstruction(sc, world)
    steps.done()
    if setting:
        rows = [{"setting": setting, **r} for r in rows]
        recon = [{"setting": setting, **c} for c in recon]
    accountant = getattr(world.ledger, "accountant", "rdp")
    verdicts = [
        replace(v, setting=setting) for v in party_verdicts(parties, rows, recon, args, accountant)
    ]
    if getattr(args, "scope", "both") == "mechanism":
        verdicts = []
    extra, extra_rows = _extra_scopes(sc, setting, world, args, parties, steps)
    verdicts += extra  # the one place other scopes join
    return rows, recon, verdicts, extra_rows


def _print_text(sc, targets, args, rows, recon, verdicts) -> None:
    sweep = f", {len(targets)} cells" if sc.is_sweep else ""
    print(f"{sc.name}: privacy audit{sweep}, delta {args.delta:g}, confidence {args.confidence:g}")
    if rows:
        _print_rows(rows)
    for c in recon:
        state = "VIOLATION" if c["violated"] else "consistent"
        where = f"{c['setting']}: " if "setting" in c else ""
        print(
            f"{where}reconstruction {c['attack']} -> {c['target']}: success {c['success']:.3f} "
            f"(≥ {c['success_lower']:.3f}) within r = {c['radius']:.3g} vs bound "
            f"Φ(Φ⁻¹(κ) + μ) = {c['bound']:.3f} (κ ≤ {c['kappa_upper']:.3f}, μ = {c['mu']:.3g}): "
            f"{state}"
        )
    for v in verdicts:
        print(v.line())


def run(args) -> int:
    """Audit the scenario, or each cell of its sweep (one verdict per party, scope and cell);
    ``--json``: the verdicts as a JSON list on stdout, nothing else there."""
    sc = load_checked(args)
    _check_out(args.out, sc)
    known = sc.data.party_names()
    for p in args.party or []:  # before any progress line, not when its turn comes
        if p not in known:
            raise TestbedError(
                f"--party {p!r}: not a party of {args.scenario} (parties: {', '.join(known)})"
            )
    targets = _targets(sc)
    scopes = getattr(args, "scope", "both")
    per_party = (2 if args.method == "both" else 1) * (scopes != "mechanism") + (
        scopes != "protocol"
    )
    per_cell = len(args.party or known) * per_party + 1
    steps = _Steps(per_cell * len(targets), sc.name)
    done = []
    try:
        for setting, cell in targets:
            done.append(_audit_cell(cell, setting, args, steps))
    finally:
        steps.close()
    rows = [r for rs, _, _, _ in done for r in rs]
    recon = [c for _, cs, _, _ in done for c in cs]
    verdicts = [v for _, _, vs, _ in done for v in vs]
    mech = [r for *_, ms in done for r in ms]
    as_json = getattr(args, "json", False)
    if as_json:
        print(json.dumps([v.to_json() for v in verdicts], indent=2, ensure_ascii=False))
    else:
        _print_text(sc, targets, args, rows, recon, verdicts)
        for r in mech:  # what each mechanism check could have caught (or what it found)
            who = f"{r['setting']}: {r['party']}" if "setting" in r else r["party"]
            for line in (r["findings"] or r["checks"]).split(" | ") if r["trials"] else []:
                print(f"  {who} (mechanism): {line}")
    say = _log if as_json else print
    if args.out:
        recon_rows = [{"reconstruction": True, **c} for c in recon]
        paths = write_audit_rows(rows + recon_rows + mech, args.out)
        say("wrote " + ", ".join(str(p) for p in paths))
    if args.method in ("one-run", "both"):
        say(f"method (one run): {ONE_RUN_METHOD}")
    if args.method in ("many-runs", "both"):
        say(f"method (many runs): {AUDIT_METHOD}")
    return 0


def bench_audit(args) -> int:
    """``testbed bench --audit [--full]``: bench/audit.py, written to ``--out``."""
    from bench.audit import (  # bench: checkout only
        AuditBenchOptions,
        run_audit_bench,
        write_audit_bench,
    )

    log = stderr_log(args.quiet)
    opts = AuditBenchOptions(log=log) if args.full else AuditBenchOptions.quick(log=log)
    res = run_audit_bench(opts)
    paths = write_audit_bench(res, args.out, bench_command())
    d = res["default_audit"]
    print(
        f"default audit of {d['scenario']} ({d['cell']}; both scopes, every party): "
        f"{d['seconds']:.1f} s, "
        + ", ".join(f"{v['party']} {v['scope']}: {v['verdict']}" for v in d["verdicts"])
    )
    o = res["one_vs_many"]
    print(
        f"one run ({o['canaries']} canaries): eps >= {o['one_run_eps']:.3g} in "
        f"{o['one_run_seconds']:.1f} s; many runs ({o['trials']} trials per world): "
        f"eps >= {o['many_run_eps']:.3g} in {o['many_run_seconds']:.1f} s; ratio "
        f"{o['eps_ratio']:.2f}, time ratio {o['time_ratio']:.3f}"
    )
    n = res["null"]
    print(
        f"null: one run eps > 0 in {n['one_run_positive']}/{n['one_run_runs']}, many runs in "
        f"{n['many_run_positive']}/{n['many_run_runs']} (alpha 0.05)"
    )
    for r in res["miscalibrated"]:
        print(f"{r['case']} ({r['audit']}): violated={r['violated']}")
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
