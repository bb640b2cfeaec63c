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
much, at what accuracy, and which defenses acted on which messages: each message's
``defended_by``, :func:`testbed.exchange.envelope.defended_by`) and ``run/`` (the run directory
with its own report).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from testbed.errors import TestbedError
from testbed.plugins.scorecard_tables import defended_by, leak_tables
from testbed.plugins.threats import threat_models
from testbed.registry import ATTACKS, PROTOCOLS, plugin_phase
from testbed.report import writer  # the module: tests replace writer.write_report
from testbed.report.doc import Doc
from testbed.report.fmt import fmt
from testbed.run import execute
from testbed.run.rerun import rerun_attacks
from testbed.run.results import jsonable, write_json
from testbed.run.rundir import check_creatable
from testbed.scenario.loading import load_scenario, parse_scenario
from testbed.scoring.coalition import apply_coalition_rule, rank
from testbed.scoring.verdict import DISTRIBUTIONAL, MEMBERSHIP, RECORD, verdict
from testbed.scoring.vocabulary import NO_ATTACK_APPLIES, NOT_MEASURED, record_test
from testbed.testing import disguise  # the module: tests replace disguise_findings
from testbed.testing.protocol_checks import ProtocolRun, private_row_findings, protocol_scenario

__all__ = ["Scorecard", "scorecard", "threat_models"]


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
    disguised: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: per defense that acted on messages: ``{"messages": count, "kinds": [...]}``
    defenses: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the scenario's knob defenses: they set protocol parameters and act on no message
    knobs: list[str] = field(default_factory=list)
    messages: int = 0
    paths: dict[str, Path] = field(default_factory=dict)

    def defense_line(self) -> str:
        """Which defenses acted on how many of the run's messages (and the knob defenses)."""
        acted = ", ".join(
            f"{d} acted on {a['messages']} of {self.messages} messages"
            for d, a in self.defenses.items()
        )
        knobs = f"; knob(s) {', '.join(self.knobs)} (protocol parameters)" if self.knobs else ""
        return "defenses: " + (acted or "none acted on any message") + knobs

    def worst(self) -> dict[str, dict[str, Any]]:
        """Per threat model: how many messages carry near-copies or disguised copies (and whose
        rows), and the attack row that shows most (:func:`testbed.scoring.verdict.verdict`:
        record leaks first, then membership, then distributional inference; within a kind the
        largest figure)."""
        out = {}
        for t in self.threats:
            label = t["label"]
            fs = self.raw_rows.get(label, [])
            ds = self.disguised.get(label, [])
            rows = [r for r in self.attacks if r["threat"] == label and r["value"] is not None]
            best = max(rows, key=rank, default=None)
            out[label] = {
                "near_copy_messages": len(fs),
                "disguised_copies": len(ds),
                "transforms": sorted({d["transform"] for d in ds}),
                "rows_of": sorted({f["party"] for f in (*fs, *ds)}),
                "attack": None if best is None else best["attack"],
                "target": None if best is None else best["target"],
                "metric": None if best is None else best["metric"],
                "value": None if best is None else best["value"],
                "verdict": None if best is None else best["verdict"],
                "baseline": None if best is None else best["baseline"],
                "text": None if best is None else best["text"],
            }
        return out

    def leaks(self) -> list[str]:
        """One line per threat model that sees private rows (as sent, or in disguise) or whose
        most telling attack shows a leak of a party's data (record level or membership)."""
        return self._lines(lambda w: w["verdict"] in (RECORD, MEMBERSHIP), copies=True)

    def inferences(self) -> list[str]:
        """One line per threat model whose most telling attack shows distributional inference
        only (the reconstruction resembles the data's distribution, no record leak)."""
        return self._lines(lambda w: w["verdict"] == DISTRIBUTIONAL, copies=False)

    def _lines(self, keep, copies: bool) -> list[str]:
        out = []
        for label, w in self.worst().items():
            parts = []
            if copies and w["near_copy_messages"]:
                parts.append(
                    f"near-copies of private rows of {w['rows_of']} in "
                    f"{w['near_copy_messages']} message(s)"
                )
            if copies and w["disguised_copies"]:
                parts.append(
                    f"private rows in disguise in {w['disguised_copies']} finding(s): "
                    + "; ".join(w["transforms"])
                )
            if w["value"] is not None and keep(w):
                parts.append(f"{w['attack']} on {w['target']}: {w['text']}")
            if parts:
                out.append(f"{label}: " + "; ".join(parts))
        return out

    def leak_sentence(self) -> str:
        """What the card says of leaks of a party's data, in the testbed's words
        (:mod:`testbed.scoring.vocabulary`): the leaks; else, when no shipped attack applies,
        "no attack applies: nothing was measured" (beside what the guard's near-copy search
        found); else "none measured" and the attacks whose record test did not run."""
        leaks = self.leaks()
        if leaks:
            return "; ".join(leaks) + "."
        guard = "the guard's near-copy search found no private row in any threat model's messages"
        if not self.attacks and self.errors:
            return f"{NOT_MEASURED}: every attack that applies failed (listed below); {guard}."
        if not self.attacks:
            ran = (
                f"those that take any protocol ({', '.join(self.applicable)}) produced no output"
                if self.applicable
                else "no registered attack applies to this protocol"
            )
            return f"{NO_ATTACK_APPLIES} by an attack ({ran}); {guard}."
        unmeasured = sorted(
            {
                f"{r['attack']} on {r['target']}"
                for r in self.attacks
                if r.get("record_test") == NOT_MEASURED
            }
        )
        note = (
            f" The record test was {NOT_MEASURED} for {', '.join(unmeasured)} "
            f"({self.record_note()})."
            if unmeasured
            else ""
        )
        return f"none measured on this run.{note}"

    def record_note(self) -> str:
        """Why the record test did not run, as its rows say (the first one)."""
        return next(
            (r["record_reason"] for r in self.attacks if r.get("record_test") == NOT_MEASURED),
            "",
        )

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
            self.defense_line(),
        ]
        if not self.leaks():
            lines.append("leaks of a party's data: " + self.leak_sentence())
        return (
            lines
            + [f"leak: {x}" for x in self.leaks()]
            + [f"distributional inference (no record leak): {x}" for x in self.inferences()]
        )


def _scenario(target: str):
    """The scenario to score: a scenario file as written, or a protocol's contract scenario;
    guard in record mode, transcript saved, no attacks of its own."""
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
        with_pool = {**raw, "membership": {"members": 10, "nonmembers": 10}}
        try:
            pooled = parse_scenario(yaml.safe_dump(with_pool, sort_keys=False), where, base)
            world = execute(pooled, until="world").world
            # a protocol that carries its own membership experiment (distillation's audit
            # rows) keeps it: its attacks score those candidates, not a pool's
            if not world.protocol.membership_truth(world.parties):
                return pooled
        except TestbedError:
            pass
    return parse_scenario(yaml.safe_dump(raw, sort_keys=False), where, base)


def _coalition_views(threats: list[dict[str, Any]], transcript) -> None:
    """Each threat model's message count, and for a coalition the members that see exactly the
    same messages (it sees more than those members only through their data)."""
    seen = {
        t["label"]: frozenset(
            e.seq for e in transcript.view(t["observer"], t["colluders"]).envelopes
        )
        for t in threats
    }
    for t in threats:
        t["messages"] = len(seen[t["label"]])
        if t["colluders"]:
            members = [m for m in (t["observer"], *t["colluders"]) if m in seen]
            t["same_messages_as"] = [m for m in members if seen[m] == seen[t["label"]]]


def _attack_rows(
    run_dir: Path,
    names: list[str],
    tm: dict,
    errors: list,
    progress,
    targets: dict[str, list[str]] | None = None,
) -> list[dict]:
    """Every applicable attack under one threat model; an attack that fails is recorded (one
    line) and the others still run. ``targets``: attacks run once per listed target (a
    membership attack on a protocol whose own experiment has candidates for those only)."""
    inside = {tm["observer"], *tm["colluders"]}  # a party is never its own target
    aims = {n: [t for t in ts if t not in inside] for n, ts in (targets or {}).items()}
    names = [n for n in names if aims.get(n) != []]

    def go(batch):
        specs = [
            {"name": n, "params": {}, **({"target": t} if t else {})}
            for n in batch
            for t in aims.get(n) or [None]
        ]
        rows, _ = rerun_attacks(run_dir, specs, tm["observer"], tm["colluders"])
        return rows

    if not names:
        return []
    try:
        rows = go(names)
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
    for r in rows:  # a failed attack is a failure row (docs/reference/trust.md): an error
        if "failed" in r:
            err = f"attack {r['attack']!r} failed in {r['failed']}: {r['reason']}"
            errors.append({"threat": tm["label"], "attack": r["attack"], "error": err})
            progress(f"  {tm['label']}: {err}")
    return [r for r in rows if "failed" not in r]


def _card_row(tm: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """One scorecard row: an attack row under a threat model, with its verdict and its record
    test (measured, not measured and why, or not applicable)."""
    v = verdict(r)
    state, reason = record_test(r)
    return {
        "threat": tm["label"],
        "observer": tm["observer"],
        "colluders": tm["colluders"],
        "attack": r.get("label") or r["attack"],
        "target": r["target"],
        "metric": v.metric,
        "value": v.value,
        "verdict": v.kind,
        "baseline": v.baseline,
        "text": v.text,
        "record_test": state,
        "record_reason": reason,
        "metrics": {k: x for k, x in r.items() if isinstance(x, (int, float))},
    }


def _applicable(protocol: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The registered attacks that apply to ``protocol``, and those that could not be asked:
    ``(name, one line)`` for an attack whose default config or constructor fails (an installed
    plugin's fault, caught as :class:`~testbed.registry.plugin_phase` catches any plugin code),
    so one broken package costs its own row of the card, not the card."""
    ok, broken = [], []
    for n, cls in ATTACKS.items():
        try:
            with plugin_phase("attack", n, "setup"):
                applies = cls(cls.Config()).applies_to(protocol)
        except TestbedError as exc:
            why = exc.__cause__ or exc
            msg = " ".join(str(why).split())
            broken.append(
                (n, f"could not be built with its default config: {type(why).__name__}: {msg}")
            )
            continue
        if applies:
            ok.append(n)
    return ok, broken


def scorecard(target: str, out: str | Path | None = None, progress: bool = False) -> Scorecard:
    """Run ``target`` (a protocol name or a scenario file) once and score every applicable
    attack under every threat model; write the scorecard into ``out``."""
    say = (lambda s: print(s, flush=True)) if progress else (lambda s: None)
    sc = _scenario(target)
    name = sc.protocol.name
    out_dir = Path(out or Path("runs") / f"scorecard-{name}")
    check_creatable(out_dir)
    # an earlier scorecard, or what a failed one left (its run only): replaced
    left = {p.name for p in out_dir.iterdir()} if out_dir.is_dir() else set()
    if left - {"run"} and not (out_dir / "scorecard.json").exists():
        raise TestbedError(
            f"{out_dir}: exists and holds no scorecard; choose another --out (a scorecard "
            "replaces an earlier scorecard, never a run directory or other files)"
        )
    run_dir = out_dir / "run"
    say(f"running {name} on {sc.name} ...")
    ran = execute(sc, run_dir)
    writer.write_report(run_dir)
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
    defended = {e.seq: list(e.defended_by) for e in ran.transcript}  # from the hashed meta
    raw_rows = {
        t: [
            {k: getattr(f, k) for k in ("seq", "kind", "sender", "receiver", "party", "distance")}
            | {"defended_by": defended.get(f.seq, [])}
            for f in found.get(key, [])
        ]
        for t, key in by_label.items()
    }
    coalitions = [(t["observer"], tuple(t["colluders"])) for t in threats if t["colluders"]]
    hidden = disguise.disguise_findings(
        ProtocolRun(sc, world, ran.results, ran.transcript), coalitions
    )
    disguised = {
        t: [
            {k: getattr(f, k) for k in ("seq", "kind", "sender", "receiver", "party", "transform")}
            | {"defended_by": defended.get(f.seq, [])}
            for f in hidden.get(key, [])
        ]
        for t, key in by_label.items()
    }
    applicable, broken = _applicable(name)
    # a protocol's own membership experiment (distillation's audit rows) has members of some
    # clients only: its membership attacks are scored on those targets
    own = world.protocol.membership_truth(world.parties)
    audited = [t for t, (_, flags) in own.items() if 0 < int(np.sum(flags)) < len(flags)]
    per_target = {
        n: audited for n in applicable if audited and "scores" in ATTACKS.get(n).output_kinds
    }
    rows, errors = [], [{"threat": "*", "attack": n, "error": e} for n, e in broken]
    for tm in threats:
        say(f"  {tm['label']}: {len(applicable)} attack(s)")
        for r in _attack_rows(run_dir, applicable, tm, errors, say, per_target):
            if r["target"] in (tm["observer"], *tm["colluders"]):
                continue  # a coalition "attacking" its own member learns nothing it lacked
            rows.append(_card_row(tm, r))
    _coalition_views(threats, ran.transcript)
    rows = apply_coalition_rule(rows, threats)
    tol = PROTOCOLS.get(name).reference_tolerance
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
        disguised=disguised,
        defenses=_defenses_acted(ran.transcript),
        knobs=[d.name for d in world.defenses if not d.changes_messages],
        messages=len(defended),
    )
    _write(card, ran.results)
    return card


def _defenses_acted(transcript) -> dict[str, dict[str, Any]]:
    """Per defense named in a message's ``defended_by``: how many messages, of which kinds."""
    out: dict[str, dict[str, Any]] = {}
    for e in transcript:
        for d in e.defended_by:
            a = out.setdefault(d, {"messages": 0, "kinds": []})
            a["messages"] += 1
            if e.kind not in a["kinds"]:
                a["kinds"].append(e.kind)
    return out


def _write(card: Scorecard, results: dict) -> None:
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
    doc.h(2, "Defenses on the messages")
    doc.p(
        card.defense_line()
        + ". Read from each message's defended_by (its meta, hashed with the transcript); the "
        "near-copy and disguise tables name the defenses that acted on the messages they list."
    )
    doc.table(
        ["defense", "messages acted on", "kinds"],
        [
            [d, f"{a['messages']} of {card.messages}", ", ".join(a["kinds"])]
            for d, a in card.defenses.items()
        ]
        or [["none", f"0 of {card.messages}", "-"]],
    )
    leak_tables(doc, card, fmt)
    doc.h(3, "Private rows in what each threat model sees (guard, near-copy search)")
    doc.table(
        ["threat model", "messages with a near-copy", "whose rows", "kinds", "defended by"],
        [
            [
                t,
                len(fs),
                ", ".join(sorted({f["party"] for f in fs})) or "-",
                ", ".join(sorted({f["kind"] for f in fs})) or "-",
                defended_by(fs),
            ]
            for t, fs in card.raw_rows.items()
        ],
    )
    doc.h(3, "How much: every attack under every threat model")
    doc.table(
        ["threat model", "attack", "target", "verdict", "figure", "baseline", "detail"],
        [
            [
                r["threat"],
                r["attack"],
                r["target"],
                r["verdict"],
                f"{r['metric']} {fmt(r['value'])}",
                r["baseline"],
                r["text"]
                + (f" (coalition rule: {r['coalition_rule']})" if r.get("coalition_rule") else ""),
            ]
            for r in card.attacks
        ]
        or [["-", "no applicable attack produced output", "", "", "", "", ""]],
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
                "distributional_inference": card.inferences(),
                "disguised_rows": card.disguised,
                "worst": card.worst(),
                "messages": card.messages,
                "defenses": card.defenses,
                "knob_defenses": card.knobs,
            }
        ),
    )
