"""Summarise a distillation sweep (``testbed run scenarios/distill_*.yaml --out DIR``).

Prints, per sweep point, every estimate and attack metric as mean [95 % interval] over seeds
(``testbed.scoring.metrics.mean_ci``), then paired per-seed differences (same seed = same data split and
teachers) for Sinkhorn - entropy and E - A when both are in the sweep.

    python scripts/distill_summary.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from testbed.scoring.metrics import mean_ci

ATTACK_KEYS = (
    "auc",
    "tpr_at_1pct_fpr",
    "advantage",
    "epsilon_lb",
    "claimed_epsilon",
    "tv",
    "tv_baseline",
    "baseline_auc",
)


def _f(v):
    if v is None:
        return np.nan
    if isinstance(v, str):
        return float(v.replace("inf", "inf"))
    return float(v)


def _fmt(vals) -> str:
    m, lo, hi = mean_ci([v for v in vals if np.isfinite(v)])
    if not any(np.isfinite(v) for v in vals):
        return "inf" if any(np.isinf(v) for v in vals) else "-"
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]"


def load(run_dir: Path) -> list[dict]:
    return [
        json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines() if line
    ]


def summarise(rows: list[dict]) -> dict:
    points: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    per_seed: dict[tuple, dict[str, float]] = {}
    for r in rows:
        res = r["results"]
        lab = r["label"]
        for k, v in res["estimates"].items():
            points[lab][k].append(_f(v))
            per_seed[(lab, r["seed"], k)] = _f(v)
        for k, v in res["reference"].items():
            points[lab]["reference_" + k].append(_f(v))
        seen: dict[tuple, int] = defaultdict(int)
        for a in res.get("attacks", []):
            tag = a["attack"] + (f"[{a['method']}]" if a.get("method") else "")
            seen[(tag, a["target"])] += 1
            tag += f"#{seen[(tag, a['target'])]}"  # n-th spec of this attack in the scenario
            for k in ATTACK_KEYS:
                if k in a:
                    points[lab][f"{tag}.{k}"].append(_f(a[k]))
        for p, v in res.get("privacy", {}).items():
            points[lab][f"claimed_eps[{p}]"].append(_f(v["epsilon"]))
    return points, per_seed


def paired_values(per_seed, a_lab: str, b_lab: str, metric: str) -> list[float]:
    """Per-seed differences a - b of ``metric`` over the seeds both settings ran (same seed = same
    data split and teachers), in seed order."""
    seeds = sorted({s for (lab, s, m) in per_seed if lab == a_lab and m == metric})
    return [
        per_seed[(a_lab, s, metric)] - per_seed[(b_lab, s, metric)]
        for s in seeds
        if (b_lab, s, metric) in per_seed
    ]


def paired(per_seed, a_lab: str, b_lab: str, metric: str) -> str:
    d = paired_values(per_seed, a_lab, b_lab, metric)
    return _fmt(d) + f" (n={len(d)})"


def main(argv: list[str]) -> int:
    for d in argv:
        rows = load(Path(d))
        points, per_seed = summarise(rows)
        print(f"## {d}: {len(rows)} cells")
        for lab, metrics in points.items():
            print(f"- {lab}")
            for k, vals in metrics.items():
                print(f"    {k}: {_fmt(vals)}")
        labels = list(points)
        for metric in ("macro_f1", "accuracy", "semantic_distance"):
            for w in "ADUE":
                s, e = (
                    f"protocol.params.loss=sinkhorn, protocol.params.weighting={w}",
                    f"protocol.params.loss=entropy, protocol.params.weighting={w}",
                )
                if s in labels and e in labels:
                    print(
                        f"  sinkhorn - entropy, weighting {w}, {metric}: {paired(per_seed, s, e, metric)}"
                    )
            for loss in ("sinkhorn", "entropy"):
                e, a = (
                    f"protocol.params.loss={loss}, protocol.params.weighting=E",
                    f"protocol.params.loss={loss}, protocol.params.weighting=A",
                )
                if e in labels and a in labels:
                    print(f"  E - A, {loss}, {metric}: {paired(per_seed, e, a, metric)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
