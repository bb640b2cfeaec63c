"""The "Leakage against accuracy" section: one trade-off figure per metric family (distributional
leakage, reconstruction, membership, ...) with a selector over its metrics and attacks, one for
the claimed epsilon of each protected party, then accuracy by setting. Static twins (PNG at
300 dpi, PDF, SVG) of the cross-protocol views go to ``plots/`` and the Markdown."""

from __future__ import annotations

import math
import re
from collections import defaultdict

from testbed.report.doc import Doc
from testbed.report.figures import View, error_by_setting_figure, tradeoff_figure
from testbed.report.model import (
    ANY_ATTACK,
    FAMILIES,
    LEAKAGE_METRICS,
    NOT_PLOTTED,
    ReportData,
    eps_groups,
    family_of,
)
from testbed.report.static_figures import error_by_setting_png, tradeoff_png

__all__ = ["family_views", "tradeoff_section"]


def _view(mk: str) -> View:
    higher = LEAKAGE_METRICS[mk.rsplit(".", 1)[1]]
    worst = "worst attack and target" if mk.startswith(ANY_ATTACK) else "worst target"
    arrow = "↑" if higher else "↓"
    return View(
        mk,
        f"{mk} ({arrow} more leakage)",
        higher,
        f"{mk} vs error ({'higher' if higher else 'lower'} = more leakage; {worst})",
    )


def family_views(metric_keys: list[str]) -> dict[str, list[View]]:
    """Family -> its views: per metric (in the family's order) the worst over every attack
    first, then each attack's own column."""
    by_family: dict[str, list[str]] = defaultdict(list)
    for mk in metric_keys:
        metric = mk.rsplit(".", 1)[1]
        if metric not in NOT_PLOTTED:
            by_family[family_of(metric)].append(mk)
    out = {}
    order = [*FAMILIES, "other leakage"]
    for fam in sorted(by_family, key=order.index):
        ms = FAMILIES.get(fam, ())
        cols = sorted(
            by_family[fam],
            key=lambda k: (
                ms.index(k.rsplit(".", 1)[1]) if k.rsplit(".", 1)[1] in ms else len(ms),
                k.rsplit(".", 1)[1],
                not k.startswith(ANY_ATTACK + "."),
                k,
            ),
        )
        out[fam] = [_view(k) for k in cols]
    return out


def _slug(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", key).strip("_")


def tradeoff_section(doc: Doc, data: ReportData) -> None:
    doc.h(2, "Leakage against accuracy")
    if data.err_key:
        with doc.grid():  # two figures to a row
            _figures(doc, data)
    if not data.metric_keys:
        doc.p(
            "No attack ran in this run, so no leakage metric is shown; the claimed ε (from the "
            "privacy ledger) is the only privacy axis."
        )


def _figures(doc: Doc, data: ReportData) -> None:
    """A trade-off figure per metric family, claimed ε against error, error by setting."""
    agg, err_key, label = data.agg, data.err_key, data.err_label
    if err_key:
        for fam, views in family_views(data.metric_keys).items():
            fig = tradeoff_figure(agg, err_key, views, selector="metric, attack:", err_label=label)
            statics = [v for v in views if v.y_key.startswith(ANY_ATTACK + ".")] or views[:1]
            name = f"tradeoff_{_slug(statics[0].y_key)}"
            caption = (
                f"{fam} against relative error — {len(views)} view(s), chosen in the figure's "
                "menu; the static figures in plots/ show the worst over every attack"
            )
            doc.plot(name, tradeoff_png(agg, err_key, statics[0], label), fig, caption)
            for v in statics[1:]:
                doc.static(f"tradeoff_{_slug(v.y_key)}", tradeoff_png(agg, err_key, v, label))
        _epsilon_plot(doc, data)
        doc.plot(
            "error_by_setting",
            error_by_setting_png(agg, err_key, label),
            error_by_setting_figure(agg, err_key, label),
            "accuracy by setting",
        )


def _epsilon_plot(doc: Doc, data: ReportData) -> None:
    """Claimed epsilon of each party some setting protects against error, a view per party."""
    agg, err_key, err_label = data.agg, data.err_key, data.err_label
    # parties with the same claim in every setting share a view (eps_groups)
    finite = [
        (label, k)
        for label, k in eps_groups(agg)
        if any(math.isfinite(a.get(k, (math.inf,))[0]) for a in agg.values())
    ]
    if not finite:
        return
    views = [
        View(k, f"{label} (↑ weaker guarantee)", True, f"claimed ε vs error ({label})", label)
        for label, k in finite
    ]
    fig = tradeoff_figure(agg, err_key, views, selector="party:", err_label=err_label)
    doc.plot(
        "tradeoff_claimed_epsilon",
        tradeoff_png(agg, err_key, views[0], err_label),
        fig,
        "claimed ε of each protected party against relative error (party chosen in the menu)",
    )
    for v in views[1:]:
        doc.static(f"tradeoff_{_slug(v.y_key)}", tradeoff_png(agg, err_key, v, err_label))
