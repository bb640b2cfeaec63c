"""Answer the frontier question from a sweep's ``results.jsonl``: at each privacy budget, which
setting gives the best task utility, and what the best attack still recovers.

``python -m testbed.scoring.frontier RUN_DIR [--utility distance_accuracy]`` prints one markdown line per
setting (mean and 95 % interval over seeds of ``utility.<name>``, of the claimed
``privacy_epsilon``, and of the worst attack's normalised leakage and coverage@r next to the prior
baseline's coverage), then, per budget ε ∈ {1, 10, ∞}, the setting with the best utility among
those whose claim is at most ε. It only reads results (the report renders; this prints).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from testbed.scoring.metrics import mean_ci

__all__ = ["BUDGETS", "best_per_budget", "frontier_rows", "main", "setting_label"]

BUDGETS = (1.0, 10.0, math.inf)


def _eps(x) -> float:
    if isinstance(x, str):
        return math.inf if x == "inf" else float(x)
    return math.inf if x is None else float(x)


def setting_label(row: Mapping[str, Any]) -> str:
    """``dataset: protocol(noise)[ + defense(ε)]`` of one sweep row, from its resolved results
    (the swept ``setting`` holds only the swept paths) and the swept dataset, if any."""
    res = row["results"]
    proto = res["protocol"]
    p = proto.get("params", {})
    name = proto["name"]
    tags = [
        f"{v}={p[k]:g}"
        for k, v in (("target_epsilon", "ε"), ("noise_multiplier", "z"))
        if p.get(k) is not None
    ]
    tags += [p["covariance"]] if "covariance" in p else []
    tags += ["no debias"] if p.get("debias") is False else []
    if tags:
        name += f"({', '.join(tags)})"
    for d in res.get("defenses") or []:
        q = d.get("params", {})
        extra = f"(ε={q['target_epsilon']:g})" if q.get("target_epsilon") is not None else ""
        extra = extra or (f"({q['mode']})" if "mode" in q else "")
        extra = extra or (f"(S={q['support_size']})" if "support_size" in q else "")
        name += f" + {d['name']}{extra}"
    data = row.get("setting", {}).get("data")
    ds = data["dataset"]["name"] if data else res.get("scenario", "")
    return f"{ds}: {name}"


def frontier_rows(rows: Iterable[Mapping[str, Any]], utility: str = "distance_accuracy") -> list:
    """One dict per setting: mean/low/high of utility, epsilon, leakage, coverage over seeds."""
    groups: dict[str, list] = defaultdict(list)
    for row in rows:
        groups[setting_label(row)].append(row["results"])
    out = []
    for label, res in sorted(groups.items()):
        util = [r.get("utility", {}).get(utility) for r in res]
        eps = [_eps(r.get("privacy_epsilon")) for r in res]
        leak = [
            max((a.get("leakage", 0.0) or 0.0 for a in r.get("attacks", [])), default=0.0)
            for r in res
        ]
        cov = [
            max((a.get("coverage", 0.0) or 0.0 for a in r.get("attacks", [])), default=0.0)
            for r in res
        ]
        base = [
            max((a.get("coverage_baseline", 0.0) or 0.0 for a in r.get("attacks", [])), default=0.0)
            for r in res
        ]
        out.append(
            {
                "setting": label,
                "seeds": len(res),
                "epsilon": max(eps),
                "utility": mean_ci(util),
                "leakage": mean_ci(leak),
                "coverage": mean_ci(cov),
                "coverage_baseline": mean_ci(base),
            }
        )
    return out


def best_per_budget(table: list, budgets=BUDGETS) -> list:
    """Per budget and dataset: the setting of highest mean utility (then lowest leakage) among
    those whose claimed epsilon is at most the budget."""
    out = []
    for b in budgets:
        for ds in sorted({t["setting"].split(":")[0] for t in table}):
            ok = [
                t
                for t in table
                if t["setting"].startswith(ds + ":")
                and t["epsilon"] <= b
                and math.isfinite(t["utility"][0])
            ]
            if ok:
                # ties in utility go to the lower leakage
                best = max(ok, key=lambda t: (round(t["utility"][0], 3), -t["leakage"][0]))
                out.append((b, ds, best))
    return out


def _fmt(ci) -> str:
    m, lo, hi = ci
    if not math.isfinite(m):
        return "–"
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.scoring.frontier", description=__doc__)
    ap.add_argument("run_dir")
    ap.add_argument("--utility", default="distance_accuracy")
    a = ap.parse_args(argv)
    path = Path(a.run_dir) / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    table = frontier_rows(rows, a.utility)
    print(
        f"| setting | seeds | ε claimed | utility.{a.utility} | leakage (worst attack) | coverage@r | prior coverage |"
    )
    print("|---|---|---|---|---|---|---|")
    for t in table:
        eps = "∞" if math.isinf(t["epsilon"]) else f"{t['epsilon']:.3g}"
        print(
            f"| {t['setting']} | {t['seeds']} | {eps} | {_fmt(t['utility'])} | "
            f"{_fmt(t['leakage'])} | {_fmt(t['coverage'])} | {_fmt(t['coverage_baseline'])} |"
        )
    print()
    print("| budget ε | dataset | best utility | its leakage | its coverage@r |")
    print("|---|---|---|---|---|")
    for b, ds, t in best_per_budget(table):
        name = t["setting"].split(": ", 1)[1]
        if t["utility"][0] <= 0:
            name = "none: no setting has positive utility at this budget; e.g. " + name
        bs = "∞ (no claim)" if math.isinf(b) else f"{b:g}"
        print(
            f"| {bs} | {ds} | {name}: {_fmt(t['utility'])} | {_fmt(t['leakage'])} | {_fmt(t['coverage'])} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
