"""The leakage-vs-accuracy report: renders a run directory's results, never recomputes them.

``write_report(run_dir)`` reads ``results.jsonl`` (a sweep: one row per cell) or ``results.json``
(a single run) and writes

- ``report.html`` — one self-contained file: a headline (per protocol the best accuracy at each
  leakage level, the worst leak found, by which attack and observer, a one-sentence verdict), then
  interactive plotly figures (plotly's JavaScript inlined once; no network request), tables;
- ``report.md`` — the same tables in Markdown, static matplotlib plots in ``plots/*.png``;
- ``results.csv`` — one row per cell, every scalar metric in a column.

Everything shown comes from the files: accuracy and transcript sizes from each cell's results,
claimed epsilon from the privacy ledger's summary, audited epsilon lower bounds from attack rows'
``eps_lower``. The only arithmetic is aggregation over seeds (mean and 95 % Student-t interval,
:func:`testbed.scoring.metrics.mean_ci`) and the Pareto front of the aggregated points.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.exchange.bus import atomic_write_bytes
from testbed.scoring.metrics import LEAKAGE_METRICS as _SCORER_LEAKAGE
from testbed.scoring.metrics import mean_ci

__all__ = ["LEAKAGE_METRICS", "load_rows", "pareto_front", "write_report"]

#: leakage metric -> True when a larger value means more leakage: the scorer's own list
#: (testbed.scoring.metrics.METRIC_KEYS), so every leakage key it writes reaches a table and a plot
LEAKAGE_METRICS: dict[str, bool] = dict(_SCORER_LEAKAGE)
_NOT_METRICS = {"attack", "label", "target", "observer", "colluders", "kind", "note"}
#: metrics that live in [0, 1]: their intervals over seeds are clipped to that range
_UNIT_METRICS = {
    "leakage",
    "coverage",
    "exact_recovery",
    "matching_rate",
    "precision_at_k",
    "auc",
    "tpr_at_1pct_fpr",
    "tpr_at_0_1pct_fpr",
    "advantage",
    "tv",
    "matching_rate_any",
}
#: the worst case over every attack and target of a cell, so protocols attacked by different
#: attacks share one plot (raw w2 is left out: its scale is the data's, not comparable)
ANY_ATTACK = "any_attack"


def _f(x: Any) -> float:
    """JSON value -> float (None -> nan, 'inf' -> inf); non-numbers -> nan."""
    if x is None:
        return math.nan
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return math.nan
    return math.nan


# ----------------------------------------------------------------------------- loading
def load_rows(run_dir: Path) -> tuple[list[dict], dict]:
    """Rows (one per cell) and run information of a run directory."""
    run_dir = Path(run_dir)
    info: dict[str, Any] = {}
    if (run_dir / "run_info.json").is_file():
        info = json.loads((run_dir / "run_info.json").read_text())
    if (run_dir / "results.jsonl").is_file():
        rows = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines() if x]
        info["kind"] = "sweep"
        for row in rows:  # rows of `testbed attack` re-runs saved in each cell
            _merge_reruns(row, run_dir / "cells" / str(row.get("cell", "")))
        if (run_dir / "sweep.json").is_file():
            info["sweep"] = json.loads((run_dir / "sweep.json").read_text())
        if (run_dir / "scenario.yaml").is_file():
            info["scenario_text"] = (run_dir / "scenario.yaml").read_text()
        return rows, info
    if (run_dir / "results.json").is_file():
        res = json.loads((run_dir / "results.json").read_text())
        info["kind"] = "single"
        if (run_dir / "resolved.yaml").is_file():
            info["scenario_text"] = (run_dir / "resolved.yaml").read_text()
        row = {
            "cell": res.get("config_hash", ""),
            "seed": res.get("seed"),
            "setting": {},
            "labels": {},
            "label": "base",
            "results": res,
        }
        _merge_reruns(row, run_dir)
        return [row], info
    raise TestbedError(f"{run_dir}: no results.json or results.jsonl (not a run directory)")


def _merge_reruns(row: dict, cell_dir: Path) -> None:
    """Append the attack rows of ``testbed attack`` re-runs (``attacks-*.json``) to a row."""
    from testbed.run.rerun import saved_attack_rows

    extra = saved_attack_rows(cell_dir)
    if extra:
        row["results"] = {**row["results"], "attacks": [*row["results"].get("attacks", []), *extra]}


def _series(row: dict) -> str:
    labels = row.get("labels") or {}
    if "protocol" in labels:
        return labels["protocol"]
    return row["results"].get("protocol", {}).get("name", "?")


def _point(row: dict) -> str:
    labels = {k: v for k, v in (row.get("labels") or {}).items() if k != "protocol"}
    if len(labels) == 1:
        return next(iter(labels.values()))
    return ", ".join(f"{k}={v}" for k, v in labels.items()) or "base"


def _attack_metrics(res: dict) -> dict[str, float]:
    """``attack[target].metric`` -> value, plus worst case over targets as ``attack.metric``."""
    out: dict[str, float] = {}
    worst: dict[str, list[float]] = defaultdict(list)
    for a in res.get("attacks") or []:
        for k, v in a.items():
            if k in _NOT_METRICS:
                continue
            x = _f(v)
            if math.isnan(x) and v is not None:
                continue
            col = a.get("label") or a.get("attack")  # one column set per attack configuration
            out[f"{col}[{a.get('target')}].{k}"] = x
            worst[f"{col}.{k}"].append(x)
    for key, xs in list(worst.items()):
        metric = key.rsplit(".", 1)[1]
        if metric in LEAKAGE_METRICS and metric != "w2":
            worst[f"{ANY_ATTACK}.{metric}"].extend(xs)
    for key, xs in worst.items():
        metric = key.rsplit(".", 1)[1]
        xs = [x for x in xs if not math.isnan(x)]
        if xs:
            out[key] = max(xs) if LEAKAGE_METRICS.get(metric, True) else min(xs)
    return out


def _claimed(res: dict) -> dict[str, float]:
    """Claimed epsilon per party; a party no mechanism protects has no guarantee (inf)."""
    out = {p: math.inf for p in res.get("parties") or {}}
    out.update({p: _f(v.get("epsilon")) for p, v in (res.get("privacy") or {}).items()})
    return out


def flatten(row: dict) -> dict[str, Any]:
    """One CSV row: identifiers and every scalar metric of a cell."""
    res = row["results"]
    out: dict[str, Any] = {
        "cell": row.get("cell", ""),
        "protocol": res.get("protocol", {}).get("name"),
        "mode": res.get("protocol", {}).get("mode"),
        "series": _series(row),
        "setting": _point(row),
        "seed": row.get("seed"),
    }
    for path, v in (row.get("setting") or {}).items():
        out[f"setting:{path}"] = json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
    for q, acc in (res.get("accuracy") or {}).items():
        out[f"{q}.estimate"] = _f(acc.get("estimate"))
        out[f"{q}.exact"] = _f(acc.get("exact"))
        out[f"{q}.relative_error"] = _f(acc.get("relative_error"))
    tr = res.get("transcript") or {}
    out["messages"] = tr.get("messages")
    out["bytes"] = tr.get("bytes")
    ov = res.get("observer_view") or {}
    out["observer"] = ov.get("observer")
    out["observer_messages"] = ov.get("messages")
    out["observer_bytes"] = ov.get("bytes")
    for p, e in _claimed(res).items():
        out[f"eps_claimed[{p}]"] = e
    out.update(_attack_metrics(res))
    return out


def _error_key(rows: list[dict]) -> str | None:
    for r in rows:
        acc = r["results"].get("accuracy") or {}
        if acc:
            return next(iter(acc))
    return None


# ----------------------------------------------------------------------------- aggregation
def _aggregate(rows: list[dict]) -> dict[tuple[str, str], dict[str, Any]]:
    """(series, point) -> {"n": seeds, metric: (mean, lo, hi)} over the cells' seeds."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(_series(r), _point(r))].append(flatten(r))
    out = {}
    for key, flats in groups.items():
        agg: dict[str, Any] = {"n": len(flats), "seeds": [f["seed"] for f in flats]}
        names = sorted({k for f in flats for k, v in f.items() if isinstance(v, (int, float))})
        for k in names:
            if k in ("seed",):
                continue
            vals = [_f(f.get(k)) for f in flats]
            if all(math.isinf(v) and v > 0 for v in vals):
                agg[k] = (math.inf, math.inf, math.inf)
            else:
                m, lo, hi = mean_ci(vals)
                if k.rsplit(".", 1)[-1] in _UNIT_METRICS and math.isfinite(m):
                    lo, hi = max(lo, 0.0), min(hi, 1.0)
                agg[k] = (m, lo, hi)
        out[key] = agg
    return out


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points not dominated when both coordinates are minimised."""
    idx = []
    for i, (x, y) in enumerate(points):
        if math.isnan(x) or math.isnan(y):
            continue
        dominated = any(
            (x2 <= x and y2 <= y) and (x2 < x or y2 < y)
            for j, (x2, y2) in enumerate(points)
            if j != i and not (math.isnan(x2) or math.isnan(y2))
        )
        if not dominated:
            idx.append(i)
    return sorted(idx, key=lambda i: points[i][0])


# ----------------------------------------------------------------------------- plots
def _fig_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _plot_tradeoff(agg, err_key: str, y_key: str, y_label: str, higher_leaks: bool, title: str):
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
                str(_point_id(agg, ks[i])),
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
    if any(agg[k][err_key][0] > 0 for k in keys) and _wide([agg[k][err_key][0] for k in keys]):
        ax.set_xscale("log")
    if _wide([agg[k][y_key][0] for k in keys]):
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _fig_png(fig)


def _point_id(agg, key) -> int:
    return sorted(agg).index(key) + 1


def _wide(vals) -> bool:
    v = [x for x in vals if math.isfinite(x) and x > 0]
    return (
        len(v) >= 2
        and max(v) / min(v) > 50
        and len(v) == len([x for x in vals if math.isfinite(x)])
    )


def _plot_error_by_setting(agg, err_key: str):
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
    ax.set_yticklabels([f"#{_point_id(agg, k)} {k[0]}: {k[1]}"[:70] for k in keys], fontsize=7)
    ax.set_xlabel(f"relative error of {err_key.split('.')[0]} (mean, 95 % CI over seeds)")
    ax.set_title("accuracy by setting", fontsize=10)
    if _wide([agg[k][err_key][0] for k in keys]):
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    return _fig_png(fig)


# ----------------------------------------------------------------------------- interactive plots
#: a log axis shows at most this many decades below its largest value; smaller values (e.g. an
#: exact estimate's 1e-15 rounding error) are drawn at the floor and flagged in their hover text
_LOG_DECADES = 4


def _axis(vals: list[float]) -> tuple[str, float | None]:
    """('log'|'linear', floor): log only when the positive values span more than 50x."""
    v = [x for x in vals if math.isfinite(x)]
    pos = [x for x in v if x > 0]
    if len(pos) >= 2 and len(pos) == len(v) and max(pos) / min(pos) > 50:
        return "log", max(min(pos), max(pos) / 10**_LOG_DECADES)
    return "linear", None


def _clip(x: float, floor: float | None) -> tuple[float, bool]:
    if floor is not None and x < floor:
        return floor, True
    return x, False


def _hover(agg, key, err_key: str, y_key: str) -> str:
    a = agg[key]
    lines = [
        f"<b>{html.escape(key[0])}</b> #{_point_id(agg, key)}",
        f"setting: {html.escape(str(key[1]))}",
        f"seeds: {', '.join(map(str, a.get('seeds', [])))}",
        f"{html.escape(err_key)}: {_ci(a[err_key])}",
        f"{html.escape(y_key)}: {_ci(a[y_key])}",
    ]
    for k in sorted(a):  # the cell's other headline numbers
        if k.startswith(("eps_claimed[", ANY_ATTACK + ".")) and k != y_key:
            lines.append(f"{html.escape(k)}: {_ci(a[k])}")
    if "bytes" in a:
        lines.append(f"observer bytes: {_fmt(a.get('observer_bytes', (math.nan,))[0])}")
    return "<br>".join(lines)


def _plotly_tradeoff(agg, err_key: str, y_key: str, y_label: str, higher_leaks: bool, title: str):
    """Interactive twin of :func:`_plot_tradeoff`: hover = the cell, legend toggles series."""
    import plotly.graph_objects as go

    keys = [
        k
        for k in agg
        if y_key in agg[k]
        and err_key in agg[k]
        and math.isfinite(agg[k][y_key][0])
        and math.isfinite(agg[k][err_key][0])
    ]
    xtype, xfloor = _axis([agg[k][err_key][0] for k in keys])
    ytype, yfloor = _axis([agg[k][y_key][0] for k in keys])
    fig = go.Figure()
    for s in sorted({k[0] for k in keys}):
        ks = sorted(k for k in keys if k[0] == s)
        xs, ys, ex_lo, ex_hi, ey_lo, ey_hi, text, sym = [], [], [], [], [], [], [], []
        for k in ks:
            (xm, xl, xh), (ym, yl, yh) = agg[k][err_key], agg[k][y_key]
            x, cx = _clip(xm, xfloor)
            y, cy = _clip(ym, yfloor)
            xs.append(x)
            ys.append(y)
            ex_lo.append(0 if cx else max(0.0, xm - max(xl, xfloor or -math.inf)))
            ex_hi.append(0 if cx else max(0.0, xh - xm))
            ey_lo.append(0 if cy else max(0.0, ym - max(yl, yfloor or -math.inf)))
            ey_hi.append(0 if cy else max(0.0, yh - ym))
            note = "<br><i>below the axis floor: drawn at the floor</i>" if cx or cy else ""
            text.append(_hover(agg, k, err_key, y_key) + note)
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
                x=[_clip(agg[keys[i]][err_key][0], xfloor)[0] for i in front],
                y=[_clip(agg[keys[i]][y_key][0], yfloor)[0] for i in front],
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


def _plotly_error_by_setting(agg, err_key: str):
    import plotly.graph_objects as go

    keys = sorted(k for k in agg if err_key in agg[k] and math.isfinite(agg[k][err_key][0]))
    xtype, xfloor = _axis([agg[k][err_key][0] for k in keys])
    fig = go.Figure()
    for s in sorted({k[0] for k in keys}):
        ks = [k for k in keys if k[0] == s]
        xs = [_clip(agg[k][err_key][0], xfloor)[0] for k in ks]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[html.escape(f"#{_point_id(agg, k)} {k[1]}"[:60]) for k in ks],
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
                hovertext=[_hover(agg, k, err_key, err_key) for k in ks],
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


# ----------------------------------------------------------------------------- headline
#: leakage levels of the headline: the best accuracy among settings leaking at most this much
_LEVELS = (0.05, 0.25, 0.5, 1.0)
#: what a headline metric measures, in words (DESIGN.md's pinned definitions)
_MEANING = {
    "leakage": "distributional leakage (1 − W2 to the data / W2 of the prior-only baseline)",
    "coverage": "coverage@r (share of private rows with a reconstruction within r)",
    "matching_rate": "matching rate (share of retrieved words in the private text)",
    "auc": "membership ROC-AUC",
    "advantage": "membership advantage max(TPR − FPR)",
}


def _headline_metric(metric_keys: list[str]) -> str | None:
    for m in _MEANING:
        if f"{ANY_ATTACK}.{m}" in metric_keys:
            return f"{ANY_ATTACK}.{m}"
    return None


def _pct(x: float) -> str:
    """A relative error as a percentage (exact estimates show their rounding error)."""
    if not math.isfinite(x):
        return _fmt(x)
    if abs(x) < 1e-9:
        return f"exact ({x:.1g})"
    v = 100 * x
    return f"{v:.3g} %" if v < 1000 else f"{v:,.0f} %"


def _setting_name(point: str) -> str:
    return "no defense" if point in ("none", "base", "[]", "defenses=none") else point


def _worst(rows: list[dict], agg, keys, metric: str):
    """(mean, lo, hi), attack, target, setting key and observer of the largest leak."""
    worst = None
    for k in keys:
        for name, t in agg[k].items():
            m = re.fullmatch(r"(.+)\[(.+)\]\.(\w+)", name)
            if not m or m.group(3) != metric or not math.isfinite(t[0]):
                continue
            if worst is None or (
                t[0] > worst[0][0] if LEAKAGE_METRICS[metric] else t[0] < worst[0][0]
            ):
                worst = (t, m.group(1), m.group(2), k)
    if worst is None:
        return None
    r = next(x for x in rows if (_series(x), _point(x)) == worst[3])
    a = next(
        (
            x
            for x in r["results"].get("attacks") or []
            if x.get("attack") == worst[1] and str(x.get("target")) == worst[2]
        ),
        {},
    )
    observer = str(
        a.get("observer") or (r["results"].get("observer_view") or {}).get("observer", "?")
    )
    if a.get("colluders"):
        observer += " + " + ", ".join(map(str, a["colluders"]))
    return worst + (observer,)


def _headline(rows: list[dict], agg, err_key: str | None, lead: str | None):
    """Per protocol: worst leak (what, to whom, at what accuracy), best error per leakage level,
    one verdict sentence. Returns (HTML, Markdown)."""
    e = html.escape
    metric = lead.rsplit(".", 1)[1] if lead else None
    higher = LEAKAGE_METRICS.get(metric, True)
    trs, md_rows, verdicts = [], [], []
    for s in sorted({k[0] for k in agg}):
        keys = [k for k in agg if k[0] == s]
        w = _worst(rows, agg, keys, metric) if lead else None
        levels = []
        for lv in _LEVELS:
            ok = [
                k
                for k in keys
                if err_key in agg[k]
                and lead in agg[k]
                and math.isfinite(agg[k][err_key][0])
                and (agg[k][lead][0] <= lv + 1e-12 if higher else agg[k][lead][0] >= lv)
            ]
            levels.append(min(ok, key=lambda k: agg[k][err_key][0]) if ok else None)
        cells_html, cells_md = [], []
        for best in levels:
            if best is None:
                cells_html.append('<td class="none">none</td>')
                cells_md.append("none")
                continue
            name = _setting_name(best[1])
            short = name if len(name) <= 34 else name[:32] + "…"
            cells_html.append(
                f'<td title="{e(name)}"><b>{e(_pct(agg[best][err_key][0]))}</b>'
                f"<br><small>{e(short)}</small></td>"
            )
            cells_md.append(f"{_pct(agg[best][err_key][0])} ({name})")
        if w:
            t, attack, target, key, observer = w
            err = _pct(agg[key][err_key][0]) if err_key in agg[key] else "–"
            worst_html = (
                f"<b>{e(_fmt(t[0]))}</b> {e(attack)}<br><small>{e(observer)} → {e(target)}, "
                f"error {e(err)}, {e(_setting_name(key[1]))[:40]}</small>"
            )
            worst_md = f"{_fmt(t[0])}: {attack}, {observer} → {target}, error {err}"
        else:
            worst_html = worst_md = "no attack applied"
        trs.append(f"<tr><th>{e(s)}</th><td>{worst_html}</td>" + "".join(cells_html) + "</tr>")
        md_rows.append([s, worst_md, *cells_md])
        verdicts.append(_verdict(s, w, levels, agg, err_key, metric))
    if lead:
        cmp = "≤" if higher else "≥"
        table = (
            '<table><colgroup><col style="width:14%"><col style="width:26%">'
            + '<col style="width:15%">' * len(_LEVELS)
            + "</colgroup><thead><tr><th>protocol</th><th>worst leak found</th>"
            + "".join(
                f"<th>best error, {e(metric)} {cmp} {lv:g}</th>"
                if lv < 1 or not higher
                else "<th>best error, any leakage</th>"
                for lv in _LEVELS
            )
            + "</tr></thead><tbody>"
            + "".join(trs)
            + "</tbody></table>"
        )
        caption = (
            f"{e(metric)}: {e(_MEANING[metric])}; worst over attacks and targets, mean over "
            f"seeds. Error: relative error of {e((err_key or '?').split('.')[0])} against the "
            "central exact reference. Hover a column's setting for its full name."
        )
    else:
        table, caption = "", "No attack ran, so no leakage level is measured."
    html_text = (
        '<div class="headline-text"><h2>Headline: who learns what, at what accuracy</h2>'
        + "".join(f'<p class="verdict">{v}</p>' for v in verdicts)
        + table
        + f'<p class="runinfo">{caption}</p></div>'
    )
    md = "## Headline\n\n" + "\n\n".join(re.sub(r"</?b>", "**", v) for v in verdicts)
    if lead:
        head = ["protocol", "worst leak"] + [f"{metric} ≤ {lv:g}" for lv in _LEVELS]
        md += "\n\n" + "\n".join(
            ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(_md(c) for c in r) + " |" for r in md_rows]
        )
    return html_text, md


def _verdict(series: str, w, levels, agg, err_key: str | None, metric: str | None) -> str:
    """One sentence from the measured numbers (HTML-escaped, may hold <b>)."""
    e = html.escape
    if not w:
        return f"<b>{e(series)}</b>: no attack applied to this protocol; no leak was measured."
    t, attack, target, key, observer = w
    err = _pct(agg[key][err_key][0]) if err_key and err_key in agg[key] else "–"
    text = (
        f"<b>{e(series)}</b> leaks {e(target)}'s data to the <b>{e(observer)}</b>: "
        f"{e(attack)} reaches {e(metric)} <b>{_fmt(t[0])}</b> at error {e(err)} "
        f"({e(_setting_name(key[1]))})"
    )
    quiet = levels[0]
    if quiet is not None:
        text += (
            f"; keeping {e(metric)} within {_LEVELS[0]:g} costs error "
            f"<b>{e(_pct(agg[quiet][err_key][0]))}</b> ({e(_setting_name(quiet[1]))})."
        )
    else:
        text += f"; no setting tried keeps {e(metric)} within {_LEVELS[0]:g}."
    return text


# ----------------------------------------------------------------------------- leakage pictures
#: attack output kind -> (threat, figure metric shown in the coverage matrix)
THREATS: dict[str, tuple[str, str]] = {
    "points": ("reconstruction", "coverage"),
    "scores": ("membership", "auc"),
    "histogram": ("attribute/label", "tv"),
    "words": ("text retrieval", "matching_rate"),
}


def _cell_dir(run_dir: Path, row: dict) -> Path:
    """Where a row's own run directory is: the run itself, or a sweep's ``cells/<hash>/``."""
    cell = run_dir / "cells" / str(row.get("cell", ""))
    return cell if row.get("cell") and cell.is_dir() else run_dir


def _best_rows(rows: list[dict], agg) -> dict[tuple[str, str], dict[str, Any]]:
    """(protocol, threat) -> the attack with the largest leak of that threat, over settings,
    with its setting key, attack, target and observer (mean over seeds)."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        s, p = _series(r), _point(r)
        for a in r["results"].get("attacks") or []:
            kind = a.get("kind")
            if kind not in THREATS:
                continue
            threat, metric = THREATS[kind]
            name = f"{a.get('attack')}[{a.get('target')}].{metric}"
            t = agg[(s, p)].get(name)
            if t is None or not math.isfinite(t[0]):
                continue
            cur = best.get((s, threat))
            higher = LEAKAGE_METRICS[metric]
            if cur is None or (t[0] > cur["value"][0] if higher else t[0] < cur["value"][0]):
                best[(s, threat)] = {
                    "value": t,
                    "metric": metric,
                    "attack": a.get("attack"),
                    "target": str(a.get("target")),
                    "observer": str(a.get("observer", "?")),
                    "key": (s, p),
                    "kind": kind,
                }
    return best


def _evidence_for(run_dir: Path, rows: list[dict], b: dict) -> dict[str, Any] | None:
    """The saved arrays of the best attack row, from the lowest seed of its setting."""
    from testbed.scoring.evidence import load_evidence

    cells = sorted(
        (r for r in rows if (_series(r), _point(r)) == b["key"]), key=lambda r: str(r.get("seed"))
    )
    for r in cells:
        ev = load_evidence(_cell_dir(run_dir, r))
        for i, a in enumerate(r["results"].get("attacks") or []):
            if (a.get("attack"), str(a.get("target"))) == (b["attack"], b["target"]) and i in ev:
                return {**ev[i], "seed": r.get("seed")}
    return None


def _fig_digits(ev: dict, title: str):
    """Private 8x8 digits (top) and their nearest reconstructions (bottom), one heatmap."""
    import numpy as np
    import plotly.graph_objects as go

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
        title={"text": html.escape(title), "font": {"size": 13}},
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


def _fig_cloud(ev: dict, title: str):
    import numpy as np
    import plotly.graph_objects as go

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
        title={"text": html.escape(title), "font": {"size": 13}},
        xaxis={"title": f"PC 1 ({100 * ex[0]:.0f} % of the private variance)"},
        yaxis={"title": f"PC 2 ({100 * ex[1]:.0f} %)"},
        height=380,
        margin={"l": 60, "r": 10, "t": 40, "b": 50},
        template="plotly_white",
    )
    return fig


def _fig_roc(ev: dict, title: str):
    """Membership ROC on log axes, floored at one over the non-members (the smallest FPR)."""
    import numpy as np
    import plotly.graph_objects as go

    floor = 1.0 / max(int(ev.get("n_nonmembers", 100)), 1)
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
        title={"text": html.escape(title), "font": {"size": 13}},
        xaxis={"title": "false positive rate (log)", "type": "log"},
        yaxis={"title": "true positive rate (log)", "type": "log"},
        height=380,
        margin={"l": 60, "r": 10, "t": 40, "b": 50},
        template="plotly_white",
    )
    return fig


def _fig_histogram(ev: dict, title: str):
    import plotly.graph_objects as go

    labels = [str(i) for i in range(len(ev["inferred"]))]
    fig = go.Figure(
        [
            go.Bar(x=labels, y=ev["true"], name="true"),
            go.Bar(x=labels, y=ev["inferred"], name="inferred"),
        ]
    )
    fig.update_layout(
        title={"text": html.escape(title), "font": {"size": 13}},
        xaxis={"title": "label"},
        yaxis={"title": "share of rows"},
        barmode="group",
        height=330,
        margin={"l": 60, "r": 10, "t": 40, "b": 50},
        template="plotly_white",
    )
    return fig


def _words_html(ev: dict, title: str) -> str:
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


def _pictures(doc, run_dir: Path, rows: list[dict], agg, best) -> int:
    """One picture per (protocol, threat) from the worst leak's saved arrays: interactive in the
    HTML, a static PNG in ``plots/`` (and the Markdown) for papers."""
    from testbed.report import leak_png

    drawn = 0
    for (s, threat), b in sorted(best.items()):
        ev = _evidence_for(run_dir, rows, b)
        if not ev:
            continue
        who = (
            f"{s}: {b['attack']}, {b['observer']} → {b['target']}, {_setting_name(b['key'][1])}, "
            f"seed {ev['seed']}"
        )
        slug = f"{s}_{threat}".replace("/", "_").replace(" ", "_")
        if b["kind"] == "points":
            if "image_side" in ev:
                cap = f"best-recovered private digits and their nearest reconstruction — {who}"
                doc.plot(
                    f"leak_{slug}_digits.png",
                    leak_png.digits_png(ev, cap),
                    _fig_digits(ev, cap),
                    cap,
                )
                drawn += 1
            if "cloud_private" in ev:
                cap = f"private vs reconstructed points, PCA of the private rows — {who}"
                doc.plot(
                    f"leak_{slug}_cloud.png", leak_png.cloud_png(ev, cap), _fig_cloud(ev, cap), cap
                )
                drawn += 1
        elif b["kind"] == "scores" and "fpr" in ev:
            cap = f"membership ROC (log axes) — {who}"
            doc.plot(f"leak_{slug}_roc.png", leak_png.roc_png(ev, cap), _fig_roc(ev, cap), cap)
            drawn += 1
        elif b["kind"] == "histogram" and "inferred" in ev:
            cap = f"inferred vs true label histogram — {who}"
            doc.plot(
                f"leak_{slug}_labels.png",
                leak_png.histogram_png(ev, cap),
                _fig_histogram(ev, cap),
                cap,
            )
            drawn += 1
        elif b["kind"] == "words" and "words" in ev:
            cap = f"retrieved words — {who}"
            name = f"leak_{slug}_words.png"
            doc.raw(_words_html(ev, cap), f"![{_md(cap)}](plots/{name})")
            doc.static(name, leak_png.words_png(ev, cap))
            drawn += 1
    return drawn


# ----------------------------------------------------------------------------- coverage matrix
def _coverage(doc, run_dir: Path, rows: list[dict], agg, best) -> None:
    """Protocol x threat: the worst leak's figure, or why there is none; each cell opens onto
    every number of that attack row and the command that reproduces the cell."""
    from testbed.registry import ATTACKS

    e = html.escape
    protocols = sorted({k[0] for k in agg})
    threats = [t for t, _ in THREATS.values()]
    head = "".join(f"<th>{e(t)}</th>" for t in threats)
    trs, md = [], []
    for s in protocols:
        tds, mds = [], []
        pname = next(
            (r["results"].get("protocol", {}).get("name") for r in rows if _series(r) == s), s
        )
        for kind, (threat, _metric) in THREATS.items():
            b = best.get((s, threat))
            if b is None:
                able = [
                    n
                    for n, cls in ATTACKS.items()
                    if kind in getattr(cls, "output_kinds", ())
                    and ("*" in cls.protocols or pname in cls.protocols)
                ]
                if able:
                    txt = f"not run (would apply: {', '.join(able)})"
                else:
                    txt = "not applicable (no attack of this kind applies)"
                tds.append(f'<td class="none">{e(txt)}</td>')
                mds.append(txt)
                continue
            tds.append(f"<td>{_drill(run_dir, rows, agg, b)}</td>")
            mds.append(f"{_fmt(b['value'][0])} {b['metric']} ({b['attack']})")
        trs.append(f"<tr><th>{e(s)}</th>{''.join(tds)}</tr>")
        md.append([s, *mds])
    table = (
        f'<div class="wide"><table class="coverage"><thead><tr><th>protocol</th>{head}</tr></thead>'
        f"<tbody>{''.join(trs)}</tbody></table></div>"
    )
    md_table = "\n".join(
        ["| protocol | " + " | ".join(threats) + " |", "|" + "---|" * (len(threats) + 1)]
        + ["| " + " | ".join(_md(c) for c in r) + " |" for r in md]
    )
    doc.raw(table, md_table)


def _drill(run_dir: Path, rows: list[dict], agg, b: dict) -> str:
    e = html.escape
    a = agg[b["key"]]
    prefix = f"{b['attack']}[{b['target']}]."
    nums = "".join(
        f"<tr><td>{e(k[len(prefix) :])}</td><td>{e(_ci(v))}</td></tr>"
        for k, v in sorted(a.items())
        if k.startswith(prefix) and isinstance(v, tuple)
    )
    cells = sorted(
        (r for r in rows if (_series(r), _point(r)) == b["key"]), key=lambda r: str(r.get("seed"))
    )
    cmds = []
    for r in cells:
        d = _cell_dir(run_dir, r)
        src = d / "resolved.yaml"
        cmds.append(
            f"testbed run {src} --out runs/reproduce-{str(r.get('cell', ''))[:8] or 'run'}"
            f"   # seed {r.get('seed')}"
        )
    cmds.append(
        f"testbed attack {_cell_dir(run_dir, cells[0])} --attack {b['attack']} "
        f"--observer {b['observer']}   # this attack on the saved messages"
    )
    arrow = "↑" if LEAKAGE_METRICS[b["metric"]] else "↓"
    return (
        f"<details><summary><b>{e(_fmt(b['value'][0]))}</b> {e(b['metric'])} {arrow} "
        f"<small>{e(b['attack'])}, {e(b['observer'])} → {e(b['target'])}, "
        f"{e(_setting_name(b['key'][1]))}</small></summary>"
        f"<table><tr><th>metric</th><th>mean [95 % CI] over seeds "
        f"{e(', '.join(map(str, a.get('seeds', []))))}</th></tr>{nums}</table>"
        f"<pre>{e(chr(10).join(cmds))}</pre></details>"
    )


# ----------------------------------------------------------------------------- rendering
def _fmt(x: float) -> str:
    if isinstance(x, str):
        return x
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.4g}"


def _ci(t) -> str:
    m, lo, hi = t
    if not math.isfinite(m) or math.isclose(lo, hi, rel_tol=1e-9, abs_tol=1e-12):
        return _fmt(m)
    return f"{_fmt(m)} [{_fmt(lo)}, {_fmt(hi)}]"


class _Doc:
    """Collects sections once and renders them to HTML and Markdown."""

    def __init__(self):
        self.parts: list[tuple[str, Any]] = []

    def h(self, level: int, text: str):
        self.parts.append(("h", (level, text)))

    def p(self, text: str):
        self.parts.append(("p", text))

    def table(self, header: list[str], rows: list[list[Any]]):
        self.parts.append(("table", (header, rows)))

    def img(self, name: str, png: bytes, alt: str):
        self.parts.append(("img", (name, png, alt)))

    def pre(self, text: str):
        self.parts.append(("pre", text))

    def static(self, name: str, png: bytes):
        """A PNG written to plots/ only (its HTML and Markdown come with another part)."""
        self.parts.append(("static", (name, png)))

    def plot(self, name: str, png: bytes, fig, alt: str):
        """An interactive plotly figure in the HTML, the static PNG in the Markdown and plots/."""
        self.parts.append(("plot", (name, png, fig, alt)))

    def raw(self, html_text: str, markdown: str):
        """Pre-rendered HTML (already escaped) with its Markdown counterpart."""
        self.parts.append(("raw", (html_text, markdown)))

    def html(self, title: str) -> str:
        e = html.escape
        body = []
        for kind, v in self.parts:
            if kind == "h":
                lvl, text = v
                body.append(f"<h{lvl}>{e(text)}</h{lvl}>")
            elif kind == "p":
                body.append(f"<p>{e(v)}</p>")
            elif kind == "pre":
                body.append(f"<pre>{e(v)}</pre>")
            elif kind == "raw":
                body.append(v[0])
            elif kind == "plot":
                name, _png, fig, alt = v
                div = fig.to_html(
                    full_html=False,
                    include_plotlyjs=False,
                    div_id="plot-" + name.rsplit(".", 1)[0],
                    config={"displaylogo": False, "responsive": True},
                )
                body.append(f'<figure class="plot">{div}<figcaption>{e(alt)}</figcaption></figure>')
            elif kind == "img":
                name, png, alt = v
                b64 = base64.b64encode(png).decode()
                body.append(
                    f'<figure><img alt="{e(alt)}" src="data:image/png;base64,{b64}">'
                    f"<figcaption>{e(alt)}</figcaption></figure>"
                )
            elif kind == "table":
                header, rows = v
                th = "".join(f"<th>{e(str(h))}</th>" for h in header)
                trs = "".join(
                    "<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>" for r in rows
                )
                # wide tables scroll inside their own box, never the page
                body.append(
                    f'<div class="wide"><table><thead><tr>{th}</tr></thead>'
                    f"<tbody>{trs}</tbody></table></div>"
                )
        css = (
            "body{font-family:sans-serif;max-width:1340px;margin:0.6em auto;padding:0 1em;"
            "color:#222}h1{font-size:1.35em;margin:0.2em 0}.runinfo{font-size:0.8em;color:#555;"
            "margin:0.2em 0 0.5em}.headline{display:flex;gap:1em;align-items:flex-start}"
            ".headline>.headline-text{flex:0 0 50%;max-width:50%}.headline>.plot{flex:1 1 0;"
            "min-width:0}.headline table{font-size:0.76em;margin:0.3em 0;width:100%;"
            "table-layout:fixed}.headline td{overflow:hidden;text-overflow:ellipsis;"
            "overflow-wrap:anywhere}"
            ".headline td,.headline th{vertical-align:top}.headline small{color:#555}"
            "td.none{color:#999}.hit{background:#c8f0c8;font-weight:bold;padding:0 3px}"
            ".miss{color:#777;padding:0 3px}details summary{cursor:pointer}"
            "table.coverage td{vertical-align:top;max-width:300px}"
            "table.coverage pre{white-space:pre-wrap;font-size:0.75em;max-width:600px}"
            ".verdict{font-size:0.88em;margin:0.25em 0}.verdict b{color:#8b1a1a}"
            ".headline h2{font-size:1.05em;margin:0.2em 0}"
            "table{border-collapse:collapse;margin:0.6em 0 1.2em;font-size:0.85em}"
            "td,th{border:1px solid #ccc;padding:3px 7px;text-align:left}th{background:#f2f2f2}"
            "pre{background:#f7f7f7;padding:0.8em;overflow-x:auto;font-size:0.8em}"
            "figure{margin:1em 0}figcaption{font-size:0.8em;color:#555}img{max-width:100%}"
            ".wide{max-width:100%;overflow-x:auto}.plot{max-width:100%}"
        )
        script = ""
        if any(kind == "plot" for kind, _ in self.parts):
            from plotly.offline import get_plotlyjs

            # the library once per page, inline: the file works offline and asks no server
            script = f'<script type="text/javascript">{get_plotlyjs()}</script>'
        return (
            '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
            f"<title>{e(title)}</title><style>{css}</style>{script}</head><body>\n"
            + "\n".join(body)
            + "\n</body></html>\n"
        )

    def markdown(self) -> str:
        out = []
        for kind, v in self.parts:
            if kind == "h":
                out.append("#" * v[0] + " " + _md(v[1]))
            elif kind == "p":
                out.append(_md(v))
            elif kind == "pre":  # a fence longer than any backtick run in the text: no way out
                fence = "`" * max(3, 1 + max(map(len, re.findall("`+", v)), default=0))
                out.append(f"{fence}\n{v.rstrip()}\n{fence}")
            elif kind == "img":
                out.append(f"![{_md(v[2])}](plots/{_md_path(v[0])})")
            elif kind == "plot":
                out.append(
                    f"![{_md(v[3])}](plots/{_md_path(v[0])})"
                    if v[1]
                    else f"*{_md(v[3])}* (interactive, in report.html)"
                )
            elif kind == "raw":
                out.append(v[1])
            elif kind == "table":
                header, rows = v
                cell = _md
                out.append(
                    "\n".join(
                        [
                            "| " + " | ".join(cell(h) for h in header) + " |",
                            "|" + "---|" * len(header),
                        ]
                        + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
                    )
                )
        return "\n\n".join(out) + "\n"


def _attack_status(rows: list[dict]) -> list[str]:
    """The attack sandbox level(s) the rows record and one line per failed attack."""
    atk = [a for r in rows for a in r["results"].get("attacks", [])]
    levels = sorted({a.get("isolation") or "not recorded" for a in atk})
    out = [f"Attack isolation: {', '.join(levels)} (docs/trust.md)."] if atk else []
    for a in atk:
        if "failed" in a:
            out.append(
                f"Attack {a.get('label')} (observer {a.get('observer')}) FAILED in "
                f"{a['failed']}: {a.get('reason', '')}"
            )
    return out


def write_report(run_dir: str | Path) -> Path:
    """Render ``report.html``, ``report.md`` and ``results.csv`` into ``run_dir``."""
    run_dir = Path(run_dir)
    rows, info = load_rows(run_dir)
    if not rows:
        raise TestbedError(f"{run_dir}: no finished cells to report")
    _write_csv(run_dir / "results.csv", rows)
    agg = _aggregate(rows)
    err_q = _error_key(rows)
    err_key = f"{err_q}.relative_error" if err_q else None
    first = rows[0]["results"]
    doc = _Doc()
    title = f"Leakage vs accuracy — {first.get('scenario', run_dir.name)}"
    doc.h(1, title)
    seeds = sorted({r.get("seed") for r in rows}, key=str)
    hash_ = info.get("sweep", {}).get("sweep_hash") or first.get("config_hash", "")
    run_line = (
        f"Run directory {run_dir.name}: {len(rows)} cell(s), {len(agg)} setting(s), "
        f"seeds {', '.join(map(str, seeds))}; config hash {hash_[:16]}. "
        "Every number below is read from the run's result files; intervals are 95 % Student-t "
        "intervals over seeds (a single seed shows the value alone)."
    )
    doc.raw(f'<p class="runinfo">{html.escape(run_line)}</p>', _md(run_line))
    for line in _attack_status(rows):
        doc.raw(f'<p class="runinfo">{html.escape(line)}</p>', _md(line))
    metric_keys = sorted(
        {
            k
            for a in agg.values()
            for k in a
            if "[" not in k
            and "." in k
            and k.rsplit(".", 1)[1] in LEAKAGE_METRICS
            and not k.endswith("relative_error")
            and not k.endswith((".estimate", ".exact"))
        },
        key=lambda k: (not k.startswith(ANY_ATTACK + "."), k),  # the cross-protocol view first
    )
    lead = _headline_metric(metric_keys)
    head_html, head_md = _headline(rows, agg, err_key, lead)
    if lead and err_key:
        # the first screen: the headline beside the frontier of its leakage metric
        higher = LEAKAGE_METRICS[lead.rsplit(".", 1)[1]]
        fig = _plotly_tradeoff(
            agg,
            err_key,
            lead,
            f"{lead} ({'↑' if higher else '↓'} more leakage)",
            higher,
            "frontier: " + lead + " (worst attack and target) vs error",
        )
        fig.update_layout(height=520)
        div = fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id="plot-frontier",
            config={"displaylogo": False, "responsive": True},
        )
        doc.raw(f'<div class="headline">{head_html}<div class="plot">{div}</div></div>', head_md)
    else:
        doc.raw(f'<div class="headline">{head_html}</div>', head_md)

    # -- what the attacks recovered, and the coverage matrix
    best = _best_rows(rows, agg)
    doc.h(2, "What the attacks recovered")
    if not _pictures(doc, run_dir, rows, agg, best):
        doc.p(
            "No picture: no attack ran, or the run predates leakage.npz (re-run it to draw the "
            "reconstructions)."
        )
    doc.h(2, "Coverage: protocol × threat")
    doc.p(
        "Each cell: the largest leak of that threat over every setting (mean over seeds; ↑ higher "
        "= more leakage, ↓ lower = more leakage), by which attack, observer → target. Click a "
        "cell for all its numbers and the commands that reproduce it."
    )
    _coverage(doc, run_dir, rows, agg, best)

    # -- plots
    doc.h(2, "Leakage against accuracy")
    plots = 0
    on_front: dict[tuple[str, str], list[str]] = defaultdict(list)
    if err_key:
        for mk in metric_keys:
            metric = mk.rsplit(".", 1)[1]
            higher = LEAKAGE_METRICS[metric]
            if metric == "w2":
                continue  # raw distance: in the tables; w2_ratio is its plotted, normalised form
            keys = [k for k in agg if mk in agg[k] and err_key in agg[k]]
            pts = [(agg[k][err_key][0], agg[k][mk][0] * (1 if higher else -1)) for k in keys]
            for i in pareto_front(pts):
                on_front[keys[i]].append(mk)
            worst = "worst attack and target" if mk.startswith(ANY_ATTACK) else "worst target"
            label = f"{mk} ({'higher' if higher else 'lower'} = more leakage; {worst})"
            png = _plot_tradeoff(agg, err_key, mk, label, higher, f"{mk} vs error")
            arrow = "↑" if higher else "↓"
            fig = _plotly_tradeoff(
                agg, err_key, mk, f"{mk} ({arrow} more leakage)", higher, f"{mk} vs error"
            )
            doc.plot(
                f"tradeoff_{mk.replace('.', '_')}.png",
                png,
                fig,
                f"{mk} against relative error — {label}",
            )
            plots += 1
        eps_keys = sorted({k for a in agg.values() for k in a if k.startswith("eps_claimed[")})
        finite = [
            k
            for k in eps_keys
            if any(math.isfinite(a.get(k, (math.inf,))[0]) for a in agg.values())
        ]
        for k in finite:
            args = (agg, err_key, k, f"{k} (higher = weaker guarantee)", True)
            png = _plot_tradeoff(*args, f"claimed ε vs error ({k})")
            fig = _plotly_tradeoff(*args[:3], f"{k} (↑ weaker)", True, f"claimed ε vs error ({k})")
            doc.plot(
                f"tradeoff_{k.replace('[', '_').replace(']', '')}.png",
                png,
                fig,
                f"claimed ε of {k[12:-1]} against relative error",
            )
            plots += 1
        doc.plot(
            "error_by_setting.png",
            _plot_error_by_setting(agg, err_key),
            _plotly_error_by_setting(agg, err_key),
            "accuracy by setting",
        )
        plots += 1
    if not metric_keys:
        doc.p(
            "No attack ran in this run, so no leakage metric is shown; the claimed ε (from the "
            "privacy ledger) is the only privacy axis."
        )

    # -- per-protocol tables
    doc.h(2, "Results per protocol")
    for s in sorted({k[0] for k in agg}):
        doc.h(3, s)
        keys = [k for k in agg if k[0] == s]
        cols = ([err_key] if err_key else []) + metric_keys
        eps_cols = sorted({c for k in keys for c in agg[k] if c.startswith("eps_claimed[")})
        header = (
            ["#", "setting", "seeds"]
            + [c for c in cols]
            + eps_cols
            + ["messages", "bytes", "Pareto-optimal for"]
        )
        body = []
        for k in sorted(keys):
            a = agg[k]
            body.append(
                [_point_id(agg, k), k[1], a["n"]]
                + [_ci(a[c]) if c in a else "–" for c in cols]
                + [_ci(a[c]) if c in a else "–" for c in eps_cols]
                + [_fmt(a.get("messages", (math.nan,))[0]), _fmt(a.get("bytes", (math.nan,))[0])]
                + [", ".join(on_front.get(k, [])) or "–"]
            )
        doc.table(header, body)

    # -- epsilon
    doc.h(2, "Claimed vs audited ε")
    doc.p(
        "Claimed ε: the privacy ledger (defenses' Gaussian-mechanism events composed by opacus's "
        "RDP accountant) per protected party, valid only under the stated assumptions below. "
        "Audited ε: the largest empirical lower bound (eps_lower) reported by an attack on that "
        "party; an audited bound above the claim means the claim is wrong or its assumption fails."
    )
    # per setting and party over seeds: the claim (seed-independent for a fixed mechanism; the
    # largest one if not) and the largest audited lower bound
    eps_acc: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:
        res = r["results"]
        claims = _claimed(res)
        audited: dict[str, float] = {}
        for a in res.get("attacks") or []:
            if "eps_lower" in a:
                t = a.get("target")
                audited[t] = max(audited.get(t, -math.inf), _f(a["eps_lower"]))
        assum = res.get("privacy_assumptions") or []
        for p in sorted(set(claims) | set(audited)):
            e = eps_acc.setdefault(
                (_series(r), _point(r), p),
                {"claim": -math.inf, "aud": math.nan, "delta": "–", "holds": [], "seeds": 0},
            )
            e["claim"] = max(e["claim"], claims.get(p, math.inf))
            if p in audited:
                e["aud"] = audited[p] if math.isnan(e["aud"]) else max(e["aud"], audited[p])
            e["delta"] = (res.get("privacy") or {}).get(p, {}).get("delta", e["delta"])
            e["holds"] += [x["holds"] for x in assum if x.get("party") in (p, "*")]
            e["seeds"] += 1
    eps_rows = []
    for (series, point, p), e in sorted(eps_acc.items()):
        if math.isnan(e["aud"]):
            status = "no audit"
        elif e["aud"] > e["claim"]:
            status = "VIOLATION: audited > claimed"
        else:
            status = "consistent"
        holds = e["holds"]
        eps_rows.append(
            [
                series,
                point,
                e["seeds"],
                p,
                _fmt(e["claim"]),
                e["delta"],
                _fmt(e["aud"]),
                "–" if not holds else ("yes" if all(holds) else "NO"),
                status,
            ]
        )
    doc.table(
        [
            "protocol",
            "setting",
            "seeds",
            "party",
            "claimed ε",
            "δ",
            "audited ε ≥ (max over seeds)",
            "assumptions hold",
            "status",
        ],
        eps_rows,
    )
    assumption_rows = []
    seen = set()
    for r in rows:
        for x in r["results"].get("privacy_assumptions") or []:
            key = (
                _series(r),
                _point(r),
                x.get("party"),
                x.get("assumption"),
                x.get("holds"),
                x.get("detail"),
            )
            if key not in seen:
                seen.add(key)
                assumption_rows.append(
                    [
                        key[0],
                        key[1],
                        x.get("party"),
                        x.get("assumption"),
                        "yes" if x.get("holds") else "NO",
                        x.get("detail", ""),
                    ]
                )
    if assumption_rows:
        doc.h(3, "Assumptions behind the claims")
        doc.table(
            ["protocol", "setting", "party", "assumption", "holds", "detail"], assumption_rows
        )

    # -- what the observer saw
    doc.h(2, "What the observer saw")
    for k in sorted(agg):
        r = next(x for x in rows if (_series(x), _point(x)) == k)
        res = r["results"]
        ov = res.get("observer_view") or {}
        tr = res.get("transcript") or {}
        doc.h(3, f"{k[0]} — {k[1]}")
        doc.p(
            f"Observer {ov.get('observer', '?')} saw {ov.get('messages', '?')} of "
            f"{tr.get('messages', '?')} messages ({ov.get('bytes', '?')} of {tr.get('bytes', '?')} "
            f"bytes) over {tr.get('rounds', '?')} rounds (seed {r.get('seed')}; transcript digest "
            f"{str(tr.get('digest', ''))[:16]})."
        )
        by = ov.get("by_kind") or tr.get("by_kind") or {}
        if by:
            doc.table(
                ["message kind", "messages", "bytes"],
                [[kind, v.get("messages"), v.get("bytes")] for kind, v in by.items()],
            )

    # -- protocol modes and deviations
    doc.h(2, "Protocol modes and deviations")
    dev_rows, seen = [], set()
    for r in rows:
        pr = r["results"].get("protocol") or {}
        key = (pr.get("name"), pr.get("mode"), tuple(pr.get("deviations") or ()))
        if key not in seen:
            seen.add(key)
            dev_rows.append([key[0], key[1], "; ".join(key[2]) or "none"])
    doc.table(["protocol", "mode", "deviations from the paper / public code"], dev_rows)

    # -- provenance
    doc.h(2, "Scenario and provenance")
    versions = info.get("versions") or {}
    doc.table(
        ["item", "value"],
        [
            ["scenario", first.get("scenario", "")],
            ["config hash", hash_],
            ["run kind", info.get("kind", "")],
            ["seeds", ", ".join(map(str, seeds))],
            ["python", info.get("python", "")],
        ]
        + [[k, v or "not installed"] for k, v in versions.items()],
    )
    if info.get("scenario_text"):
        doc.pre(info["scenario_text"])
    if info.get("sweep"):
        doc.h(3, "Cells")
        doc.table(
            ["#", "config hash", "seed", "setting"],
            [[c["index"], c["cell"][:12], c["seed"], c["label"]] for c in info["sweep"]["cells"]],
        )

    atomic_write_bytes(run_dir / "report.html", doc.html(title).encode())
    written = sorted(v[0] for kind, v in doc.parts if kind in ("img", "plot", "static") and v[1])
    for kind, v in doc.parts:
        if kind in ("img", "plot", "static") and v[1]:
            atomic_write_bytes(run_dir / "plots" / v[0], v[1])
    # plots an earlier render wrote that no longer exist; files the testbed did not write stay
    manifest = run_dir / "plots" / ".written-by-testbed"
    earlier = manifest.read_text().split() if manifest.is_file() else []
    for name in set(earlier) - set(written):
        if "/" not in name and (run_dir / "plots" / name).is_file():
            (run_dir / "plots" / name).unlink()
    atomic_write_bytes(manifest, ("\n".join(written) + "\n").encode())
    atomic_write_bytes(run_dir / "report.md", doc.markdown().encode())
    return run_dir / "report.html"


_MD_SPECIAL = re.compile(r"([\\`*\[\]|#])")
_CSV_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _md(x: Any) -> str:
    """Text for report.md: one line (a value cannot start a block), HTML characters as entities
    and Markdown punctuation backslash-escaped (no raw HTML, link, image or table break)."""
    text = " ".join(str(x).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def _md_path(name: str) -> str:
    """A plot file name inside a Markdown link target."""
    from urllib.parse import quote

    return quote(name)


def _csv_safe(v: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (``= + - @``, tab, CR first) gets a
    leading ``'``; numbers, and text that reads as a number (``-inf``, ``-0.5``), are left."""
    if not isinstance(v, str) or not v.startswith(_CSV_FORMULA):
        return v
    try:
        float(v)
        return v
    except ValueError:
        return "'" + v


def _write_csv(path: Path, rows: list[dict]) -> None:
    flats = [flatten(r) for r in rows]
    cols: list[str] = []
    for f in flats:
        cols.extend(k for k in f if k not in cols)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([_csv_safe(c) for c in cols])  # column names carry labels and party names too
    for f in flats:
        w.writerow([_csv_safe("" if f.get(k) is None else f[k]) for k in cols])
    atomic_write_bytes(path, buf.getvalue().encode())
