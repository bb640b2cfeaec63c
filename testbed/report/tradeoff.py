"""The "Leakage against accuracy" section: per leakage column and per party's claimed epsilon a
trade-off figure (interactive in the HTML, a PNG in ``plots/``), then accuracy by setting."""

from __future__ import annotations

import math

from testbed.report.doc import Doc
from testbed.report.figures import error_by_setting_figure, tradeoff_figure
from testbed.report.model import ANY_ATTACK, LEAKAGE_METRICS, ReportData
from testbed.report.static_figures import error_by_setting_png, tradeoff_png

__all__ = ["tradeoff_section"]


def tradeoff_section(doc: Doc, data: ReportData) -> None:
    doc.h(2, "Leakage against accuracy")
    agg, err_key = data.agg, data.err_key
    if err_key:
        for mk in data.metric_keys:
            metric = mk.rsplit(".", 1)[1]
            higher = LEAKAGE_METRICS[metric]
            if metric == "w2":
                continue  # raw distance: in the tables; w2_ratio is its plotted, normalised form
            worst = "worst attack and target" if mk.startswith(ANY_ATTACK) else "worst target"
            label = f"{mk} ({'higher' if higher else 'lower'} = more leakage; {worst})"
            png = tradeoff_png(agg, err_key, mk, label, higher, f"{mk} vs error")
            arrow = "↑" if higher else "↓"
            fig = tradeoff_figure(
                agg, err_key, mk, f"{mk} ({arrow} more leakage)", higher, f"{mk} vs error"
            )
            doc.plot(
                f"tradeoff_{mk.replace('.', '_')}.png",
                png,
                fig,
                f"{mk} against relative error — {label}",
            )
        _epsilon_plots(doc, data)
        doc.plot(
            "error_by_setting.png",
            error_by_setting_png(agg, err_key),
            error_by_setting_figure(agg, err_key),
            "accuracy by setting",
        )
    if not data.metric_keys:
        doc.p(
            "No attack ran in this run, so no leakage metric is shown; the claimed ε (from the "
            "privacy ledger) is the only privacy axis."
        )


def _epsilon_plots(doc: Doc, data: ReportData) -> None:
    """Claimed epsilon of each party some setting protects, against error."""
    agg, err_key = data.agg, data.err_key
    eps_keys = sorted({k for a in agg.values() for k in a if k.startswith("eps_claimed[")})
    finite = [
        k for k in eps_keys if any(math.isfinite(a.get(k, (math.inf,))[0]) for a in agg.values())
    ]
    for k in finite:
        args = (agg, err_key, k, f"{k} (higher = weaker guarantee)", True)
        png = tradeoff_png(*args, f"claimed ε vs error ({k})")
        fig = tradeoff_figure(*args[:3], f"{k} (↑ weaker)", True, f"claimed ε vs error ({k})")
        doc.plot(
            f"tradeoff_{k.replace('[', '_').replace(']', '')}.png",
            png,
            fig,
            f"claimed ε of {k[12:-1]} against relative error",
        )
