"""The report's first screen: title, run line, and the headline (per protocol the worst leak found,
the best error at each leakage level, one verdict sentence) beside the frontier figure."""

from __future__ import annotations

import html
import math
import re

from testbed.errors import TestbedError
from testbed.report.doc import Doc
from testbed.report.figures import View, tradeoff_figure
from testbed.report.fmt import fmt, pct
from testbed.report.markdown_writer import md_escape
from testbed.report.model import (
    LEAKAGE_METRICS,
    MEANING,
    ReportData,
    error_words,
    point_of,
    series_of,
    setting_name,
)
from testbed.report.population import distribution_figure, population
from testbed.run.manifest import signing_key_id
from testbed.scoring.names import Metric
from testbed.scoring.vocabulary import (
    MEASURED,
    NO_ATTACK_APPLIED,
    NOT_MEASURED,
    NOTHING_MEASURED,
    record_test,
)

__all__ = ["headline_section", "title_section"]

#: leakage levels of the headline: the best accuracy among settings leaking at most this much
LEVELS = (0.05, 0.25, 0.5, 1.0)


def _levels(metric: str | None) -> tuple[float, ...]:
    """The leakage levels of the headline's columns; none for an AUC (0.5 is chance, so "AUC
    ≤ 0.05" is no budget anyone sets): the worst AUC is shown beside its baseline instead."""
    return () if metric in (Metric.AUC, Metric.ADVANTAGE) else LEVELS


def title_section(doc: Doc, data: ReportData) -> None:
    """The page title and one line saying what run this is."""
    doc.h(1, data.title)
    run_line = (
        f"Run directory {data.run_dir.name}: {len(data.rows)} cell(s), {len(data.agg)} "
        f"setting(s), seeds {', '.join(map(str, data.seeds))}; config hash "
        f"{data.config_hash[:16]}. Every number below is read from the run's result files; "
        "intervals are 95 % Student-t intervals over seeds (on the log scale for errors and other "
        "quantities that are never negative; a single seed shows the value alone)."
    )
    doc.raw(f'<p class="runinfo">{html.escape(run_line)}</p>', md_escape(run_line))
    for line in [signature_status(data.run_dir), *attack_status(data.rows)]:
        doc.raw(f'<p class="runinfo">{html.escape(line)}</p>', md_escape(line))


def signature_status(run_dir) -> str:
    """Whether the run is signed, and with which key (``testbed verify --pubkey`` checks who)."""
    try:
        key = signing_key_id(run_dir)
    except TestbedError as exc:
        return f"Signature: unreadable ({exc})."
    if key is None:
        return (
            "Not signed: the run's digests show its files belong together, not who wrote them "
            "(docs/reference/trust.md; testbed run --sign KEYFILE signs)."
        )
    return (
        f"Signed with key {key} (manifest.sig); who signed is checked by testbed verify RUN "
        "--pubkey KEY.pub, not by this report."
    )


def attack_status(rows: list[dict]) -> list[str]:
    """The attack sandbox level(s) the rows record and one line per failed attack."""
    atk = [a for r in rows for a in r["results"].get("attacks", [])]
    levels = sorted({a.get("isolation") or "not recorded" for a in atk})
    out = [f"Attack isolation: {', '.join(levels)} (docs/reference/trust.md)."] if atk else []
    for r in rows:
        # a sweep's cells are told apart by their setting and seed
        where = (
            f", {series_of(r)} {setting_name(point_of(r))}, seed {r['results'].get('seed')}"
            if len(rows) > 1
            else ""
        )
        for a in r["results"].get("attacks", []):
            if "failed" in a:
                out.append(
                    f"Attack {a.get('label')} (observer {a.get('observer')}{where}) FAILED in "
                    f"{a['failed']}: {a.get('reason', '')}"
                )
    return out


def headline_section(doc: Doc, data: ReportData) -> None:
    """The headline beside the frontier of its leakage metric (the first screen)."""
    lead, err_key = data.lead, data.err_key
    crowds = {s: pop for s in data.protocols if (pop := population(data, s)) is not None}
    head_html, head_md = headline(data.rows, data.agg, err_key, lead, data.err_label, crowds)
    # many parties: their distribution first in the figure column, the frontier (where there
    # is one: more than one setting) under it, so both the headline and the distribution
    # are on the first screen
    dist = _distribution_div(list(crowds.values()))
    if not (lead and err_key) or (dist and len(data.agg) < 2):
        plot = f'<div class="plot">{dist}</div>' if dist else ""
        doc.raw(f'<div class="headline">{head_html}{plot}</div>', head_md)
        return
    higher = LEAKAGE_METRICS[lead.rsplit(".", 1)[1]]
    view = View(
        lead,
        f"{lead} ({'↑' if higher else '↓'} more leakage)",
        higher,
        # short enough to end before the plot's toolbar (the caption says "worst over attacks
        # and targets")
        "frontier: " + lead + " vs error",
    )
    fig = tradeoff_figure(data.agg, err_key, [view], err_label=data.err_label)
    fig.update_layout(height=400 if dist else 520)
    div = dist + fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id="plot-frontier",
        config={"displaylogo": False, "responsive": True},
    )
    doc.raw(f'<div class="headline">{head_html}<div class="plot">{div}</div></div>', head_md)


def _distribution_div(pops) -> str:
    """The headline's histogram of the per-party figure as a plotly div, or ``""`` without a
    protocol of many parties."""
    if not pops:
        return ""
    return distribution_figure(pops).to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id="plot-population-headline",
        config={"displaylogo": False, "responsive": True},
    )


def worst_leak(rows: list[dict], agg, keys, metric: str):
    """(mean, lo, hi), attack, target, setting key and observer of the largest leak."""
    worst = None
    for k in keys:
        for name, t in agg[k].items():
            m = re.fullmatch(r"(.+)\[(.+)\]\.(\w+)", name)
            if not m or m.group(3) != metric or not math.isfinite(t[0]):
                continue
            if worst is None or (
                t[0] > worst[0][0] if LEAKAGE_METRICS[metric] else t[0] < worst[0][0]
            ):
                worst = (t, m.group(1), m.group(2), k)
    if worst is None:
        return None
    r = next(x for x in rows if (series_of(x), point_of(x)) == worst[3])
    a = next(
        (
            x
            for x in r["results"].get("attacks") or []
            if (x.get("label") or x.get("attack")) == worst[1] and str(x.get("target")) == worst[2]
        ),
        {},
    )
    observer = str(
        a.get("observer") or (r["results"].get("observer_view") or {}).get("observer", "?")
    )
    return worst + (observer,)


#: where a setting's name may wrap: after these characters, never inside a word or number
_BREAK_AFTER = re.compile(r"([,(_=/ ])")


def _breakable(text: str) -> str:
    """Escaped text that may wrap only after punctuation (``_``, ``,``, ``(`` ...)."""
    parts = _BREAK_AFTER.split(text)
    return "".join(html.escape(x) + ("<wbr>" if _BREAK_AFTER.fullmatch(x) else "") for x in parts)


def _nowrap(text: str) -> str:
    """A figure that must not wrap (``exact (1e-15)``, ``53.1 %``)."""
    return f'<span class="nowrap">{html.escape(text)}</span>'


def setting_html(name: str) -> str:
    """A setting's name whole (escaped), allowed to wrap only after punctuation."""
    return f'<small class="setting" title="{html.escape(name)}">{_breakable(name)}</small>'


def _best_at(agg, keys, err_key, lead, higher: bool, level: float):
    """The setting of least error among those leaking at most ``level`` (at least, for a metric
    where lower means more leakage), or None."""
    ok = [
        k
        for k in keys
        if err_key in agg[k]
        and lead in agg[k]
        and math.isfinite(agg[k][err_key][0])
        and (agg[k][lead][0] <= level + 1e-12 if higher else agg[k][lead][0] >= level)
    ]
    return min(ok, key=lambda k: agg[k][err_key][0]) if ok else None


def headline(
    rows: list[dict],
    agg,
    err_key: str | None,
    lead: str | None,
    err_label: str | None = None,
    crowds: dict | None = None,
):
    """Per protocol: worst leak (what, to whom, at what accuracy), best error per leakage level,
    one verdict sentence. Returns (HTML, Markdown). ``crowds``: protocol -> its
    :class:`~testbed.report.population.Population` where it has many parties (the verdict and
    the worst-leak cell then give how many parties leak and the worst few, not one party)."""
    crowds = crowds or {}
    e = html.escape
    metric = lead.rsplit(".", 1)[1] if lead else None
    higher = LEAKAGE_METRICS.get(metric, True)
    trs, md_rows, verdicts = [], [], []
    for s in sorted({k[0] for k in agg}):
        keys = [k for k in agg if k[0] == s]
        w = worst_leak(rows, agg, keys, metric) if lead else None
        levels = [_best_at(agg, keys, err_key, lead, higher, lv) for lv in _levels(metric)]
        cells_html, cells_md = [], []
        unmeasured = _unmeasured(rows, s)
        for best in levels:
            if best is None:  # no setting qualifies, or none measured the figure at all
                none = NOT_MEASURED if unmeasured and not w else "none"
                cells_html.append(f'<td class="none">{none}</td>')
                cells_md.append(none)
                continue
            name = setting_name(best[1])
            cells_html.append(
                f"<td><b>{_nowrap(pct(agg[best][err_key][0]))}</b><br>{setting_html(name)}</td>"
            )
            cells_md.append(f"{pct(agg[best][err_key][0])} ({name})")
        if w:
            t, attack, target, key, observer = w
            err = pct(agg[key][err_key][0]) if err_key in agg[key] else "–"
            worst_html = (
                f"<b>{e(fmt(t[0]))}</b> {e(attack)}<br><small>{e(observer)} → {e(target)}, "
                f"error {_nowrap(err)},</small> {setting_html(setting_name(key[1]))}"
            )
            worst_md = f"{fmt(t[0])}: {attack}, {observer} → {target}, error {err}"
            if s in crowds:
                n, m = len(crowds[s].leaking()), crowds[s].parties
                worst_html += f"<br><small>{n} of {m} parties leak</small>"
                worst_md += f" ({n} of {m} parties leak)"
            base = agg[key].get(f"{attack}[{target}].baseline_auc")
            if metric in (Metric.AUC, Metric.ADVANTAGE) and base is not None:
                worst_html += f"<br><small>baseline AUC {e(fmt(base[0]))}</small>"
                worst_md += f" (baseline AUC {fmt(base[0])})"
        elif unmeasured:
            worst_html = worst_md = f"{metric} {NOT_MEASURED}"
        else:
            worst_html = worst_md = NO_ATTACK_APPLIED
        trs.append(
            f"<tr><th>{_breakable(s)}</th><td>{worst_html}</td>" + "".join(cells_html) + "</tr>"
        )
        md_rows.append([s, worst_md, *cells_md])
        record = metric == Metric.RECORD_LEAKAGE
        dist = worst_leak(rows, agg, keys, Metric.LEAKAGE) if record else None
        silent = _silent(rows, s) | unmeasured
        crowd = crowds[s].sentence() if s in crowds else None
        verdicts.append(verdict(s, w, levels, agg, err_key, metric, dist, silent, crowd))
    if lead:
        cmp = "≤" if higher else "≥"
        table = (
            '<table><colgroup><col style="width:12%"><col style="width:24%">'
            + '<col style="width:16%">' * len(_levels(metric))
            + "</colgroup><thead><tr><th>protocol</th><th>worst leak found</th>"
            + "".join(
                f"<th>best error, {e(metric)} {cmp} {lv:g}</th>"
                if lv < 1 or not higher
                else "<th>best error, any leakage</th>"
                for lv in _levels(metric)
            )
            + "</tr></thead><tbody>"
            + "".join(trs)
            + "</tbody></table>"
        )
        caption = (
            f"{e(metric)}: {e(MEANING[metric])}; worst over attacks and targets, mean over "
            f"seeds. Error: {e(error_words(err_label or (err_key or '?').split('.')[0]))} "
            "against the "
            "central exact reference."
        )
    else:
        failed = sum("failed" in a for r in rows for a in r["results"].get("attacks") or [])
        caption = (
            f"No attack finished ({failed} failed, listed above), so no leakage level is measured."
            if failed
            else "No attack ran, so no leakage level is measured."
        )
        table = ""
    # many parties: how many leak, the spread and the worst few, beside the histogram
    spread = [
        f"{s}, {setting_name(crowds[s].setting)}: {crowds[s].summary()}" for s in sorted(crowds)
    ]
    html_text = (
        '<div class="headline-text"><h2>Headline: who learns what, at what accuracy</h2>'
        + "".join(f'<p class="verdict">{v}</p>' for v in verdicts)
        + "".join(f'<p class="population">{e(x)}</p>' for x in spread)
        + table
        + f'<p class="runinfo">{caption}</p></div>'
    )
    md = "## Headline\n\n" + "\n\n".join(
        [re.sub(r"</?b>", "**", v) for v in verdicts] + [md_escape(x) for x in spread]
    )
    if lead:
        head = ["protocol", "worst leak"] + [f"{metric} ≤ {lv:g}" for lv in _levels(metric)]
        md += "\n\n" + "\n".join(
            ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in md_rows]
        )
    return html_text, md


def _setting(key) -> str:
    """A setting as the headline's sentences name it: "no defense", or "setting 0.01" (a bare
    swept value in brackets after a figure read as that figure's baseline)."""
    name = setting_name(key[1])
    return name if name == "no defense" else f"setting {name}"


def _silent(rows: list[dict], series: str) -> dict[str, list[str]]:
    """The attacks of a protocol's cells that ran without output, those that failed (their
    labels) and those skipped."""
    out: dict[str, list[str]] = {"no output": [], "skipped": [], "failed": []}
    for r in rows:
        if series_of(r) != series:
            continue
        res = r["results"]
        out["failed"] += [
            str(a.get("label") or a.get("attack"))
            for a in res.get("attacks") or []
            if "failed" in a and str(a.get("label") or a.get("attack")) not in out["failed"]
        ]
        out["no output"] += [
            a for a in res.get("attacks_without_output") or [] if a not in out["no output"]
        ]
        out["skipped"] += [
            a["attack"]
            for a in res.get("skipped_attacks") or []
            if a["attack"] not in out["skipped"]
        ]
    return out


def _unmeasured(rows: list[dict], series: str) -> dict[str, list[str]]:
    """The settings of a protocol in which a reconstruction's record test did not run (no
    population rows, no exact recovery: :func:`testbed.scoring.vocabulary.record_test`), and
    why; empty when it ran everywhere."""
    where: list[str] = []
    why: list[str] = []
    for r in rows:
        if series_of(r) != series:
            continue
        for a in r["results"].get("attacks") or []:
            state, reason = record_test(a)
            if state == NOT_MEASURED and "failed" not in a:
                name = setting_name(point_of(r))
                where += [name] if name not in where else []
                why += [reason] if reason not in why else []
    return {"record not measured": where, "why": why} if where else {}


def _dist_text(dist) -> str:
    dt, da, dtg, dk, dobs = dist
    return (
        f"distributional inference: {html.escape(da)} ({html.escape(dobs)} → "
        f"{html.escape(dtg)}) reaches leakage <b>{fmt(dt[0])}</b> against the prior-only "
        f"baseline ({html.escape(_setting(dk))})"
    )


def verdict(
    series: str,
    w,
    levels,
    agg,
    err_key: str | None,
    metric: str | None,
    dist=None,
    silent=None,
    crowd: str | None = None,
) -> str:
    """One sentence from the measured numbers (HTML-escaped, may hold <b>). ``dist``: the worst
    distributional leakage (when the headline metric is record leakage); ``silent``: attacks
    that produced no output or were skipped (said as such, never as "no leak"), and the
    settings whose record test did not run (``record not measured``, ``why``: said as not
    measured, never as 0 or "no record leak")."""
    e = html.escape
    silent = silent or {}
    unmeasured = silent.get("record not measured") or []
    record_note = (
        f"the record test was {NOT_MEASURED} ({e('; '.join(silent.get('why') or []))}) in "
        + (
            "every setting"
            if w is None
            else f"{len(unmeasured)} setting(s): {e(', '.join(unmeasured))}"
        )
    )
    quiet_note = ""
    if silent.get("no output"):
        quiet_note += (
            f" Produced no output: {e(', '.join(silent['no output']))} (nothing measured by them;"
            " not evidence of no leak)."
        )
    if silent.get("failed"):
        quiet_note += (
            f" Failed: {e(', '.join(silent['failed']))} (nothing measured by them; not evidence"
            " of no leak; their reasons are listed above)."
        )
    if silent.get("skipped"):
        quiet_note += f" Skipped (not applicable): {e(', '.join(silent['skipped']))}."
    if not w and unmeasured:
        text = f"<b>{e(series)}</b>: no record-level verdict: " + record_note
        return text + (f"; {_dist_text(dist)}" if dist else "") + "." + quiet_note
    if unmeasured:
        quiet_note = f" Not measured: {record_note}." + quiet_note
    if not w:
        if silent.get("failed"):
            return (
                f"<b>{e(series)}</b>: every attack that could measure a leak failed; no leak was "
                "measured." + quiet_note
            )
        if silent.get("no output"):
            return (
                f"<b>{e(series)}</b>: no attack produced output; no leak was measured." + quiet_note
            )
        return f"<b>{e(series)}</b>: {NO_ATTACK_APPLIED}: {NOTHING_MEASURED}." + quiet_note
    t, attack, target, key, observer = w
    err = pct(agg[key][err_key][0]) if err_key and err_key in agg[key] else "–"
    if metric == Metric.RECORD_LEAKAGE and not t[0] > 0:
        text = (
            f"<b>{e(series)}</b>: {MEASURED}: no record leak (no reconstruction closer to a "
            "party's rows than to population rows)"
        )
        if dist:
            text += f"; {_dist_text(dist)}"
        return text + "." + quiet_note
    what = (
        "record leak, baseline: population rows"
        if metric == Metric.RECORD_LEAKAGE
        else f"baseline: {'chance / prior-only attacker' if metric in (Metric.AUC, Metric.ADVANTAGE) else 'prior-only attacker'}"
    )
    # many parties: how many leak and the worst few (``crowd``), not one party's name
    whose = e(crowd) if crowd else f"{e(target)}'s data"
    text = (
        f"<b>{e(series)}</b> leaks {whose} to the <b>{e(observer)}</b>: "
        f"{e(attack)} reaches {e(metric)} <b>{fmt(t[0])}</b> ({e(what)}) at error {e(err)} "
        f"({e(_setting(key))})"
    )
    quiet = levels[0] if levels else None
    if not levels:
        text += "."
    elif quiet is not None:
        text += (
            f"; keeping {e(metric)} within {LEVELS[0]:g} costs error "
            f"<b>{e(pct(agg[quiet][err_key][0]))}</b> ({e(_setting(quiet))})."
        )
    else:
        tried = "in which it was measured " if unmeasured else "tried "
        text += f"; no setting {tried}keeps {e(metric)} within {LEVELS[0]:g}."
    return text + quiet_note
