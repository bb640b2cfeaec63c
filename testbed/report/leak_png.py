"""Static PNG renditions of the leakage pictures (for papers; the HTML report's are interactive).

Each function takes the arrays :mod:`testbed.scoring.evidence` saved for one attack row (``leakage.npz``)
and a caption, and returns the figure drawn with matplotlib as ``{"png": 300 dpi, "pdf", "svg"}`` (Agg backend, no display needed):
private digits over their nearest reconstructions, the 2-D PCA projection of the private and
reconstructed clouds, the membership ROC curve on log axes, the inferred vs true label histogram,
and the retrieved words with hits marked. ``testbed.report.threats`` writes them to ``plots/leak_*.png``
beside the report.
"""

from __future__ import annotations

import textwrap

import numpy as np

from testbed.report.static_figures import render
from testbed.scoring.names import Metric

__all__ = ["cloud_png", "digits_png", "histogram_png", "roc_png", "words_png"]


def _plt():
    import matplotlib  # matplotlib: only when a figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when a figure is drawn

    return plt


def _png(fig) -> dict[str, bytes]:
    return render(fig)


def _title(ax, title: str) -> None:
    ax.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=9)


def digits_png(ev: dict, title: str) -> dict[str, bytes]:
    """Private 8x8 digits (top row) and their nearest reconstructions (bottom row)."""
    plt = _plt()
    side = int(ev["image_side"])
    orig, rec = np.asarray(ev["orig"]), np.asarray(ev["recon"])
    dist = np.asarray(ev["dist"])
    k = len(orig)
    lo, hi = float(min(orig.min(), rec.min())), float(max(orig.max(), rec.max()))
    fig, axes = plt.subplots(
        2, k, figsize=(1.1 * k + 0.8, 2.9), squeeze=False, layout="constrained"
    )
    for j in range(k):
        for i, img in enumerate((orig[j], rec[j])):
            ax = axes[i][j]
            ax.imshow(img.reshape(side, side), cmap="Greys", vmin=lo, vmax=hi)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[0][j].set_title(f"d={dist[j]:.2g}", fontsize=8)
    axes[0][0].set_ylabel("private", fontsize=8)
    axes[1][0].set_ylabel("reconstructed", fontsize=8)
    lines = textwrap.wrap(title, 100)
    # above the per-digit distances (bbox_inches="tight" keeps it in the file)
    fig.suptitle("\n".join(lines), fontsize=9, y=1.0 + 0.07 * len(lines))
    return _png(fig)


def cloud_png(ev: dict, title: str) -> dict[str, bytes]:
    """PCA (fitted on the private rows) of private and reconstructed points."""
    plt = _plt()
    p, r = np.asarray(ev["cloud_private"]), np.asarray(ev["cloud_recon"])
    ex = np.asarray(ev.get("pca_explained", [np.nan, np.nan]), dtype=np.float64)
    fig, ax = plt.subplots(figsize=(6.0, 4.4), layout="constrained")
    ax.scatter(p[:, 0], p[:, 1], s=10, c="#888", alpha=0.6, label="private rows")
    ax.scatter(r[:, 0], r[:, 1], s=18, c="#d62728", marker="x", label="reconstructed")
    ax.set_xlabel(f"PC 1 ({100 * ex[0]:.0f} % of the private variance)")
    ax.set_ylabel(f"PC 2 ({100 * ex[1]:.0f} %)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _title(ax, title)
    return _png(fig)


def roc_png(ev: dict, title: str) -> dict[str, bytes]:
    """Membership ROC on log axes, floored at one over the non-members (the smallest FPR)."""
    plt = _plt()
    floor = 1.0 / max(int(ev.get(Metric.N_NONMEMBERS, 100)), 1)
    fig, ax = plt.subplots(figsize=(5.2, 4.4), layout="constrained")
    for pre, name, ls in (("", "attack", "-"), ("baseline_", "prior-only baseline", ":")):
        if f"{pre}fpr" not in ev:
            continue
        f, t = np.asarray(ev[f"{pre}fpr"]), np.asarray(ev[f"{pre}tpr"])
        ax.step(np.maximum(f, floor), np.maximum(t, floor), where="post", ls=ls, label=name)
    grid = np.geomspace(floor, 1, 20)
    ax.plot(grid, grid, "--", color="#aaa", label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("false positive rate (log)")
    ax.set_ylabel("true positive rate (log)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    _title(ax, title)
    return _png(fig)


def histogram_png(ev: dict, title: str) -> dict[str, bytes]:
    """Inferred vs true label histogram, grouped bars."""
    plt = _plt()
    true, inf = np.asarray(ev["true"]), np.asarray(ev["inferred"])
    x = np.arange(len(inf))
    fig, ax = plt.subplots(figsize=(6.0, 3.8), layout="constrained")
    ax.bar(x - 0.2, true, width=0.4, label="true")
    ax.bar(x + 0.2, inf, width=0.4, label="inferred")
    ax.set_xticks(x)
    ax.set_xlabel("label")
    ax.set_ylabel("share of rows")
    ax.legend(fontsize=8)
    _title(ax, title)
    return _png(fig)


def words_png(ev: dict, title: str, per_line: int = 8) -> dict[str, bytes]:
    """The retrieved words in order, those in the private text boxed in green."""
    plt = _plt()
    words = [str(w) for w in ev["words"]]
    hits = [bool(h) for h in ev["hits"]]
    lines = max(1, -(-len(words) // per_line))
    fig, ax = plt.subplots(figsize=(9.0, 0.9 + 0.32 * lines), layout="constrained")
    ax.set_axis_off()
    ax.set_xlim(0, per_line)
    ax.set_ylim(lines, -0.2)
    for i, (w, h) in enumerate(zip(words, hits)):
        box = {"boxstyle": "round,pad=0.2", "fc": "#c8f0c8", "ec": "#2a7a2a"} if h else None
        ax.text(
            i % per_line + 0.05,
            i // per_line + 0.5,
            w,
            fontsize=9,
            fontweight="bold" if h else "normal",
            color="#111" if h else "#777",
            va="center",
            bbox=box,
        )
    _title(ax, f"{title} — {sum(hits)} of {len(words)} retrieved words are in the private text")
    return _png(fig)
