"""Interactive (plotly) trade-off figures: leakage or claimed epsilon against error, hover = the
cell, the Pareto front drawn; accuracy by setting."""

from __future__ import annotations

import html
import math

from testbed.report.fmt import ci, fmt
from testbed.report.model import ANY_ATTACK, pareto_front, point_id

__all__ = ["error_by_setting_figure", "tradeoff_figure"]

#: a log axis shows at most this many decades below its largest value; smaller values (e.g. an
#: exact estimate's 1e-15 rounding error) are drawn at the floor and flagged in their hover text
_LOG_DECADES = 4


def axis(vals: list[float]) -> tuple[str, float | None]:
    """('log'|'linear', floor): log only when the positive values span more than 50x."""
    v = [x for x in vals if math.isfinite(x)]
    pos = [x for x in v if x > 0]
    if len(pos) >= 2 and len(pos) == len(v) and max(pos) / min(pos) > 50:
        return "log", max(min(pos), max(pos) / 10**_LOG_DECADES)
    return "linear", None


def clip(x: float, floor: float | None) -> tuple[float, bool]:
    if floor is not None and x < floor:
        return floor, True
    return x, False


def hover(agg, key, err_key: str, y_key: str) -> str:
    a = agg[key]
    lines = [
        f"<b>{html.escape(key[0])}</b> #{point_id(agg, key)}",
        f"setting: {html.escape(str(key[1]))}",
        f"seeds: {', '.join(map(str, a.get('seeds', [])))}",
        f"{html.escape(err_key)}: {ci(a[err_key])}",
        f"{html.escape(y_key)}: {ci(a[y_key])}",
    ]
    for k in sorted(a):  # the cell's other headline numbers
        if k.startswith(("eps_claimed[", ANY_ATTACK + ".")) and k != y_key:
            lines.append(f"{html.escape(k)}: {ci(a[k])}")
    if "bytes" in a:
        lines.append(f"observer bytes: {fmt(a.get('observer_bytes', (math.nan,))[0])}")
    return "<br>".join(lines)


def tradeoff_figure(agg, err_key: str, y_key: str, y_label: str, higher_leaks: bool, title: str):
    """Interactive twin of :func:`tradeoff_png`: hover = the cell, legend toggles series."""
    import plotly.graph_objects as go

    keys = [
        k
        for k in agg
        if y_key in agg[k]
        and err_key in agg[k]
        and math.isfinite(agg[k][y_key][0])
        and math.isfinite(agg[k][err_key][0])
    ]
    xtype, xfloor = axis([agg[k][err_key][0] for k in keys])
    ytype, yfloor = axis([agg[k][y_key][0] for k in keys])
    fig = go.Figure()
    for s in sorted({k[0] for k in keys}):
        ks = sorted(k for k in keys if k[0] == s)
        xs, ys, ex_lo, ex_hi, ey_lo, ey_hi, text, sym = [], [], [], [], [], [], [], []
        for k in ks:
            (xm, xl, xh), (ym, yl, yh) = agg[k][err_key], agg[k][y_key]
            x, cx = clip(xm, xfloor)
            y, cy = clip(ym, yfloor)
            xs.append(x)
            ys.append(y)
            ex_lo.append(0 if cx else max(0.0, xm - max(xl, xfloor or -math.inf)))
            ex_hi.append(0 if cx else max(0.0, xh - xm))
            ey_lo.append(0 if cy else max(0.0, ym - max(yl, yfloor or -math.inf)))
            ey_hi.append(0 if cy else max(0.0, yh - ym))
            note = "<br><i>below the axis floor: drawn at the floor</i>" if cx or cy else ""
            text.append(hover(agg, k, err_key, y_key) + note)
            sym.append("triangle-left" if cx else ("triangle-down" if cy else "circle"))
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="markers",
                name=html.escape(s),  # plotly renders trace names as (a subset of) HTML
                marker={"size": 10, "symbol": sym},
                error_x={"type": "data", "symmetric": False, "array": ex_hi, "arrayminus": ex_lo},
                error_y={"type": "data", "symmetric": False, "array": ey_hi, "arrayminus": ey_lo},
                hovertext=text,
                hoverinfo="text",
            )
        )
    pts = [(agg[k][err_key][0], agg[k][y_key][0] * (1 if higher_leaks else -1)) for k in keys]
    front = pareto_front(pts)
    if front:
        fig.add_trace(
            go.Scatter(
                x=[clip(agg[keys[i]][err_key][0], xfloor)[0] for i in front],
                y=[clip(agg[keys[i]][y_key][0], yfloor)[0] for i in front],
                mode="lines",
                name="Pareto front",
                line={"dash": "dash", "color": "black", "width": 1},
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        title={"text": html.escape(title), "font": {"size": 13}, "x": 0.01, "y": 0.99},
        xaxis={
            "title": f"relative error of {err_key.split('.')[0]} (mean, 95 % CI)",
            "type": xtype,
        },
        yaxis={"title": y_label, "type": ytype, "automargin": True},
        height=430,
        margin={"l": 60, "r": 10, "t": 60, "b": 50},
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
    return fig


def error_by_setting_figure(agg, err_key: str):
    import plotly.graph_objects as go

    keys = sorted(k for k in agg if err_key in agg[k] and math.isfinite(agg[k][err_key][0]))
    xtype, xfloor = axis([agg[k][err_key][0] for k in keys])
    fig = go.Figure()
    for s in sorted({k[0] for k in keys}):
        ks = [k for k in keys if k[0] == s]
        xs = [clip(agg[k][err_key][0], xfloor)[0] for k in ks]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[html.escape(f"#{point_id(agg, k)} {k[1]}"[:60]) for k in ks],
                mode="markers",
                name=html.escape(s),
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
                hovertext=[hover(agg, k, err_key, err_key) for k in ks],
                hoverinfo="text",
            )
        )
    fig.update_layout(
        title={"text": "accuracy by setting", "font": {"size": 14}},
        xaxis={
            "title": f"relative error of {err_key.split('.')[0]} (mean, 95 % CI)",
            "type": xtype,
        },
        yaxis={"automargin": True, "tickfont": {"size": 10}},
        height=max(300, 22 * len(keys) + 120),
        margin={"l": 10, "r": 10, "t": 40, "b": 50},
        template="plotly_white",
    )
    return fig
