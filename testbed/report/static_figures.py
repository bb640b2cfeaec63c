"""Static (matplotlib) twins of the report's trade-off figures, paper-ready: constrained layout,
point labels placed so that none overlaps another (coinciding points share one label), exact
estimates marked at the axis floor; each figure as a 300 dpi PNG, a vector PDF and an SVG
(:func:`render`, byte-identical on a re-render)."""

from __future__ import annotations

import io
import math
import textwrap
from typing import Any

from testbed.report.axes import Axis, error_axis, is_exact, value_axis
from testbed.report.model import (
    UNIT_METRICS,
    error_title,
    pareto_front,
    point_id,
    settings_in_order,
)

__all__ = [
    "DPI",
    "error_by_setting_fig",
    "error_by_setting_png",
    "place_labels",
    "render",
    "tradeoff_fig",
    "tradeoff_png",
]

#: resolution of the PNGs (print quality)
DPI = 300
#: label offsets tried in turn, in points from the marker (right/left, above/below, further out)
_OFFSETS = [(s * 4, dy) for dy in (4, -11, 13, -20, 22, -29, 31, -38) for s in (1, -1)]


def _plt():
    import matplotlib  # matplotlib: only when a figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when a figure is drawn

    return plt


def render(fig) -> dict[str, bytes]:
    """A figure as ``{"png": 300 dpi, "pdf": vector, "svg": vector}``; no dates inside, so the
    same figure gives the same bytes."""
    import matplotlib  # matplotlib: only when a figure is drawn

    out = {}
    with matplotlib.rc_context({"svg.hashsalt": "testbed", "pdf.compression": 6}):
        for ext, meta in (
            ("png", {"Software": None}),
            ("pdf", {"CreationDate": None}),
            ("svg", {"Date": None}),
        ):
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, dpi=DPI, metadata=meta)
            out[ext] = buf.getvalue()
    _plt().close(fig)
    return out


def place_labels(ax, points: list[tuple[float, float, str]]) -> list[Any]:
    """Label data points without overlaps: points within 4 px of each other share one label
    ("3, 5, 7"); each label takes the first offset around its point where it overlaps no label
    placed before. Returns the annotations."""
    fig = ax.figure
    fig.canvas.draw()  # constrained layout fixes the axes: display coordinates are final
    renderer = fig.canvas.get_renderer()
    groups: list[list] = []
    for x, y, text in points:
        px, py = ax.transData.transform((x, y))
        for g in groups:
            if abs(g[0] - px) <= 4 and abs(g[1] - py) <= 4:
                g[2].append(text)
                break
        else:
            groups.append([px, py, [text], (x, y)])
    placed, anns = [], []
    for _px, _py, texts, xy in sorted(groups, key=lambda g: (g[0], g[1])):
        label = ", ".join(sorted(texts, key=lambda t: (len(t), t)))
        ann = None
        for dx, dy in _OFFSETS:
            if ann is not None:
                ann.remove()
            ann = ax.annotate(
                label,
                xy,
                xytext=(dx, dy),
                textcoords="offset points",
                fontsize=7,
                ha="left" if dx > 0 else "right",
                va="bottom",
                annotation_clip=False,
            )
            ann.set_in_layout(False)
            box = ann.get_window_extent(renderer)
            if not any(box.overlaps(b) for b in placed):
                break
        placed.append(ann.get_window_extent(renderer))
        anns.append(ann)
    return anns


def _set_axis(ax, which: str, a: Axis) -> None:
    if a.type == "log":
        getattr(ax, f"set_{which}scale")("log")
    if a.range:
        getattr(ax, f"set_{which}lim")(*a.range)
    elif a.nonnegative and a.type == "linear":  # after the points: the far end stays autoscaled
        getattr(ax, f"set_{which}lim")(0.0, None)


def tradeoff_fig(agg, err_key: str, view, err_label: str | None = None):
    """Scatter with 95 % interval bars, protocols as series, the Pareto front dashed, exact
    estimates as stars labelled "exact" at the error axis' floor."""
    plt = _plt()
    y_key = view.y_key
    keys = [
        k
        for k in agg
        if y_key in agg[k]
        and err_key in agg[k]
        and math.isfinite(agg[k][y_key][0])
        and math.isfinite(agg[k][err_key][0])
    ]
    xa = error_axis([agg[k][err_key][0] for k in keys])
    ya = value_axis([agg[k][y_key][0] for k in keys], y_key.rsplit(".", 1)[-1] in UNIT_METRICS)
    fig, ax = plt.subplots(figsize=(6.4, 4.6), layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels = []
    floored = []  # (x, y) of values below the leakage axis' floor, drawn at it
    for si, s in enumerate(sorted({k[0] for k in keys})):
        c = colors[si % len(colors)]
        ks = sorted(k for k in keys if k[0] == s)
        inexact = [k for k in ks if not is_exact(agg[k][err_key][0])]
        if inexact:
            xs = [agg[k][err_key] for k in inexact]
            ys = [agg[k][y_key] for k in inexact]
            placed = [ya.place(y[0]) for y in ys]
            ax.errorbar(
                [xa.place(x[0])[0] for x in xs],
                [y for y, _ in placed],
                xerr=[[max(0.0, x[0] - x[1]) for x in xs], [max(0.0, x[2] - x[0]) for x in xs]],
                yerr=[
                    [0.0 if moved else max(0.0, y[0] - y[1]) for y, (_, moved) in zip(ys, placed)],
                    [max(0.0, y[2] - y[0]) for y in ys],
                ],
                fmt="o",
                color=c,
                capsize=3,
                label=s,
            )
            floored += [(xa.place(x[0])[0], y) for x, (y, moved) in zip(xs, placed) if moved]
        exact = [k for k in ks if k not in inexact]
        if exact:
            ax.scatter(
                [xa.place(agg[k][err_key][0])[0] if xa.floor else 0.0 for k in exact],
                [ya.place(agg[k][y_key][0])[0] for k in exact],
                marker="*",
                s=140,
                color=c,
                label=f"{s} (exact)" if inexact else s,
                zorder=3,
            )
        for k in ks:  # point numbers match the "#" column of the tables
            x = agg[k][err_key][0]
            x = (xa.place(x)[0] if xa.floor else 0.0) if is_exact(x) else xa.place(x)[0]
            tag = f"{point_id(agg, k)}" + (" exact" if is_exact(agg[k][err_key][0]) else "")
            labels.append((x, ya.place(agg[k][y_key][0])[0], tag))
    if floored:  # as the interactive figure: a triangle, and what it means in the legend
        ax.scatter(
            [x for x, _ in floored],
            [y for _, y in floored],
            marker="v",
            s=90,
            facecolors="white",
            edgecolors="black",
            zorder=4,
            label=f"below {ya.floor:.3g}: drawn at the axis floor",
        )
    sign = 1 if view.higher_leaks else -1
    front = pareto_front([(agg[k][err_key][0], agg[k][y_key][0] * sign) for k in keys])
    if front:
        fx = [xa.place(agg[keys[i]][err_key][0])[0] for i in front]
        fy = [ya.place(agg[keys[i]][y_key][0])[0] for i in front]
        ax.plot(fx, fy, "--", color="black", lw=1, zorder=0, label="Pareto front")
    ax.set_xlabel("\n".join(textwrap.wrap(error_title(err_key, err_label), 90)))
    ax.set_ylabel(view.y_label)
    ax.set_title("\n".join(textwrap.wrap(view.title, 70)), fontsize=9)
    _set_axis(ax, "x", xa)
    _set_axis(ax, "y", ya)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        fig.legend(loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    place_labels(ax, labels)
    return fig


def tradeoff_png(agg, err_key: str, view, err_label: str | None = None) -> dict[str, bytes]:
    """:func:`tradeoff_fig` rendered (PNG, PDF, SVG)."""
    return render(tradeoff_fig(agg, err_key, view, err_label))


def error_by_setting_png(agg, err_key: str, err_label: str | None = None) -> dict[str, bytes]:
    """:func:`error_by_setting_fig` rendered (PNG, PDF, SVG)."""
    return render(error_by_setting_fig(agg, err_key, err_label))


def error_by_setting_fig(agg, err_key: str, err_label: str | None = None):
    """Relative error per setting with its interval; long setting names wrap, never truncated."""
    plt = _plt()
    keys = [k for k in settings_in_order(agg) if err_key in agg[k]]
    names = ["\n".join(textwrap.wrap(f"#{point_id(agg, k)} {k[0]}: {k[1]}", 48)) for k in keys]
    lines = sum(n.count("\n") + 1 for n in names)
    fig, ax = plt.subplots(
        figsize=(7.2, 0.22 * lines + 0.25 * len(keys) + 1.2), layout="constrained"
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    series = sorted({k[0] for k in keys})
    xa = error_axis([agg[k][err_key][0] for k in keys])
    for i, k in enumerate(keys):
        m, lo, hi = agg[k][err_key]
        c = colors[series.index(k[0]) % len(colors)]
        x, moved = xa.place(m)
        if is_exact(m):
            ax.scatter([x if xa.floor else 0.0], [i], marker="*", s=120, color=c)
        else:
            ax.errorbar(
                [x],
                [i],
                xerr=[[0 if moved else max(0.0, m - lo)], [max(0.0, hi - m)]],
                fmt="o",
                color=c,
                capsize=3,
            )
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    title = error_title(err_key, err_label, interval="95 % CI over seeds; ★ exact")
    ax.set_xlabel("\n".join(textwrap.wrap(title, 90)))
    ax.set_title("accuracy by setting", fontsize=10)
    _set_axis(ax, "x", xa)
    ax.grid(alpha=0.3)
    return fig
