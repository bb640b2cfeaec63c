"""Picture of a ``fedwad_coreset`` run: the learned coreset atoms as 8x8 digit images, next to the
central coreset (same init and steps, exact distances) and POT's free-support barycenter.

    python scripts/coreset_figure.py RUN_DIR [--out PNG]

Writes ``RUN_DIR/plots/coreset.png`` (and ``--out`` if given). Atoms are sorted by their nearest
central atom so that columns line up.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def _aligned(rows: list[np.ndarray]) -> list[np.ndarray]:
    """Order the atoms of every row by an optimal matching to the first row's atoms."""
    from scipy.optimize import linear_sum_assignment

    ref = rows[0]
    out = [ref]
    for R in rows[1:]:
        cost = ((ref[:, None, :] - R[None, :, :]) ** 2).sum(-1)
        _, col = linear_sum_assignment(cost)
        out.append(R[col])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    res_path = args.run_dir / "results.json"
    try:
        res = json.loads(res_path.read_text())
    except (OSError, ValueError) as e:
        print(f"error: {res_path}: {e}", file=sys.stderr)
        return 2
    if res.get("protocol", {}).get("name") != "fedwad_coreset":
        print(f"error: {res_path}: not a fedwad_coreset run", file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = res["reference"]
    rows = _aligned(
        [
            np.asarray(ref["central_coreset"], dtype=float),
            np.asarray(res["outputs"]["coreset"], dtype=float),
            np.asarray(ref["free_support_coreset"], dtype=float),
        ]
    )
    w_fed = res.get("evaluation", {}).get("coreset_wasserstein", float("nan"))
    titles = [
        f"central (exact W2), W={ref['coreset_wasserstein']:.2f}",
        f"FedWAD federated, W={w_fed:.2f}",
        f"POT free-support barycenter, W={ref['free_support_wasserstein']:.2f}",
    ]
    k = rows[0].shape[0]
    side = int(round(np.sqrt(rows[0].shape[1])))
    fig, axes = plt.subplots(3, k, figsize=(1.1 * k, 4.0), squeeze=False)
    for r, (R, title) in enumerate(zip(rows, titles)):
        for j in range(k):
            ax = axes[r, j]
            ax.imshow(R[j].reshape(side, side), cmap="gray_r")
            ax.set_xticks([])
            ax.set_yticks([])
        axes[r, 0].set_title(title, fontsize=8, loc="left")
    fig.tight_layout()
    targets = [args.run_dir / "plots" / "coreset.png"] + ([args.out] if args.out else [])
    for t in targets:
        t.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(t, dpi=90)
        print(t)
    plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
