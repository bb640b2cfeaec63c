"""Static (matplotlib) twins of the report's trade-off figures, for ``plots/`` and ``report.md``."""

from __future__ import annotations

import io
import math

from testbed.report.model import pareto_front, point_id

__all__ = ["error_by_setting_png", "fig_png", "tradeoff_png", "wide"]


def fig_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def tradeoff_png(agg, err_key: str, y_key: str, y_label: str, higher_leaks: bool, title: str):
    """Scatter with 95 % interval bars, protocols as series, the Pareto front marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    keys = [k for k in agg if y_key in agg[k] and err_key in agg[k]]
    pts = []
    for k in keys:
        x, y = agg[k][err_key][0], agg[k][y_key][0]
        # both axes minimised: error, and leakage oriented so that smaller = less leakage
        pts.append((x, y if higher_leaks else -y) if math.isfinite(y) else (x, math.nan))
    series = sorted({k[0] for k in keys})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for si, s in enumerate(series):
        ks = [k for k in keys if k[0] == s]
        xs = [agg[k][err_key] for k in ks]
        ys = [agg[k][y_key] for k in ks]
        ok = [i for i in range(len(ks)) if math.isfinite(ys[i][0]) and math.isfinite(xs[i][0])]
        if not ok:
            continue
        c = colors[si % len(colors)]
        ax.errorbar(
            [xs[i][0] for i in ok],
            [ys[i][0] for i in ok],
            xerr=[[xs[i][0] - xs[i][1] for i in ok], [xs[i][2] - xs[i][0] for i in ok]],
            yerr=[[ys[i][0] - ys[i][1] for i in ok], [ys[i][2] - ys[i][0] for i in ok]],
            fmt="o",
            color=c,
            capsize=3,
            label=s,
        )
        for i in ok:  # point numbers match the "#" column of the tables
            ax.annotate(
                str(point_id(agg, ks[i])),
                (xs[i][0], ys[i][0]),
                fontsize=7,
                alpha=0.8,
                xytext=(3, 3),
                textcoords="offset points",
            )
    front = pareto_front(pts)
    if front:
        fx = [agg[keys[i]][err_key][0] for i in front]
        fy = [agg[keys[i]][y_key][0] for i in front]
        ax.plot(fx, fy, "--", color="black", lw=1, zorder=0)
        ax.scatter(fx, fy, s=140, facecolors="none", edgecolors="black", label="Pareto front")
    ax.set_xlabel(f"relative error of {err_key.split('.')[0]} (mean, 95 % CI)")
    ax.set_ylabel(y_label)
    ax.set_title(title, fontsize=10)
    if any(agg[k][err_key][0] > 0 for k in keys) and wide([agg[k][err_key][0] for k in keys]):
        ax.set_xscale("log")
    if wide([agg[k][y_key][0] for k in keys]):
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig_png(fig)


def wide(vals) -> bool:
    v = [x for x in vals if math.isfinite(x) and x > 0]
    return (
        len(v) >= 2
        and max(v) / min(v) > 50
        and len(v) == len([x for x in vals if math.isfinite(x)])
    )


def error_by_setting_png(agg, err_key: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(k for k in agg if err_key in agg[k])
    fig, ax = plt.subplots(figsize=(6.4, 0.35 * len(keys) + 1.4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    series = sorted({k[0] for k in keys})
    for i, k in enumerate(keys):
        m, lo, hi = agg[k][err_key]
        c = colors[series.index(k[0]) % len(colors)]
        ax.errorbar([m], [i], xerr=[[m - lo], [hi - m]], fmt="o", color=c, capsize=3)
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([f"#{point_id(agg, k)} {k[0]}: {k[1]}"[:70] for k in keys], fontsize=7)
    ax.set_xlabel(f"relative error of {err_key.split('.')[0]} (mean, 95 % CI over seeds)")
    ax.set_title("accuracy by setting", fontsize=10)
    if wide([agg[k][err_key][0] for k in keys]):
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    return fig_png(fig)
