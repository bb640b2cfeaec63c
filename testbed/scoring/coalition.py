"""The coalition rule (DESIGN.md, "Metrics"; issue 22): a coalition never scores above its members
for the same messages unless it sees more.

A coalition (the server with some clients, or clients among themselves) knows before any message
everything each member knows: its prior-only attacker is at least as good as the best member's.
Scored against its own prior-only guess (a member's rows, which for skewed data can be a poor
guess of another party's), the same reconstruction the server makes alone would read a larger
leakage for the coalition: the figure would rise because the baseline got worse, not because the
coalition learnt more. So each coalition row is re-scored against the **best** prior-only
baseline among the coalition and its members for the same attack and target (the smallest
``w2_baseline``; the largest ``baseline_auc``), and then the coalition's figure is at least what
each member achieves alone (it can always run that member's attack). A coalition can then score
above every member only with a reconstruction (or membership ranking) of its own that is better —
what seeing more messages, or combining a member's data with another's messages, buys.

Works on the scorecard's rows (``testbed.plugins.scorecard``): dicts with ``threat``,
``attack``, ``target``, ``metric``, ``value``, ``verdict``, ``baseline``, ``text`` and the
numeric ``metrics``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from testbed.scoring.metrics import LEAKAGE_METRICS
from testbed.scoring.verdict import DISTRIBUTIONAL, MEMBERSHIP, RECORD, verdict

__all__ = ["apply_coalition_rule", "rank"]


def rank(row: Mapping[str, Any]) -> tuple[int, float]:
    """Sort key of a scorecard row, larger = worse: record leaks, then membership, then
    distributional inference; within a kind the figure (negated where smaller = more leakage)."""
    order = {RECORD: 3, MEMBERSHIP: 2, DISTRIBUTIONAL: 1}.get(row.get("verdict"), 0)
    v = row.get("value")
    if not (isinstance(v, (int, float)) and math.isfinite(v)):
        return order, -math.inf
    return order, (-float(v) if LEAKAGE_METRICS.get(row.get("metric"), True) is False else float(v))


def _num(m: Mapping[str, Any], key: str) -> float | None:
    v = m.get(key)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def _or(v: float | None, default: float) -> float:
    return default if v is None else v


def _best_baseline(mine: dict, members: list[dict]) -> tuple[dict, str | None]:
    """``mine`` (a coalition row's metrics) re-scored against the best prior-only baseline among
    itself and ``members`` (the members' metrics for the same attack and target, each with its
    ``threat``); returns the metrics and the member whose baseline was taken (None: its own)."""
    out, taken = dict(mine), None
    w2, wb = _num(mine, "w2"), _num(mine, "w2_baseline")
    if w2 is not None and wb is not None:
        best = min(
            members, key=lambda m: _or(_num(m["metrics"], "w2_baseline"), math.inf), default=None
        )
        bb = None if best is None else _num(best["metrics"], "w2_baseline")
        if bb is not None and bb < wb:
            ratio = w2 / bb if bb > 0 else math.inf
            raw = 1.0 - ratio
            out.update(w2_baseline=bb, w2_ratio=ratio, leakage_raw=raw)
            out["leakage"] = float(np.clip(raw, 0.0, 1.0))
            out["leakage_clipped"] = float(out["leakage"] != raw)
            m = best["metrics"]
            same = _num(m, "w2") == w2 and _num(m, "w2_population") == _num(mine, "w2_population")
            if same and _num(m, "leakage_population") is not None:
                out["leakage_population"] = m["leakage_population"]  # the same output: exact
            else:
                out.pop("leakage_population", None)  # against another baseline: not recomputable
            taken = best["threat"]
    auc_b = _num(mine, "baseline_auc")
    if auc_b is not None:
        best = max(
            members, key=lambda m: _or(_num(m["metrics"], "baseline_auc"), -math.inf), default=None
        )
        bb = None if best is None else _num(best["metrics"], "baseline_auc")
        if bb is not None and bb > auc_b:
            out["baseline_auc"], taken = bb, best["threat"]
    return out, taken


def _rescored(row: dict, members: list[dict]) -> dict:
    metrics, taken = _best_baseline(row["metrics"], members)
    if taken is None:
        return row
    if row["verdict"] == RECORD:  # the record figure is measured against population rows
        return {**row, "metrics": metrics, "coalition_rule": f"baseline of {taken}"}
    v = verdict(metrics)
    return {
        **row,
        "metric": v.metric,
        "value": v.value,
        "verdict": v.kind,
        "baseline": f"{v.baseline} (the best prior-only baseline among the coalition: {taken}'s)",
        "text": v.text,
        "metrics": metrics,
        "coalition_rule": f"baseline of {taken}",
    }


def apply_coalition_rule(rows: Sequence[dict], threats: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The scorecard's rows with every coalition's rows re-scored against its best member's
    baseline, and, where a member alone scores higher on the same attack and target, that
    member's figure in the coalition's row (``coalition_rule`` says which). Other rows pass
    unchanged."""
    by_key: dict[tuple[str, str, str], dict] = {
        (r["threat"], r["attack"], r["target"]): r for r in rows
    }
    labels = {t["label"] for t in threats}
    members_of = {
        t["label"]: [m for m in (t["observer"], *t["colluders"]) if m in labels]
        for t in threats
        if t["colluders"]
    }
    out = []
    for r in rows:
        members = members_of.get(r["threat"])
        if not members:
            out.append(r)
            continue
        mine = [
            by_key[(m, r["attack"], r["target"])]
            for m in members
            if (m, r["attack"], r["target"]) in by_key
        ]
        new = _rescored(r, mine)
        best = max(mine, key=rank, default=None)
        if best is not None and rank(best) > rank(new):
            keep = ("threat", "observer", "colluders")
            new = {
                **{k: v for k, v in best.items() if k not in keep},
                **{k: r[k] for k in keep},
                "coalition_rule": f"{best['threat']} alone scores higher",
            }
        out.append(new)
    return out
