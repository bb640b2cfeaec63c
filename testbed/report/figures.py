"""Interactive (plotly) trade-off figures: leakage or claimed epsilon against error, hover = the
cell, the Pareto front drawn; accuracy by setting."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from testbed.report.axes import Axis, error_axis, is_exact, value_axis
from testbed.report.curves import curve_of, eps_value
from testbed.report.fmt import ci, fmt, plotly_text, value_ci
from testbed.report.model import (
    ANY_ATTACK,
    UNIT_METRICS,
    eps_groups,
    error_title,
    pareto_front,
    point_id,
    settings_in_order,
)
from testbed.scoring.names import Metric

__all__ = ["PALETTE", "View", "error_by_setting_figure", "tradeoff_figure"]


def hover(agg, key, err_key: str, y_key: str, eps: list) -> str:
    """One point's hover text. ``eps``: :func:`~testbed.report.model.eps_groups` of ``agg``,
    computed once per figure (it is the same for every point)."""
    a = agg[key]
    lines = [
        f"<b>{plotly_text(key[0])}</b> #{point_id(agg, key)}",
        f"setting: {plotly_text(str(key[1]))}",
        f"seeds: {', '.join(map(str, a.get('seeds', [])))}",
        f"{plotly_text(err_key)}: {value_ci(err_key, a[err_key])}",
        f"{plotly_text(y_key)}: {ci(a[y_key])}",
    ]
    # the cell's other headline numbers: the worst attack's figures, then claimed ε (parties
    # alike in every cell on one line)
    for k in sorted(a):
        if k.startswith(ANY_ATTACK + ".") and k != y_key:
            lines.append(f"{plotly_text(k)}: {ci(a[k])}")
    for label, k in eps:
        if k in a and k != y_key:
            lines.append(f"{plotly_text(label)}: {ci(a[k])}")
    if "bytes" in a:
        lines.append(f"observer bytes: {fmt(a.get('observer_bytes', (math.nan,))[0])}")
    return "<br>".join(lines)


#: one colour per protocol series, the same in every view of a figure
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


@dataclass(frozen=True)
class View:
    """One selectable view of a trade-off figure: the column on the y axis and how to read it."""

    y_key: str
    y_label: str
    higher_leaks: bool
    title: str
    #: its entry in the figure's menu (default ``y_key``)
    name: str = ""


def _keys(agg, err_key: str, y_key: str) -> list:
    return [
        k
        for k in agg
        if y_key in agg[k]
        and err_key in agg[k]
        and math.isfinite(agg[k][y_key][0])
        and math.isfinite(agg[k][err_key][0])
    ]


def _series_trace(agg, err_key: str, y_key: str, ks: list, xa: Axis, ya: Axis, eps: list) -> dict:
    """Marker trace of one protocol series: exact estimates as a star labelled "exact" at the
    error axis' floor, values below a log axis' floor as triangles at the floor."""
    tr: dict[str, list] = defaultdict(list)
    for k in ks:
        (xm, xl, xh), (ym, yl, yh) = agg[k][err_key], agg[k][y_key]
        x, cx = xa.place(xm)
        y, cy = ya.place(ym)
        exact = is_exact(xm)
        tr["x"].append(x)
        tr["y"].append(y)
        tr["ex_lo"].append(0 if cx or exact else max(0.0, xm - max(xl, xa.floor or -math.inf)))
        tr["ex_hi"].append(0 if cx or exact else max(0.0, xh - xm))
        tr["ey_lo"].append(0 if cy else max(0.0, ym - max(yl, ya.floor or -math.inf)))
        tr["ey_hi"].append(0 if cy else max(0.0, yh - ym))
        if exact:
            note = f"<br><i>exact estimate (error {xm:.1g}): drawn at the axis' left end</i>"
        elif cx or cy:
            note = "<br><i>below the axis floor: drawn at the floor</i>"
        else:
            note = ""
        tr["text"].append(hover(agg, k, err_key, y_key, eps) + note)
        tr["label"].append(Metric.EXACT if exact else "")
        tr["sym"].append(
            "star" if exact else ("triangle-left" if cx else ("triangle-down" if cy else "circle"))
        )
    return tr


def _view_traces(go, agg, err_key: str, view: View, colors: dict, eps: list) -> tuple[list, dict]:
    """The traces of one view and the axis settings that go with it."""
    keys = _keys(agg, err_key, view.y_key)
    xa = error_axis([agg[k][err_key][0] for k in keys])
    metric = view.y_key.rsplit(".", 1)[-1]
    ya = value_axis([agg[k][view.y_key][0] for k in keys], unit=metric in UNIT_METRICS)
    traces = []
    curves: dict[str, list] = defaultdict(list)
    for k in keys:
        curves[curve_of(k)[0]].append(k)
    for s in sorted(curves):
        # a curve of target epsilons: its points joined in the order of epsilon, each labelled
        eps_of = {k: curve_of(k)[1] for k in curves[s]}
        on_curve = any(eps_of.values())
        ks = sorted(curves[s], key=lambda k: (eps_value(eps_of[k]), k) if on_curve else k)
        tr = _series_trace(agg, err_key, view.y_key, ks, xa, ya, eps)
        exact = [t == Metric.EXACT for t in tr["label"]]
        if on_curve:
            tr["label"] = [t or (eps_of[k] or "") for t, k in zip(tr["label"], ks)]
        err_x = {
            "type": "data",
            "symmetric": False,
            "array": tr["ex_hi"],
            "arrayminus": tr["ex_lo"],
        }
        err_y = {
            "type": "data",
            "symmetric": False,
            "array": tr["ey_hi"],
            "arrayminus": tr["ey_lo"],
        }
        traces.append(
            go.Scatter(
                x=tr["x"],
                y=tr["y"],
                mode=("lines+" if on_curve else "")
                + ("markers+text" if any(tr["label"]) else "markers"),
                text=tr["label"],
                textposition="bottom center",
                cliponaxis=False,
                textfont={"size": 11, "color": colors[s]},
                name=plotly_text(s),  # plotly renders trace names as (a subset of) HTML
                legendgroup=s,
                line={"color": colors[s], "width": 1},
                marker={
                    "size": [14 if e else 10 for e in exact],
                    "symbol": tr["sym"],
                    "color": colors[s],
                },
                error_x=err_x,
                error_y=err_y,
                hovertext=tr["text"],
                hoverinfo="text",
            )
        )
    sign = 1 if view.higher_leaks else -1
    front = pareto_front([(agg[k][err_key][0], agg[k][view.y_key][0] * sign) for k in keys])
    if front:
        traces.append(
            go.Scatter(
                x=[xa.place(agg[keys[i]][err_key][0])[0] for i in front],
                y=[ya.place(agg[keys[i]][view.y_key][0])[0] for i in front],
                mode="lines",
                name="Pareto front",
                line={"dash": "dash", "color": "black", "width": 1},
                hoverinfo="skip",
            )
        )
    layout = {
        "title.text": plotly_text(view.title),
        "xaxis.type": xa.type,
        "xaxis.rangemode": "nonnegative" if xa.nonnegative else "normal",
        "yaxis.type": ya.type,
        "yaxis.title.text": plotly_text(view.y_label),
    }
    if ya.range:
        layout.update({"yaxis.range": list(ya.range), "yaxis.autorange": False})
    else:
        layout.update({"yaxis.autorange": True})
    return traces, layout


def tradeoff_figure(
    agg, err_key: str, views: list[View], selector: str = "", err_label: str | None = None
):
    """Leakage (or claimed epsilon) against error, one or more views: with several, a dropdown
    (``selector`` its caption) switches between them. Hover = the cell, the legend toggles
    protocols (and curves of target epsilons: :func:`~testbed.report.curves.curve_of`), the
    Pareto front is dashed."""
    import plotly.graph_objects as go  # plotly: only when a figure is drawn

    series = sorted({curve_of(k)[0] for k in agg})
    colors = {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(series)}
    eps = eps_groups(agg)  # the hover's claimed-ε lines, the same for every point
    fig = go.Figure()
    spans, layouts = [], []
    for view in views:
        traces, layout = _view_traces(go, agg, err_key, view, colors, eps)
        spans.append((len(fig.data), len(fig.data) + len(traces)))
        layouts.append(layout)
        fig.add_traces(traces)
    n = len(fig.data)
    for i, tr in enumerate(fig.data):
        tr.visible = spans[0][0] <= i < spans[0][1]
    fig.update_layout(
        title={"font": {"size": 13}, "x": 0.01, "y": 0.99},
        xaxis={"title": error_title(err_key, err_label)},
        yaxis={"automargin": True},
        height=430,
        margin={"l": 60, "r": 10, "t": 60 if len(views) == 1 else 90, "b": 50},
        legend={
            "font": {"size": 11},
            "orientation": "h",
            "y": 1.0,
            "yanchor": "bottom",
            "x": 1.0,
            "xanchor": "right",
        },
        template="plotly_white",
    )
    fig.update_layout(_nested(layouts[0]))
    if len(views) > 1:
        buttons = [
            {
                "label": plotly_text(v.name or v.y_key),
                "method": "update",
                "args": [{"visible": [a <= i < b for i in range(n)]}, layouts[j]],
            }
            for j, (v, (a, b)) in enumerate(zip(views, spans))
        ]
        fig.update_layout(
            updatemenus=[
                {
                    "buttons": buttons,
                    "direction": "down",
                    "x": 0.1,
                    "xanchor": "left",
                    "y": 1.13,
                    "yanchor": "bottom",
                    "showactive": True,
                }
            ],
            annotations=[
                {
                    "text": plotly_text(selector),
                    "x": 0.0,
                    "xref": "paper",
                    "xanchor": "left",
                    "y": 1.165,
                    "yref": "paper",
                    "showarrow": False,
                    "font": {"size": 11},
                }
            ]
            if selector
            else [],
        )
    return fig


def _nested(flat: dict) -> dict:
    """``{"yaxis.title.text": v}`` -> ``{"yaxis": {"title": {"text": v}}}`` for update_layout."""
    out: dict = {}
    for path, v in flat.items():
        *head, last = path.split(".")
        d = out
        for h in head:
            d = d.setdefault(h, {})
        d[last] = v
    return out


def error_by_setting_figure(agg, err_key: str, err_label: str | None = None):
    import plotly.graph_objects as go  # plotly: only when a figure is drawn

    keys = [
        k for k in settings_in_order(agg) if err_key in agg[k] and math.isfinite(agg[k][err_key][0])
    ]
    xa = error_axis([agg[k][err_key][0] for k in keys])
    xtype, xfloor = xa.type, xa.floor
    eps = eps_groups(agg)
    fig = go.Figure()
    for s in sorted({k[0] for k in keys}):
        ks = [k for k in keys if k[0] == s]
        xs = [xa.place(agg[k][err_key][0])[0] for k in ks]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[plotly_text(f"#{point_id(agg, k)} {k[1]}"[:60]) for k in ks],
                mode="markers",
                name=plotly_text(s),
                marker={"size": 9},
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [max(0.0, agg[k][err_key][2] - agg[k][err_key][0]) for k in ks],
                    "arrayminus": [
                        max(0.0, agg[k][err_key][0] - max(agg[k][err_key][1], xfloor or -math.inf))
                        for k in ks
                    ],
                },
                hovertext=[hover(agg, k, err_key, err_key, eps) for k in ks],
                hoverinfo="text",
            )
        )
    fig.update_layout(
        title={"text": "accuracy by setting", "font": {"size": 14}},
        xaxis={
            "title": error_title(err_key, err_label),
            "type": xtype,
            "rangemode": "nonnegative" if xa.nonnegative else "normal",
        },
        yaxis={"automargin": True, "tickfont": {"size": 10}},
        height=max(300, 22 * len(keys) + 120),
        margin={"l": 10, "r": 10, "t": 40, "b": 50},
        template="plotly_white",
    )
    return fig
