"""What the attacks recovered (one picture per protocol and threat, from the worst leak's saved
arrays) and the coverage matrix protocol x threat, each cell opening onto its numbers and the
commands that reproduce it."""

from __future__ import annotations

import html
import json
import shlex
from pathlib import Path

import yaml

from testbed.report import leak_png
from testbed.report.doc import Doc
from testbed.report.files import safe_stem
from testbed.report.fmt import ci, fmt
from testbed.report.leak_figures import (
    cloud_figure,
    digits_figure,
    histogram_figure,
    roc_figure,
    words_html,
)
from testbed.report.markdown_writer import md_escape
from testbed.report.model import (
    LEAKAGE_METRICS,
    THREATS,
    ReportData,
    cell_dir_of,
    evidence_for,
    point_of,
    series_of,
    setting_name,
)
from testbed.scoring.names import Metric
from testbed.scoring.vocabulary import MEASURED, NOT_MEASURED

__all__ = ["coverage_legend", "coverage_section", "recovered_section"]


def coverage_legend(data: ReportData) -> str:
    """How to read each metric the matrix shows, e.g. "Arrows: coverage ↑ (higher = more
    leakage); tv ↓ (lower = more leakage)." (each metric's own direction)."""
    metrics = sorted({b["metric"] for b in data.best.values()})
    if not metrics:
        return ""
    return (
        " Arrows: "
        + "; ".join(
            f"{m} ↑ (higher = more leakage)"
            if LEAKAGE_METRICS[m]
            else f"{m} ↓ (lower = more leakage)"
            for m in metrics
        )
        + "."
    )


def recovered_section(doc: Doc, data: ReportData) -> None:
    """Pictures of the worst leak of each threat, or why there are none."""
    doc.h(2, "What the attacks recovered")
    with doc.grid():  # two pictures to a row
        drawn = pictures(doc, data.run_dir, data.rows, data.agg, data.best)
    if not drawn:
        doc.p(
            "No picture: no attack ran, or the run predates leakage.npz (re-run it to draw the "
            "reconstructions)."
        )


def coverage_section(doc: Doc, data: ReportData) -> None:
    """The protocol x threat matrix of the largest leaks."""
    doc.h(2, "Coverage: protocol × threat")
    doc.p(
        "Each cell: the largest leak of that threat over every setting (mean over seeds), by "
        "which attack, observer → target. Click a cell for all its numbers and the commands "
        "that reproduce it." + coverage_legend(data)
    )
    coverage_matrix(doc, data.run_dir, data.rows, data.agg, data.best)


#: evidence kind -> the pictures drawn from it: (field the evidence must hold, name suffix,
#: caption, static renderer, interactive figure); "words" is an HTML table, not a plot
_PICTURES = {
    "points": (
        (
            "image_side",
            "digits",
            "best-recovered private digits and their nearest reconstruction",
            leak_png.digits_png,
            digits_figure,
        ),
        (
            "cloud_private",
            "cloud",
            "private vs reconstructed points, PCA of the private rows",
            leak_png.cloud_png,
            cloud_figure,
        ),
    ),
    "scores": (("fpr", "roc", "membership ROC (log axes)", leak_png.roc_png, roc_figure),),
    "histogram": (
        (
            "inferred",
            "labels",
            "inferred vs true label histogram",
            leak_png.histogram_png,
            histogram_figure,
        ),
    ),
    "words": (("words", "words", "retrieved words", leak_png.words_png, None),),
}


def pictures(doc, run_dir: Path, rows: list[dict], agg, best) -> int:
    """One picture per (protocol, threat) from the worst leak's saved arrays: interactive in the
    HTML, a static PNG in ``plots/`` (and the Markdown) for papers."""
    drawn = 0
    for (s, threat), b in sorted(best.items()):
        ev = evidence_for(run_dir, rows, b)
        if not ev:
            continue
        who = (
            f"{s}: {b['attack']}, {b['observer']} → {b['target']}, {setting_name(b['key'][1])}, "
            f"seed {ev['seed']}"
        )
        slug = f"{s}_{threat}"
        for field, suffix, what, png, figure in _PICTURES.get(b["kind"], ()):
            if field not in ev:
                continue
            cap, name = f"{what} — {who}", safe_stem(f"leak_{slug}_{suffix}")
            if figure is None:
                doc.raw(words_html(ev, cap), f"![{md_escape(cap)}](plots/{name}.png)")
                doc.static(name, png(ev, cap))
            else:
                doc.plot(name, png(ev, cap), figure(ev, cap), cap)
            drawn += 1
    return drawn


def _failed_labels(rows: list[dict], series: str, names: list[str]) -> list[str]:
    """``label (failed in PHASE)`` of each attack of ``names`` that failed in a cell of
    ``series`` (once each)."""
    out: list[str] = []
    for r in rows:
        if series_of(r) != series:
            continue
        for a in r["results"].get("attacks") or []:
            if "failed" in a and a.get("attack") in names:
                tag = f"{a.get('label') or a['attack']} (failed in {a['failed']})"
                if tag not in out:
                    out.append(tag)
    return out


def coverage_matrix(doc, run_dir: Path, rows: list[dict], agg, best) -> None:
    """Protocol x threat: the worst leak's figure, or why there is none; each cell opens onto
    every number of that attack row and the command that reproduces the cell."""
    from testbed.registry import ATTACKS  # loads the plugins: only when a matrix is drawn

    e = html.escape
    protocols = sorted({k[0] for k in agg})
    threats = [t for t, _ in THREATS.values()]
    head = "".join(f"<th>{e(t)}</th>" for t in threats)
    trs, md = [], []
    for s in protocols:
        tds, mds = [], []
        pname = next(
            (r["results"].get("protocol", {}).get("name") for r in rows if series_of(r) == s), s
        )
        for kind, (threat, _metric) in THREATS.items():
            b = best.get((s, threat))
            if b is None:
                able = [
                    n
                    for n, cls in ATTACKS.items()
                    if kind in cls.output_kinds and ("*" in cls.protocols or pname in cls.protocols)
                ]
                failed = _failed_labels(rows, s, able)
                if failed:
                    txt = f"failed, nothing measured ({'; '.join(failed)}; reasons above)"
                elif able:
                    txt = f"not run (would apply: {', '.join(able)})"
                else:
                    txt = "not applicable (no attack of this kind applies)"
                tds.append(f'<td class="none">{e(txt)}</td>')
                mds.append(txt)
                continue
            tag = _record_tag(agg, b)
            tds.append(f"<td>{drill(run_dir, rows, agg, b)}{e(tag)}</td>")
            mds.append(f"{fmt(b['value'][0])} {b['metric']} ({b['attack']}){tag}")
        trs.append(f"<tr><th>{e(s)}</th>{''.join(tds)}</tr>")
        md.append([s, *mds])
    table = (
        f'<div class="wide"><table class="coverage"><thead><tr><th>protocol</th>{head}</tr></thead>'
        f"<tbody>{''.join(trs)}</tbody></table></div>"
    )
    md_table = "\n".join(
        ["| protocol | " + " | ".join(threats) + " |", "|" + "---|" * (len(threats) + 1)]
        + ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in md]
    )
    doc.raw(table, md_table)


def _record_tag(agg, b: dict) -> str:
    """For a reconstruction: whether it is a record leak (closer to the party's rows than to
    population rows) or distributional inference only, with the W2 leakage beside it."""
    if b["kind"] == "points" and b["metric"] != Metric.RECORD_LEAKAGE:  # the record test never ran
        return f" — record test {NOT_MEASURED} ({b['record_reason']})"
    if b["metric"] != Metric.RECORD_LEAKAGE:
        return ""
    if b["value"][0] > 0:
        return " — record leak"
    lk = agg[b["key"]].get(f"{b['attack']}[{b['target']}].leakage")
    extra = f", leakage {fmt(lk[0])} vs prior-only baseline" if lk else ""
    return f" — {MEASURED}: no record leak (distributional inference{extra})"


def attack_arguments(cell: Path, b: dict) -> str:
    """``--attack NAME[:PARAMS] --observer X [--colluders ...]`` that run the attack of the
    best row ``b`` again on the saved messages of ``cell``, quoted for a POSIX shell. The
    attack is named by its plugin name and the params of its configuration (the scenario's
    ``resolved.yaml``, or the attacks file of a ``testbed attack`` row), never by its label,
    which ``--attack`` does not take."""
    source = cell / (b.get("source") or "resolved.yaml")
    col = b["attack"].split("@", 1)[0] if b.get("source") else b["attack"]
    try:
        text = source.read_text()
        spec = (json.loads(text) if source.suffix == ".json" else yaml.safe_load(text)) or {}
    except (OSError, ValueError, yaml.YAMLError):
        spec = {}
    params: dict = {}
    for a in spec.get("attacks") or []:
        if isinstance(a, dict) and (a.get("label") or a.get("name")) == col:
            params = a.get("params") or {}
            break
    colluders = (spec.get("threat_model") or {}).get("colluders") or []
    name = b.get("name") or col
    arg = f"{name}:{json.dumps(params, sort_keys=True, separators=(',', ':'))}" if params else name
    out = f"--attack {shlex.quote(arg)} --observer {shlex.quote(b['observer'])}"
    if colluders:
        out += f" --colluders {shlex.quote(','.join(map(str, colluders)))}"
    return out


def drill(run_dir: Path, rows: list[dict], agg, b: dict) -> str:
    e = html.escape
    a = agg[b["key"]]
    prefix = f"{b['attack']}[{b['target']}]."
    nums = "".join(
        f"<tr><td>{e(k[len(prefix) :])}</td><td>{e(ci(v))}</td></tr>"
        for k, v in sorted(a.items())
        if k.startswith(prefix) and isinstance(v, tuple)
    )
    cells = sorted(
        (r for r in rows if (series_of(r), point_of(r)) == b["key"]),
        key=lambda r: str(r.get("seed")),
    )
    cmds = []
    for r in cells:
        d = cell_dir_of(run_dir, r)
        src = d / "resolved.yaml"
        cmds.append(
            f"testbed run {src} --out runs/reproduce-{str(r.get('cell', ''))[:8] or 'run'}"
            f"   # seed {r.get('seed')}"
        )
    cell = cell_dir_of(run_dir, cells[0])
    cmds.append(
        f"testbed attack {shlex.quote(str(cell))} {attack_arguments(cell, b)}"
        "   # this attack on the saved messages"
    )
    arrow = "↑" if LEAKAGE_METRICS[b["metric"]] else "↓"
    return (
        f"<details><summary><b>{e(fmt(b['value'][0]))}</b> {e(b['metric'])} {arrow} "
        f"<small>{e(b['attack'])}, {e(b['observer'])} → {e(b['target'])}, "
        f"{e(setting_name(b['key'][1]))}</small></summary>"
        f"<table><tr><th>metric</th><th>mean [95 % CI] over seeds "
        f"{e(', '.join(map(str, a.get('seeds', []))))}</th></tr>{nums}</table>"
        f"<pre>{e(chr(10).join(cmds))}</pre></details>"
    )
