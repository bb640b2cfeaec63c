"""Answer the frontier question from a sweep's ``results.jsonl``: at each privacy budget, which
setting gives the best task utility, and what the best attack still recovers.

``python -m bench.frontier RUN_DIR [--utility distance_accuracy]`` prints one markdown line per
setting (mean and 95 % interval over seeds of ``utility.<name>``, of the claimed
``privacy_epsilon``, and of the worst attack's normalised leakage and coverage@r next to the prior
baseline's coverage), then, per budget ε ∈ {1, 10, ∞}, the setting with the best utility among
those whose claim is at most ε. Intervals of a metric that lives in [0, 1] (leakage, coverage,
``distance_accuracy``, ``detection_auc``, ...) are clipped to it, as in the report. The dataset
before ``:`` is the swept one, else the one of the cell's ``resolved.yaml``. RUN_DIR may also be
a single run (its ``results.json``). It only reads results (the report renders; this prints).

A run directory that is missing or has neither file, a line that is not a JSON results row (or
one whose fields read here have another shape: a ``setting`` or ``utility`` that is not an
object, a utility that is not a number, ...), an unreadable ``resolved.yaml``, or a
``--utility`` that no row has: one line ``error: ...`` on stderr (naming the file and line, and
the field, or the utilities the results do have) and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.scoring.accuracy import summarise
from testbed.scoring.vocabulary import NOT_MEASURED

__all__ = ["BUDGETS", "best_per_budget", "frontier_rows", "load_rows", "main", "setting_label"]

BUDGETS = (1.0, 10.0, math.inf)


def _eps(x) -> float:
    if isinstance(x, str):
        return math.inf if x == "inf" else float(x)
    return math.inf if x is None else float(x)


def setting_label(row: Mapping[str, Any]) -> str:
    """``dataset: protocol(noise)[ + defense(ε[, worst case])]`` of one sweep row, from its resolved results
    (the swept ``setting`` holds only the swept paths). The dataset is the swept one, else the
    row's ``dataset`` (:func:`main` reads it from the cell's ``resolved.yaml``), else the
    scenario's name."""
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
        if q.get("calibration") == "worst_case":  # the tight one is the default: no tag
            extra = f"({extra[1:-1]}, worst case)" if extra else "(worst case)"
        extra = extra or (f"({q['mode']})" if "mode" in q else "")
        extra = extra or (f"(S={q['support_size']})" if "support_size" in q else "")
        name += f" + {d['name']}{extra}"
    data = row.get("setting", {}).get("data")
    ds = data["dataset"]["name"] if data else row.get("dataset") or res.get("scenario", "")
    return f"{ds}: {name}"


def _num(x) -> float:
    return math.nan if x is None else float(x)


def _worst(res: Mapping[str, Any], key: str) -> float:
    """The largest ``key`` over the row's attacks; NaN when no attack measured it (not
    measured, printed so: never a 0)."""
    xs = [float(a[key]) for a in res.get("attacks") or [] if a.get(key) is not None]
    return max(xs, default=math.nan)


def frontier_rows(rows: Iterable[Mapping[str, Any]], utility: str = "distance_accuracy") -> list:
    """One dict per setting: mean/low/high of utility, epsilon, leakage, coverage over seeds."""
    groups: dict[str, list] = defaultdict(list)
    for row in rows:
        groups[setting_label(row)].append(row["results"])
    out = []
    for label, res in sorted(groups.items()):
        util = [_num((r.get("utility") or {}).get(utility)) for r in res]
        eps = [_eps(r.get("privacy_epsilon")) for r in res]
        worst = {
            k: [_worst(r, k) for r in res] for k in ("leakage", "coverage", "coverage_baseline")
        }
        out.append(
            {
                "setting": label,
                "seeds": len(res),
                "epsilon": max(eps),
                "utility": summarise(util, utility),
                "leakage": summarise(worst["leakage"], "leakage"),
                "coverage": summarise(worst["coverage"], "coverage"),
                # the prior's coverage is a coverage: clipped the same way
                "coverage_baseline": summarise(worst["coverage_baseline"], "coverage"),
            }
        )
    return out


def _leak(t: Mapping[str, Any]) -> float:
    """A setting's leakage for ranking: not measured ranks as the most (never as 0)."""
    x = t["leakage"][0]
    return math.inf if math.isnan(x) else x


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
                best = max(ok, key=lambda t: (round(t["utility"][0], 3), -_leak(t)))
                out.append((b, ds, best))
    return out


def _fmt(ci, missing: str = "–") -> str:
    """``mean [lo, hi]``; ``missing`` when there is no figure (a leakage figure no attack
    measured says "not measured", never 0)."""
    m, lo, hi = ci
    if not math.isfinite(m):
        return missing
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]"


def _leak_fmt(ci) -> str:
    return _fmt(ci, NOT_MEASURED)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TestbedError(f"{path}: not readable ({type(exc).__name__})") from None


def _json(text: str, path: Path, lineno: int | None = None):
    """``text`` (line ``lineno`` of ``path``, or the whole file) parsed as JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TestbedError(f"{path}:{lineno or exc.lineno}: not JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise TestbedError(f"{path}:{lineno or 1}: not JSON ({type(exc).__name__})") from None


def _is_num(x) -> bool:
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))


def _check_row(row, where: str) -> dict:
    """``row`` if it is a results row: an object whose ``results`` names its protocol, and whose
    fields this module reads have the shapes it reads (objects where it looks keys up, lists
    where it iterates, numbers where it computes); else one error naming ``where`` and the
    field."""
    res = row.get("results") if isinstance(row, dict) else None
    proto = res.get("protocol") if isinstance(res, dict) else None
    if not isinstance(proto, dict) or not isinstance(proto.get("name"), str):
        raise TestbedError(f"{where}: not a results row (no results.protocol.name)")

    def bad(field: str, want: str):
        raise TestbedError(f"{where}: {field} is not {want}")

    setting = row.get("setting", {})
    if not isinstance(setting, dict):
        bad("setting", "an object")
    data = setting.get("data")
    if data and not isinstance((data.get("dataset") if isinstance(data, dict) else None), dict):
        bad("setting.data", "an object with a dataset object")
    if data and not isinstance(data["dataset"].get("name"), str):
        bad("setting.data.dataset.name", "a string")
    params = proto.get("params", {})
    if not isinstance(params, dict):
        bad("results.protocol.params", "an object")
    for k in ("target_epsilon", "noise_multiplier"):
        if not _is_num(params.get(k)):
            bad(f"results.protocol.params.{k}", "a number or null")
    if not isinstance(params.get("covariance", ""), str):
        bad("results.protocol.params.covariance", "a string")
    utility = res.get("utility") or {}
    if not isinstance(utility, dict):
        bad("results.utility", "an object")
    for k, v in utility.items():
        if not _is_num(v):
            bad(f"results.utility.{k}", "a number or null")
    eps = res.get("privacy_epsilon")
    if not (_is_num(eps) or eps == "inf"):
        bad("results.privacy_epsilon", 'a number, null or "inf"')
    for key in ("defenses", "attacks"):
        items = res.get(key) or []
        if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
            bad(f"results.{key}", "a list of objects")
    for d in res.get("defenses") or []:
        if not isinstance(d.get("name"), str) or not isinstance(d.get("params", {}), dict):
            bad("results.defenses", "a list of {name, params} objects")
        if not _is_num(d.get("params", {}).get("target_epsilon")):
            bad(f"results.defenses ({d['name']}): params.target_epsilon", "a number or null")
    for a in res.get("attacks") or []:
        if not all(_is_num(a.get(k)) for k in ("leakage", "coverage", "coverage_baseline")):
            bad("results.attacks", "a list of objects with numeric leakage and coverage")
    return row


def _dataset(resolved: Path) -> str | None:
    """``data.dataset.name`` of a run's ``resolved.yaml`` (None when there is none)."""
    import yaml

    if not resolved.is_file():
        return None
    try:
        node = yaml.safe_load(_read(resolved))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise TestbedError(f"{resolved}:{mark.line + 1 if mark else 1}: not YAML") from None
    for key in ("data", "dataset", "name"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, str) else None


def load_rows(run_dir: str | Path) -> tuple[Path, list[dict]]:
    """The file read and its rows: a sweep's ``results.jsonl``, or a single run's ``results.json``
    as the one row ``{"results": ...}``; each row gets ``dataset`` from its ``resolved.yaml``.
    What it cannot read raises :class:`~testbed.errors.TestbedError` naming the file and line."""
    run = Path(run_dir)
    if not run.is_dir():
        raise TestbedError(f"{run}: no such run directory")
    path = run / "results.jsonl"
    if path.is_file():
        rows = []
        for lineno, line in enumerate(_read(path).splitlines(), 1):
            if line.strip():
                row = _check_row(_json(line, path, lineno), f"{path}:{lineno}")
                cell = str(row.get("cell", ""))
                if cell and "/" not in cell and cell not in (".", ".."):
                    row["dataset"] = _dataset(run / "cells" / cell / "resolved.yaml")
                rows.append(row)
        return path, rows
    path = run / "results.json"
    if path.is_file():
        row = _check_row({"results": _json(_read(path), path)}, f"{path}:1")
        return path, [{**row, "dataset": _dataset(run / "resolved.yaml")}]
    raise TestbedError(f"{run}: no results.jsonl (a sweep) or results.json (a single run)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.frontier", description=__doc__)
    ap.add_argument("run_dir")
    ap.add_argument("--utility", default="distance_accuracy")
    a = ap.parse_args(argv)
    try:
        path, rows = load_rows(a.run_dir)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    have = sorted({k for r in rows for k in (r["results"].get("utility") or {})})
    if a.utility not in have:
        print(
            f"error: --utility {a.utility}: not in {path}; it has: {', '.join(have) or 'none'}",
            file=sys.stderr,
        )
        return 2
    table = frontier_rows(rows, a.utility)
    print(
        f"| setting | seeds | ε claimed | utility.{a.utility} | leakage (worst attack) | coverage@r | prior coverage |"
    )
    print("|---|---|---|---|---|---|---|")
    for t in table:
        eps = "∞" if math.isinf(t["epsilon"]) else f"{t['epsilon']:.3g}"
        print(
            f"| {t['setting']} | {t['seeds']} | {eps} | {_fmt(t['utility'])} | "
            f"{_leak_fmt(t['leakage'])} | {_leak_fmt(t['coverage'])} | "
            f"{_leak_fmt(t['coverage_baseline'])} |"
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
            f"| {bs} | {ds} | {name}: {_fmt(t['utility'])} | {_leak_fmt(t['leakage'])} | "
            f"{_leak_fmt(t['coverage'])} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
