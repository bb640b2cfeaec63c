"""Interactive pictures of what an attack recovered, from its saved evidence arrays: digits and
their reconstructions, a PCA point cloud, a membership ROC, a label histogram, retrieved words.
Their static twins are in :mod:`testbed.report.leak_png`."""

from __future__ import annotations

import html
import math

import numpy as np

from testbed.report.fmt import plotly_text
from testbed.scoring.names import Metric

__all__ = ["cloud_figure", "digits_figure", "histogram_figure", "roc_figure", "words_html"]


def digits_figure(ev: dict, title: str):
    """Private 8x8 digits (top) and their nearest reconstructions (bottom), one heatmap."""
    import plotly.graph_objects as go  # plotly: only when a figure is drawn

    side = int(ev["image_side"])
    orig, rec = np.asarray(ev["orig"]), np.asarray(ev["recon"])
    k = len(orig)
    lo, hi = float(min(orig.min(), rec.min())), float(max(orig.max(), rec.max()))
    canvas = np.full((2 * side + 1, k * (side + 1) - 1), np.nan)
    for j in range(k):
        c = j * (side + 1)
        canvas[:side, c : c + side] = orig[j].reshape(side, side)
        canvas[side + 1 :, c : c + side] = rec[j].reshape(side, side)
    fig = go.Figure(
        go.Heatmap(
            z=canvas,
            colorscale="Greys",
            zmin=lo,
            zmax=hi,
            showscale=False,
            hovertemplate="pixel %{z:.3g}<extra></extra>",
        )
    )
    for j, d in enumerate(np.asarray(ev["dist"])):
        fig.add_annotation(
            x=j * (side + 1) + (side - 1) / 2,
            y=2 * side + 1.2,
            text=f"d={d:.2g}",
            showarrow=False,
            font={"size": 10},
        )
    fig.update_layout(
        title={"text": plotly_text(title), "font": {"size": 13}},
        xaxis={"visible": False},
        yaxis={"visible": False, "autorange": "reversed", "scaleanchor": "x"},
        height=260,
        margin={"l": 90, "r": 10, "t": 40, "b": 10},
        template="plotly_white",
        annotations=list(fig.layout.annotations)
        + [
            {"x": -1, "y": side / 2, "text": "private", "showarrow": False, "xanchor": "right"},
            {
                "x": -1,
                "y": 1.5 * side + 1,
                "text": "reconstructed",
                "showarrow": False,
                "xanchor": "right",
            },
        ],
    )
    return fig


def cloud_figure(ev: dict, title: str):
    import plotly.graph_objects as go  # plotly: only when a figure is drawn

    p, r = np.asarray(ev["cloud_private"]), np.asarray(ev["cloud_recon"])
    ex = np.asarray(ev.get("pca_explained", [math.nan, math.nan]))
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=p[:, 0],
            y=p[:, 1],
            mode="markers",
            name="private rows",
            marker={"size": 5, "color": "#888", "opacity": 0.6},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=r[:, 0],
            y=r[:, 1],
            mode="markers",
            name="reconstructed",
            marker={"size": 6, "color": "#d62728", "symbol": "x"},
        )
    )
    fig.update_layout(
        title={"text": plotly_text(title), "font": {"size": 13}},
        xaxis={"title": f"PC 1 ({100 * ex[0]:.0f} % of the private variance)"},
        yaxis={"title": f"PC 2 ({100 * ex[1]:.0f} %)"},
        height=380,
        margin={"l": 60, "r": 10, "t": 40, "b": 50},
        template="plotly_white",
    )
    return fig


def roc_figure(ev: dict, title: str):
    """Membership ROC on log axes, floored at one over the non-members (the smallest FPR)."""
    import plotly.graph_objects as go  # plotly: only when a figure is drawn

    floor = 1.0 / max(int(ev.get(Metric.N_NONMEMBERS, 100)), 1)
    fig = go.Figure()
    for pre, name, dash in (("", "attack", "solid"), ("baseline_", "prior-only baseline", "dot")):
        if f"{pre}fpr" not in ev:
            continue
        f, t = np.asarray(ev[f"{pre}fpr"]), np.asarray(ev[f"{pre}tpr"])
        fig.add_trace(
            go.Scatter(
                x=np.maximum(f, floor),
                y=np.maximum(t, floor),
                mode="lines",
                name=name,
                line={"dash": dash},
                line_shape="hv",
            )
        )
    grid = np.geomspace(floor, 1, 20)
    fig.add_trace(
        go.Scatter(
            x=grid, y=grid, mode="lines", name="chance", line={"color": "#aaa", "dash": "dash"}
        )
    )
    fig.update_layout(
        title={"text": plotly_text(title), "font": {"size": 13}},
        xaxis={"title": "false positive rate (log)", "type": "log"},
        yaxis={"title": "true positive rate (log)", "type": "log"},
        height=380,
        margin={"l": 60, "r": 10, "t": 40, "b": 50},
        template="plotly_white",
    )
    return fig


def histogram_figure(ev: dict, title: str):
    import plotly.graph_objects as go  # plotly: only when a figure is drawn

    labels = [str(i) for i in range(len(ev["inferred"]))]
    fig = go.Figure(
        [
            go.Bar(x=labels, y=ev["true"], name="true"),
            go.Bar(x=labels, y=ev["inferred"], name="inferred"),
        ]
    )
    fig.update_layout(
        title={"text": plotly_text(title), "font": {"size": 13}},
        xaxis={"title": "label"},
        yaxis={"title": "share of rows"},
        barmode="group",
        height=330,
        margin={"l": 60, "r": 10, "t": 40, "b": 50},
        template="plotly_white",
    )
    return fig


def words_html(ev: dict, title: str) -> str:
    e = html.escape
    words = [str(w) for w in ev["words"]]
    hits = [bool(h) for h in ev["hits"]]
    spans = " ".join(
        f'<span class="{"hit" if h else "miss"}">{e(w)}</span>' for w, h in zip(words, hits)
    )
    n = sum(hits)
    return (
        f'<figure class="words"><figcaption>{e(title)} — {n} of {len(words)} retrieved words '
        f"are in the private text (marked)</figcaption><p>{spans}</p></figure>"
    )
