"""What ``testbed run`` prints after a sweep: one line per setting, the baseline (no defense)
first and then the sweep's own order, each setting labelled by the field it sets
(``noise_multiplier=0.1``), every number in the report's own format (``testbed.report.fmt``:
three significant figures, a relative error from 1000 % on in words). The means over seeds are
the report's own aggregation; their intervals are in the report."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from testbed.report.fmt import fmt, pct
from testbed.report.model import (
    ANY_ATTACK,
    aggregate,
    distinct_points,
    error_key,
    missing_cell,
    natural,
    num,
    point_of,
    series_of,
    utility_columns,
)

# the report names a setting as testbed run prints it (and matches testbed audit's rows by it)
from testbed.report.points import setting_label as setting_label
from testbed.scoring.names import Metric
from testbed.scoring.verdict import verdict
from testbed.scoring.vocabulary import MEASURED, NOT_APPLICABLE, NOT_MEASURED, record_test

__all__ = [
    "POPULATION_MIN",
    "attack_groups",
    "population_lines",
    "privacy_lines",
    "record_line",
    "setting_label",
    "sweep_rows",
]

#: parties named on a failed assumption's line; the rest are counted (the report lists them)
SHOWN_PARTIES = 3


def _is_baseline(row: dict) -> bool:
    return not row["results"].get("defenses")


def sweep_rows(rows: list[dict]) -> tuple[list[str], list[list[Any]], bool]:
    """(header, table rows, whether attack columns are shown) of a sweep's summary."""
    rows = distinct_points(rows)  # settings that would read alike are kept apart
    agg = aggregate(rows)  # the report's own aggregation: mean over seeds per setting
    err_q = error_key(rows)
    cols = [
        (f"{err_q}.relative_error", "rel. error", pct),
        *((u, u.split(".", 1)[1], fmt) for u in utility_columns(agg, agg)),  # the task's own
        (f"{ANY_ATTACK}.leakage", Metric.LEAKAGE, fmt),
        (f"{ANY_ATTACK}.coverage", Metric.COVERAGE, fmt),
        (f"{ANY_ATTACK}.record_leakage", "record leakage", fmt),
        (f"{ANY_ATTACK}.tpr_at_0_1pct_fpr", "TPR@0.1%FPR", fmt),  # where a membership attack ran
    ]
    cols = [c for c in cols if any(c[0] in a for a in agg.values())]
    order: dict[tuple[str, str], tuple[bool, int, str]] = {}
    claims: dict[tuple[str, str], list[float]] = {}
    for i, row in enumerate(rows):  # the sweep's own order, the baseline first
        key = (series_of(row), point_of(row))
        if key not in order:
            order[key] = (not _is_baseline(row), i, setting_label(row))
        eps = row["results"].get(Metric.PRIVACY_EPSILON)  # the worst claim of the parties that sent
        if isinstance(eps, (int, float)):
            claims.setdefault(key, []).append(float(eps))
    keys = sorted(order, key=lambda k: order[k][:2])
    table = []  # names whole: a cut name ("fedwad(interpolation=exact,ite") names nothing
    for key in keys:
        a = agg[key]
        # results written before privacy_epsilon: every party's claim, silent ones included
        eps = claims.get(key) or [v[0] for k, v in a.items() if k.startswith("eps_claimed[")]
        table.append(
            [key[0], order[key][2], a["n"]]
            + [show(a[k][0]) if k in a else _missing(a, k) for k, _, show in cols]
            + [fmt(max(eps)) if eps else fmt(float("inf"))]
        )
    header = ["protocol", "setting", "seeds"] + [c[1] for c in cols] + ["claimed eps"]
    return header, table, any(c[0].startswith(ANY_ATTACK) for c in cols)


def _missing(a: dict, column: str) -> str:
    """A figure a setting lacks: "not measured" for a record figure whose test did not run,
    else "-" (the report's :func:`~testbed.report.model.missing_cell`)."""
    text = missing_cell(a, column)
    return "-" if text == "–" else text


def record_line(rows: list[dict]) -> str | None:
    """One line on the record test of a sweep's reconstructions: in how many settings it ran
    (against population rows, or an exact recovery) and in how many it was not measured, and
    why; None without reconstructions."""
    states: dict[tuple[str, str], set[str]] = {}
    why: list[str] = []
    for r in rows:
        for a in r["results"].get("attacks") or []:
            state, reason = record_test(a)
            if state == NOT_APPLICABLE or "failed" in a:
                continue
            states.setdefault((series_of(r), point_of(r)), set()).add(state)
            if state == NOT_MEASURED and reason not in why:
                why.append(reason)
    if not states:
        return None
    off = sum(NOT_MEASURED in v for v in states.values())
    if not off:
        return f"record leakage: record test {MEASURED} in every setting (worst attack and target)"
    return (
        f"record leakage: record test {NOT_MEASURED} in {off} of {len(states)} setting(s) "
        f"({'; '.join(why)}); the leakage and coverage there are distributional and "
        "coverage figures only"
    )


def privacy_lines(results: dict) -> list[str]:
    """What a single run's summary says of privacy: the claimed epsilon (the worst over the
    parties that sent; ``∞``, as the sweep table writes it, when one of them has no claim) and
    each failed assumption behind it, as the report words it (the assumption, then each
    party's detail), its parties capped at :data:`SHOWN_PARTIES`."""
    out = []
    if Metric.PRIVACY_EPSILON in results:
        eps = num(results[Metric.PRIVACY_EPSILON])
        if math.isfinite(eps):
            out.append(f"claimed eps: {fmt(eps)}")
        elif results.get("privacy"):  # a defense protects some parties, not all that sent
            out.append("claimed eps: ∞ (a party that sent has no DP claim; see the report)")
        else:
            out.append("claimed eps: ∞ (no DP defense)")
    failed: dict[str, list[str]] = {}
    for x in results.get("privacy_assumptions") or []:
        if not x.get("holds"):
            who = "" if x.get("party") in (None, "*") else f"{x['party']}: "
            failed.setdefault(x.get("assumption", "?"), []).append(who + x.get("detail", ""))
    for assumption, why in failed.items():
        more = (
            f"; {len(why) - SHOWN_PARTIES} more in the report" if len(why) > SHOWN_PARTIES else ""
        )
        out.append(
            f"assumption failed, the claim does not hold: {assumption} "
            f"({'; '.join(why[:SHOWN_PARTIES])}{more})"
        )
    out += guard_lines(results)
    return out


def guard_lines(results: dict) -> list[str]:
    """``guard: record`` lets a leaky run finish: say so, with its first finding (the rest are
    in ``results.json``'s ``guard.findings``), rather than a summary that reads as clean."""
    guard = results.get("guard") or {}
    n = int(guard.get("violations") or 0)
    if not n:
        return []
    first = (guard.get("findings") or [{}])[0].get("message", "").removeprefix("privacy guard: ")
    return [
        f"privacy guard ({guard.get('mode', '?')}): {n} violation(s), every one in results.json "
        f"guard.findings; the first: {first}"
    ]


#: an attack run against more targets than this is summarised as a population (how many leak,
#: quantiles, the worst few by name) instead of one line per target
POPULATION_MIN = 20
#: the worst targets a population line names
WORST_SHOWN = 3


def _group_key(a: dict) -> tuple:
    return (a.get("label") or a.get("attack"), a.get("method"), str(a.get("observer")))


def attack_groups(rows: list[dict]) -> list[tuple[tuple, list[dict]]]:
    """The attack rows grouped by attack setting and observer (first-seen order), each group's
    rows in natural order of their target (client_2 before client_10)."""
    groups: dict[tuple, list[dict]] = {}
    for a in rows:
        groups.setdefault(_group_key(a), []).append(a)
    return [(k, sorted(v, key=lambda a: natural(str(a.get("target"))))) for k, v in groups.items()]


def _quantiles(values: list[float]) -> str:
    q = np.quantile(np.asarray(values, dtype=float), [0.0, 0.25, 0.5, 0.75, 1.0])
    return ", ".join(
        f"{n} {fmt(float(v))}" for n, v in zip(("min", "q25", "median", "q75", "max"), q)
    )


def population_lines(
    key: tuple, rows: list[dict], figures: tuple[str, ...], names: dict[str, str]
) -> list[str]:
    """One attack setting run against many targets, as a distribution over them: how many
    leak (a record leak or membership signal, :func:`~testbed.scoring.verdict.verdict`) and of
    which kind, the quantiles of each of ``figures`` the rows have (and of ``record_leakage``;
    ``names``: how a figure is written), and the worst
    :data:`WORST_SHOWN` targets by name (failed rows are left to :func:`failed_attacks`)."""
    ok = [a for a in rows if "failed" not in a]
    name, method, observer = key
    head = f"attack {name}{' (' + method + ')' if method else ''} (observer {observer})"
    if not ok:
        return [f"{head}: every one of {len(rows)} targets FAILED"]
    judged = [(a, verdict(a)) for a in ok]
    kinds: dict[str, int] = {}
    for _, v in judged:
        kinds[v.kind] = kinds.get(v.kind, 0) + 1
    leaks = sum(v.leak for _, v in judged)
    failed = len(rows) - len(ok)
    out = [
        f"{head} on {len(ok)} targets: {leaks} of {len(ok)} leak ("
        + ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        + ")"
        + (f"; {failed} FAILED" if failed else "")
    ]
    for k in (*figures, Metric.RECORD_LEAKAGE):
        vals = [
            float(a[k]) for a in ok if isinstance(a.get(k), (int, float)) and math.isfinite(a[k])
        ]
        if vals:
            out.append(f"  {names.get(k, k)} over targets: {_quantiles(vals)}")
    worst = sorted(judged, key=lambda av: av[1].rank, reverse=True)[:WORST_SHOWN]
    out.append(
        "  worst: "
        + "; ".join(f"{a.get('target')} ({v.kind}, {v.metric} {fmt(v.value)})" for a, v in worst)
    )
    return out
