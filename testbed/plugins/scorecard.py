"""``testbed scorecard PROTOCOL|SCENARIO [-o DIR]``: one privacy scorecard of a protocol.

The protocol runs once (a protocol name runs its small contract scenario, see
:func:`testbed.testing.protocol_scenario`; a scenario file runs as written), with the bus guard in
``record`` mode so a leaking protocol still finishes, and its transcript saved. Then, on that
transcript and without re-running the protocol (:func:`testbed.run.rerun.rerun_attacks`), every
registered attack that applies to the protocol runs under every threat model: the server, each
party, an eavesdropper, the server colluding with every client but the last, and (three parties or
more) the clients but the last colluding among themselves. The guard's near-copy search runs on
each threat model's view too (:func:`testbed.testing.private_row_findings`).

Written to DIR: ``scorecard.md``, ``scorecard.html``, ``scorecard.json`` (what leaks, to whom, how
much, at what accuracy) and ``run/`` (the run directory with its own report).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.errors import TestbedError
from testbed.scoring.metrics import LEAKAGE_METRICS

__all__ = ["HEADLINE_METRICS", "Scorecard", "scorecard", "threat_models"]

#: the figure shown for "how much", first one present in an attack row (metrics.METRIC_KEYS)
HEADLINE_METRICS = ("leakage", "auc", "tv", "matching_rate", "coverage", "exact_recovery")


@dataclass
class Scorecard:
    protocol: str
    scenario: str
    out_dir: Path
    accuracy: dict[str, dict[str, Any]]
    threats: list[dict[str, Any]]
    raw_rows: dict[str, list[dict[str, Any]]]
    attacks: list[dict[str, Any]]
    errors: list[dict[str, str]]
    applicable: list[str]
    paths: dict[str, Path] = field(default_factory=dict)

    def worst(self) -> dict[str, dict[str, Any]]:
        """Per threat model: how many messages carry near-copies (and whose rows), and the
        attack row that leaks most (largest ``leakage``, else largest ``auc``, else ``tv``...)."""
        out = {}
        for t in self.threats:
            label = t["label"]
            fs = self.raw_rows.get(label, [])
            best = None
            for metric in HEADLINE_METRICS:
                rows = [
                    r
                    for r in self.attacks
                    if r["threat"] == label and r["metric"] == metric and r["value"] is not None
                ]
                if rows:
                    flip = LEAKAGE_METRICS.get(metric, True) is False  # smaller = more leakage
                    best = max(rows, key=lambda r: -r["value"] if flip else r["value"])
                    break
            out[label] = {
                "near_copy_messages": len(fs),
                "rows_of": sorted({f["party"] for f in fs}),
                "attack": None if best is None else best["attack"],
                "target": None if best is None else best["target"],
                "metric": None if best is None else best["metric"],
                "value": None if best is None else best["value"],
            }
        return out

    def leaks(self) -> list[str]:
        """One line per threat model that sees private rows or whose best attack beats the
        prior-only baseline (leakage > 0, or AUC > 0.5)."""
        out = []
        for label, w in self.worst().items():
            parts = []
            if w["near_copy_messages"]:
                parts.append(
                    f"near-copies of private rows of {w['rows_of']} in "
                    f"{w['near_copy_messages']} message(s)"
                )
            v = w["value"]
            if v is not None and (
                (w["metric"] == "leakage" and v > 0) or (w["metric"] == "auc" and v > 0.5)
            ):
                parts.append(f"{w['attack']} on {w['target']}: {w['metric']} {v:.3g}")
            if parts:
                out.append(f"{label}: " + "; ".join(parts))
        return out

    def summary_lines(self) -> list[str]:
        acc = ", ".join(
            f"{k} {100 * a['relative_error']:.3g} % (tolerance "
            + ("-" if a.get("tolerance") is None else f"{100 * a['tolerance']:.3g} %")
            + ")"
            for k, a in self.accuracy.items()
            if isinstance(a.get("relative_error"), float)
        )
        lines = [
            f"{self.protocol} on {self.scenario}: relative error {acc or '-'}",
            f"{len(self.applicable)} applicable attack(s) x {len(self.threats)} threat model(s): "
            f"{len(self.attacks)} row(s), {len(self.errors)} error(s)",
        ]
        return lines + [f"leak: {x}" for x in self.leaks()]


def threat_models(parties: list[str], clients: list[str] | None = None) -> list[dict[str, Any]]:
    """``[{label, observer, colluders}]``: server, each party, eavesdropper, and collusions of
    the server with every client but the last, and of those clients (``clients``: the parties
    whose role is a client, default all)."""
    out = [{"label": "server", "observer": "server", "colluders": []}]
    out += [{"label": p, "observer": p, "colluders": []} for p in parties]
    out.append({"label": "eavesdropper", "observer": "eavesdropper", "colluders": []})
    parties = list(clients) if clients else list(parties)
    if len(parties) >= 2:
        out.append(
            {
                "label": "server+" + "+".join(parties[:-1]),
                "observer": "server",
                "colluders": list(parties[:-1]),
            }
        )
    if len(parties) >= 3:
        out.append(
            {
                "label": "+".join(parties[:-1]),
                "observer": parties[0],
                "colluders": list(parties[1:-1]),
            }
        )
    return out


def _scenario(target: str):
    """The scenario to score: a scenario file as written, or a protocol's contract scenario;
    guard in record mode, transcript saved, no attacks of its own."""
    from testbed.registry import PROTOCOLS
    from testbed.scenario.loading import load_scenario, parse_scenario
    from testbed.testing.protocol_checks import protocol_scenario

    path = Path(target)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        sc = load_scenario(path)
        if sc.is_sweep:
            raise TestbedError(
                f"{target}: scorecard takes a single-run scenario (remove sweep/seeds)"
            )
        where, base = sc._fname, sc._base_dir
    else:
        sc = protocol_scenario(PROTOCOLS.get(target))
        where, base = sc._fname, sc._base_dir
    raw = dict(sc._raw)
    raw.update(guard="record", attacks=[], output={"save_transcript": True})
    if not path.is_file() and raw.get("membership") is None:
        # a protocol name: add a small membership-candidate pool so membership attacks have
        # candidates; kept only when the scenario's data allow it
        from testbed.run import execute

        with_pool = {**raw, "membership": {"members": 10, "nonmembers": 10}}
        try:
            pooled = parse_scenario(yaml.safe_dump(with_pool, sort_keys=False), where, base)
            execute(pooled, until="world")
            return pooled
        except TestbedError:
            pass
    return parse_scenario(yaml.safe_dump(raw, sort_keys=False), where, base)


def _headline(row: dict[str, Any]) -> tuple[str, float | None]:
    for k in HEADLINE_METRICS:
        if isinstance(row.get(k), (int, float)):
            return k, float(row[k])
    return "-", None


def _attack_rows(run_dir: Path, names: list[str], tm: dict, errors: list, progress) -> list[dict]:
    """Every applicable attack under one threat model; an attack that fails is recorded (one
    line) and the others still run."""
    from testbed.run.rerun import rerun_attacks

    def go(batch):
        rows, _ = rerun_attacks(
            run_dir, [{"name": n, "params": {}} for n in batch], tm["observer"], tm["colluders"]
        )
        return rows

    if not names:
        return []
    try:
        return go(names)
    except TestbedError:
        rows = []
        for n in names:  # find the one(s) that fail
            try:
                rows += go([n])
            except TestbedError as exc:
                errors.append(
                    {"threat": tm["label"], "attack": n, "error": " ".join(str(exc).split())}
                )
                progress(f"  {tm['label']}: {n} failed: {exc}")
        return rows


def scorecard(target: str, out: str | Path | None = None, progress: bool = False) -> Scorecard:
    """Run ``target`` (a protocol name or a scenario file) once and score every applicable
    attack under every threat model; write the scorecard into ``out``."""
    from testbed.registry import ATTACKS, PROTOCOLS
    from testbed.report.writer import write_report
    from testbed.run import execute
    from testbed.testing.protocol_checks import ProtocolRun, private_row_findings

    say = (lambda s: print(s, flush=True)) if progress else (lambda s: None)
    sc = _scenario(target)
    name = sc.protocol.name
    out_dir = Path(out or Path("runs") / f"scorecard-{name}")
    if out_dir.exists() and not out_dir.is_dir():
        raise TestbedError(f"{out_dir}: is a file, not a directory")
    run_dir = out_dir / "run"
    say(f"running {name} on {sc.name} ...")
    ran = execute(sc, run_dir)
    write_report(run_dir)
    world = ran.world
    parties = list(world.parties)
    roles = world.protocol.roles(world.parties)
    threats = threat_models(parties, [p for p in parties if "client" in roles.get(p, "")])
    # what leaks as rows: the guard's search on each threat model's view
    found = private_row_findings(
        ProtocolRun(sc, world, ran.results, ran.transcript),
        coalitions=[(t["observer"], tuple(t["colluders"])) for t in threats if t["colluders"]],
    )
    by_label = {t["label"]: "+".join((t["observer"], *t["colluders"])) for t in threats}
    raw_rows = {
        t: [
            {k: getattr(f, k) for k in ("seq", "kind", "sender", "receiver", "party", "distance")}
            for f in found.get(key, [])
        ]
        for t, key in by_label.items()
    }
    applicable = [n for n, cls in ATTACKS.items() if cls(cls.Config()).applies_to(name)]
    rows, errors = [], []
    for tm in threats:
        say(f"  {tm['label']}: {len(applicable)} attack(s)")
        for r in _attack_rows(run_dir, applicable, tm, errors, say):
            metric, value = _headline(r)
            rows.append(
                {
                    "threat": tm["label"],
                    "observer": tm["observer"],
                    "colluders": tm["colluders"],
                    "attack": r.get("label") or r["attack"],
                    "target": r["target"],
                    "metric": metric,
                    "value": value,
                    "metrics": {k: v for k, v in r.items() if isinstance(v, (int, float))},
                }
            )
    tol = getattr(PROTOCOLS.get(name), "reference_tolerance", None)
    accuracy = {}
    for k, a in ran.results["accuracy"].items():
        t = (
            tol
            if not isinstance(tol, dict)
            else next((v for g, v in tol.items() if fnmatch.fnmatchcase(k, g)), None)
        )
        err = a["relative_error"]
        accuracy[k] = {
            "estimate": a["estimate"] if isinstance(a["estimate"], float) else None,
            "exact": a["exact"] if isinstance(a["exact"], float) else None,
            "relative_error": err,
            "tolerance": None if t is None else float(t),
            "within": None if t is None else bool(err <= t),
        }
    card = Scorecard(
        protocol=name,
        scenario=sc.name,
        out_dir=out_dir,
        accuracy=accuracy,
        threats=threats,
        raw_rows=raw_rows,
        attacks=rows,
        errors=errors,
        applicable=applicable,
    )
    _write(card, ran.results)
    return card


def _write(card: Scorecard, results: dict) -> None:
    from testbed.report.doc import Doc
    from testbed.report.fmt import fmt
    from testbed.run.results import jsonable, write_json

    doc = Doc()
    title = f"Privacy scorecard — {card.protocol} on {card.scenario}"
    doc.h(1, title)
    doc.p(
        f"The protocol ran once (transcript digest {results['transcript']['digest'][:16]}, "
        f"{results['transcript']['messages']} messages); every applicable attack "
        f"({', '.join(card.applicable) or 'none'}) then ran on the saved transcript under each "
        "threat model. Run directory: run/ (its own report: run/report.html)."
    )
    doc.h(2, "At what accuracy")
    doc.table(
        ["estimate", "value", "central POT reference", "relative error", "declared tolerance"],
        [
            [
                k,
                fmt(a["estimate"]),
                fmt(a["exact"]),
                fmt(a["relative_error"]),
                "not declared"
                if a["tolerance"] is None
                else f"{fmt(a['tolerance'])} ({'within' if a['within'] else 'EXCEEDED'})",
            ]
            for k, a in card.accuracy.items()
        ],
    )
    doc.h(2, "What leaks, to whom")
    leaks = card.leaks()
    doc.p(
        "; ".join(leaks) + "."
        if leaks
        else "No private row reaches another party and no attack beats the prior-only "
        "baseline on this run."
    )
    doc.table(
        ["threat model", "near-copies of private rows", "most leaking attack", "target", "figure"],
        [
            [
                t,
                f"{w['near_copy_messages']} message(s) ({', '.join(w['rows_of'])})"
                if w["near_copy_messages"]
                else "none",
                w["attack"] or "no output",
                w["target"] or "-",
                "-" if w["value"] is None else f"{w['metric']} {fmt(w['value'])}",
            ]
            for t, w in card.worst().items()
        ],
    )
    doc.h(3, "Private rows in what each threat model sees (guard, near-copy search)")
    doc.table(
        ["threat model", "messages with a near-copy", "whose rows", "kinds"],
        [
            [
                t,
                len(fs),
                ", ".join(sorted({f["party"] for f in fs})) or "-",
                ", ".join(sorted({f["kind"] for f in fs})) or "-",
            ]
            for t, fs in card.raw_rows.items()
        ],
    )
    doc.h(3, "How much: every attack under every threat model")
    doc.table(
        ["threat model", "attack", "target", "metric", "value", "baseline / detail"],
        [
            [
                r["threat"],
                r["attack"],
                r["target"],
                r["metric"],
                fmt(r["value"]),
                ", ".join(
                    f"{k}={fmt(v)}"
                    for k, v in r["metrics"].items()
                    if k in ("w2_ratio", "coverage", "exact_recovery", "baseline_auc", "advantage")
                ),
            ]
            for r in card.attacks
        ]
        or [["-", "no applicable attack produced output", "", "", "", ""]],
    )
    if card.errors:
        doc.h(3, "Attacks that failed")
        doc.table(
            ["threat model", "attack", "error"],
            [[e["threat"], e["attack"], e["error"]] for e in card.errors],
        )
    out = card.out_dir
    out.mkdir(parents=True, exist_ok=True)
    card.paths = {
        "md": out / "scorecard.md",
        "html": out / "scorecard.html",
        "json": out / "scorecard.json",
    }
    card.paths["md"].write_text(doc.markdown())
    card.paths["html"].write_text(doc.html(title))
    write_json(
        card.paths["json"],
        jsonable(
            {
                "protocol": card.protocol,
                "scenario": card.scenario,
                "transcript_digest": results["transcript"]["digest"],
                "accuracy": card.accuracy,
                "threat_models": card.threats,
                "applicable_attacks": card.applicable,
                "private_rows": card.raw_rows,
                "attacks": card.attacks,
                "errors": card.errors,
                "leaks": card.leaks(),
                "worst": card.worst(),
            }
        ),
    )
