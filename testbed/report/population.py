"""Many parties read as a population: where a protocol's runs have more than
:data:`POPULATION_PARTIES` parties, the headline and this section give the distribution of the
headline's leakage over the parties (how many leak, quantiles, the ECDF, the worst few by name)
instead of one worst party. Renders only: each party's figure is the report's aggregation (its
mean over seeds, the worst over attacks)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from testbed.report.doc import Doc
from testbed.report.fmt import fmt, plotly_text
from testbed.report.model import LEAKAGE_METRICS, ReportData, natural, setting_name
from testbed.report.points import series_of
from testbed.report.static_figures import render
from testbed.scoring.names import Metric

__all__ = [
    "POPULATION_PARTIES",
    "Population",
    "distribution_figure",
    "population",
    "population_section",
]

#: more parties than this: the report speaks of their distribution, not of one worst party
POPULATION_PARTIES = 20
#: the worst parties named by the headline and the section
WORST_NAMED = 5
#: quantiles of the per-party figure the section lists
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
_COLUMN = re.compile(r"(.+)\[(.+)\]\.(\w+)")


@dataclass(frozen=True)
class Population:
    """One protocol setting's per-party figure of ``metric`` (worst over attacks, mean over
    seeds), the parties in natural order (client_2 before client_10)."""

    series: str
    setting: str
    metric: str
    values: dict[str, float]
    parties: int  # every party of the runs, measured or not

    @property
    def chance(self) -> float:
        """The figure of no leak: 0.5 for an AUC, 0 for the others."""
        return 0.5 if self.metric == Metric.AUC else 0.0

    @property
    def higher(self) -> bool:
        return LEAKAGE_METRICS.get(self.metric, True)

    def leaking(self) -> list[str]:
        """The parties whose figure is beyond :attr:`chance` (more leakage than none)."""
        c = self.chance
        return [p for p, v in self.values.items() if (v > c if self.higher else v < c)]

    def worst(self, n: int = WORST_NAMED) -> list[tuple[str, float]]:
        """The ``n`` parties that leak most, the worst first (ties in natural order)."""
        sign = -1 if self.higher else 1
        ranked = sorted(self.values.items(), key=lambda kv: (sign * kv[1], natural(kv[0])))
        return ranked[:n]

    def quantiles(self) -> list[tuple[float, float]]:
        v = np.asarray(list(self.values.values()), dtype=float)
        return [(q, float(np.quantile(v, q))) for q in QUANTILES]

    def sentence(self) -> str:
        """``the data of 929 of 1000 parties (median 0.31; worst client_846 0.82, ...)``."""
        n, m = len(self.leaking()), self.parties
        med = float(np.median(list(self.values.values())))
        worst = ", ".join(f"{p} {fmt(v)}" for p, v in self.worst(3))
        return f"the data of {n} of {m} parties ({self.metric} median {fmt(med)}; worst {worst})"

    def summary(self) -> str:
        """The headline's line: ``801 of 1000 parties leak (80 %); record_leakage per party:
        median 0.348, p90 0.553, max 0.802; worst 5: client_521 0.802, ...`` (the maximum is
        the worst end: the minimum for a metric where lower means more leakage)."""
        n, m = len(self.leaking()), self.parties
        at = dict(self.quantiles())  # the section's quantiles hold both ends' three
        q = (0.5, 0.9, 1.0) if self.higher else (0.5, 0.1, 0.0)
        names = ("median", "p90", "max") if self.higher else ("median", "p10", "min")
        spread = ", ".join(f"{k} {fmt(at[x])}" for k, x in zip(names, q))
        ranked = self.worst()
        worst = ", ".join(f"{p} {fmt(x)}" for p, x in ranked)
        return (
            f"{n} of {m} parties leak ({100 * n / m:.0f} %); {self.metric} per party: {spread}; "
            f"worst {len(ranked)}: {worst}"
        )


def _parties(data: ReportData, series: str) -> int:
    return max(
        (len(r["results"].get("parties") or {}) for r in data.rows if series_of(r) == series),
        default=0,
    )


def population(data: ReportData, series: str, key: tuple[str, str] | None = None):
    """The :class:`Population` of ``series`` at setting ``key`` (default: the setting where
    the headline's worst party figure is), or None with at most :data:`POPULATION_PARTIES`
    parties or no per-party figure of the headline's metric."""
    if not data.lead or _parties(data, series) <= POPULATION_PARTIES:
        return None
    metric = data.lead.rsplit(".", 1)[1]
    higher = LEAKAGE_METRICS.get(metric, True)
    per_key: dict[tuple[str, str], dict[str, float]] = {}
    for k, a in data.agg.items():
        if k[0] != series or (key is not None and k != key):
            continue
        vals: dict[str, float] = {}
        for col, t in a.items():
            m = _COLUMN.fullmatch(col)
            if not m or m.group(3) != metric or not math.isfinite(t[0]):
                continue
            p = m.group(2)
            vals[p] = max(vals.get(p, t[0]), t[0]) if higher else min(vals.get(p, t[0]), t[0])
        if vals:
            per_key[k] = vals
    if not per_key:
        return None

    def extreme(k):
        v = per_key[k].values()
        return max(v) if higher else -min(v)

    k = key if key in per_key else max(per_key, key=extreme)
    values = dict(sorted(per_key[k].items(), key=lambda kv: natural(kv[0])))
    return Population(k[0], k[1], metric, values, _parties(data, series))


#: bins of the headline's histogram of the per-party figure
BINS = 30


def distribution_figure(pops: list[Population], height: int = 300):
    """The headline's histogram of the per-party figure: parties that leak and those that do
    not stacked in their own colours (one protocol), or one histogram a protocol (several); a
    dashed line at the figure of no leak. Every protocol's figure is the same metric."""
    import plotly.graph_objects as go  # plotly: only when a figure is drawn

    every = np.concatenate([np.asarray(list(p.values.values()), dtype=float) for p in pops])
    lo, hi = float(every.min()), float(every.max())
    size = (hi - lo) / BINS if hi > lo else 1.0
    bins = {"start": lo - size / 2, "end": hi + size / 2, "size": size}
    fig = go.Figure()
    for pop in pops:
        leak = set(pop.leaking())
        where = f"{pop.series}, {setting_name(pop.setting)}"
        parts = (
            [(f"leak ({len(leak)})", True), (f"no leak ({len(pop.values) - len(leak)})", False)]
            if len(pops) == 1
            else [(f"{where}: {len(leak)} of {pop.parties} leak", None)]
        )
        for name, leaks in parts:
            xs = [v for p, v in pop.values.items() if leaks is None or (p in leak) == leaks]
            fig.add_trace(
                go.Histogram(
                    x=xs,
                    xbins=bins,
                    name=plotly_text(name),
                    marker_color=None if leaks is None else ("#b2182b" if leaks else "#9e9e9e"),
                    opacity=1.0 if len(pops) == 1 else 0.6,
                )
            )
    fig.add_vline(x=pops[0].chance, line_dash="dash", line_color="grey")
    fig.update_layout(
        barmode="stack" if len(pops) == 1 else "overlay",
        # short: a longer title runs under the toolbar; one protocol's setting heads the legend
        title={"text": plotly_text(f"{pops[0].metric} per party"), "font": {"size": 13}},
        xaxis={"title": f"{pops[0].metric} (worst over attacks, mean over seeds)"},
        yaxis={"title": "parties"},
        template="plotly_white",
        height=height,
        margin={"t": 36, "b": 40, "l": 50, "r": 10},
        # inside the plot's top right corner: above it, the legend would cover the toolbar
        legend={
            "y": 0.98,
            "yanchor": "top",
            "x": 0.98,
            "xanchor": "right",
            "bgcolor": "white",
            "title": {"text": plotly_text(where) if len(pops) == 1 else ""},
        },
    )
    return fig


def _ecdf_figures(pop: Population, title: str):
    """(plotly figure, PNG bytes) of the ECDF of the per-party figure."""
    import matplotlib  # matplotlib: only when a figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when a figure is drawn
    import plotly.graph_objects as go  # plotly: only when a figure is drawn

    names = sorted(pop.values, key=lambda p: pop.values[p])
    xs = [pop.values[p] for p in names]
    ys = [(i + 1) / len(xs) for i in range(len(xs))]
    fig = go.Figure(
        go.Scatter(
            x=xs,
            y=ys,
            mode="lines+markers",
            line={"shape": "hv"},
            marker={"size": 4},
            text=[plotly_text(p) for p in names],
            hovertemplate="%{text}: %{x:.3g}<extra></extra>",
            name="parties",
        )
    )
    fig.add_vline(x=pop.chance, line_dash="dash", line_color="grey")
    fig.update_layout(
        title={"text": plotly_text(title), "font": {"size": 13}},
        xaxis={"title": f"{pop.metric} of a party (worst over attacks, mean over seeds)"},
        yaxis={"title": "share of parties ≤ x", "range": [0, 1.02]},
        template="plotly_white",
        height=320,
        margin={"t": 40, "b": 40},
    )
    mfig, ax = plt.subplots(figsize=(6.4, 3.0))
    ax.step(xs, ys, where="post", marker=".", markersize=3)
    ax.axvline(pop.chance, ls="--", color="grey", lw=1)
    ax.set_xlabel(f"{pop.metric} of a party")
    ax.set_ylabel("share of parties ≤ x")
    ax.set_title(title, fontsize=9)
    return fig, render(mfig)


def population_section(doc: Doc, data: ReportData) -> None:
    """Per protocol of more than :data:`POPULATION_PARTIES` parties: how many leak, the
    quantiles and ECDF of the per-party figure, the worst few by name, every party folded."""
    pops = [p for s in data.protocols if (p := population(data, s)) is not None]
    if not pops:
        return
    doc.h(2, "Leakage over the parties")
    for pop in pops:
        where = f"{pop.series}, {setting_name(pop.setting)}"
        leak = pop.leaking()
        doc.p(
            f"{where}: {len(leak)} of {pop.parties} parties leak ({pop.metric} "
            f"{'above' if pop.higher else 'below'} {fmt(pop.chance)}; {len(pop.values)} "
            f"measured). Worst: {', '.join(f'{p} {fmt(v)}' for p, v in pop.worst())}."
        )
        doc.table(
            ["quantile over parties", *(f"{q:g}" for q, _ in pop.quantiles())],
            [[pop.metric, *(fmt(v) for _, v in pop.quantiles())]],
        )
        title = f"{pop.metric} per party: {where}"
        fig, png = _ecdf_figures(pop, title)
        doc.plot(f"population_{pop.series}", png, fig, f"ECDF of {title}")
        doc.fold(
            f"{where}: every party's {pop.metric} ({len(pop.values)}, natural order)",
            ["party", pop.metric],
            [[p, fmt(v)] for p, v in pop.values.items()],
        )
