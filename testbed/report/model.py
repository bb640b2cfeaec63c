"""What the report shows, gathered from a run directory into memory: the cells' rows, their
aggregation over seeds, the metric columns, the headline metric and each threat's worst leak.

Reads ``results.jsonl`` (a sweep: one row per cell) or ``results.json`` (a single run), the
``testbed attack`` re-runs saved beside them, ``run_info.json`` and the sweep's cell list; the
evidence arrays of a leak are read on demand (:func:`evidence_for`). Nothing here renders.
The only arithmetic is aggregation over seeds (mean and 95 % Student-t interval, clipped to
[0, 1] for :data:`UNIT_METRICS`, on the log scale for a quantity that is never negative:
:func:`testbed.scoring.accuracy.summarise`) and the Pareto front of the aggregated points.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.report.families import FAMILIES as FAMILIES
from testbed.report.families import NOT_PLOTTED as NOT_PLOTTED
from testbed.report.families import family_of as family_of
from testbed.report.points import distinct_points, point_of, series_of
from testbed.run.rundir import is_sweep

# they live in the scoring layer (python -m bench.frontier clips with them too);
# the report modules import them from here
from testbed.scoring.accuracy import UNIT_METRICS as UNIT_METRICS
from testbed.scoring.accuracy import summarise as summarise
from testbed.scoring.evidence import load_evidence
from testbed.scoring.metrics import LEAKAGE_METRICS as _SCORER_LEAKAGE
from testbed.scoring.names import Metric, RowField
from testbed.scoring.results_schema import read_results, read_sweep_rows
from testbed.scoring.vocabulary import NOT_MEASURED, RECORD_KEYS, record_test

#: leakage metric -> True when a larger value means more leakage: the scorer's own list
#: (testbed.scoring.metrics.METRIC_KEYS), so every leakage key it writes reaches a table and a plot
LEAKAGE_METRICS: dict[str, bool] = dict(_SCORER_LEAKAGE)
#: an attack row's text fields (identity, failure, notes): never a number
NOT_METRICS = frozenset(RowField)
#: task utility shown beside the error in the results tables: the pinned task metrics (FedBary's
#: contribution Spearman, detection AUC, ...); ``distance_accuracy`` is only 1 - the error there
UTILITY_SHOWN_EXCEPT = (f"utility.{Metric.DISTANCE_ACCURACY}",)
#: the worst case over every attack and target of a cell, so protocols attacked by different
#: attacks share one plot (raw w2 is left out: its scale is the data's, not comparable)
ANY_ATTACK = "any_attack"


def num(x: Any) -> float:
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


def load_rows(run_dir: Path) -> tuple[list[dict], dict]:
    """Rows (one per cell) and run information of a run directory; a row's ``results`` parsed
    once into the typed :class:`~testbed.scoring.results_models.RunResults` (a misspelt or
    missing field stops here, in one line naming the file and the field)."""
    run_dir = Path(run_dir)
    info: dict[str, Any] = {}
    if (run_dir / "run_info.json").is_file():
        info = json.loads((run_dir / "run_info.json").read_text())
    if is_sweep(run_dir):
        rows = [
            {**{k: v for k, v in r.items() if k != "results"}, "results": r.results}
            for r in read_sweep_rows(run_dir / "results.jsonl")
        ]
        info["kind"] = "sweep"
        for row in rows:  # rows of `testbed attack` re-runs saved in each cell
            merge_reruns(row, run_dir / "cells" / str(row.get("cell", "")))
        if (run_dir / "sweep.json").is_file():
            info["sweep"] = json.loads((run_dir / "sweep.json").read_text())
        if (run_dir / "scenario.yaml").is_file():
            info["scenario_text"] = (run_dir / "scenario.yaml").read_text()
        return distinct_points(rows), info
    if (run_dir / "results.json").is_file():
        res = read_results(run_dir / "results.json")
        info["kind"] = "single"
        if (run_dir / "resolved.yaml").is_file():
            info["scenario_text"] = (run_dir / "resolved.yaml").read_text()
        row = {"cell": res.config_hash, "seed": res.seed, "label": "base", "results": res}
        row.update(setting={}, labels={})
        merge_reruns(row, run_dir)
        return [row], info
    raise TestbedError(f"{run_dir}: no results.json or results.jsonl (not a run directory)")


def merge_reruns(row: dict, cell_dir: Path) -> None:
    """Append the attack rows of ``testbed attack`` re-runs (``attacks-*.json``) to a row."""
    from testbed.run.rerun import saved_attack_rows  # lazy: keeps refused input fast

    extra = saved_attack_rows(cell_dir)
    if extra:
        res = row["results"]
        row["results"] = res.model_copy(update={"attacks": [*res.attacks, *extra]})


@dataclass(frozen=True)
class Measurement:
    """One number of a cell: ``column`` is its name in the report's tables and ``aggregate``;
    ``source`` is the accuracy quantity, ``transcript``, ``observer``, ``ledger`` or the attack's
    label; ``target`` the attacked or protected party, ``worst`` (over targets) or empty."""

    column: str
    source: str
    target: str
    metric: str
    value: float


def attack_measurements(res: dict) -> list[Measurement]:
    """Per attack row and metric ``attack[target].metric``; then the worst case over targets as
    ``attack.metric`` and, for leakage metrics (raw w2 left out), over every attack and target as
    ``any_attack.metric``. A record test that did not run gives no ``record_leak`` /
    ``record_leakage`` figure (results written before issue 46 wrote 0 there)."""
    out: list[Measurement] = []
    worst: dict[tuple[str, str], list[float]] = defaultdict(list)
    for a in res.get("attacks") or []:
        # a record test that did not run has no figure (not a 0: testbed.scoring.vocabulary)
        unmeasured = RECORD_KEYS if record_test(a)[0] == NOT_MEASURED else ()
        for k, v in a.items():
            if k in NOT_METRICS or k in unmeasured:
                continue
            x = num(v)
            if math.isnan(x) and v is not None:
                continue
            col = a.get("label") or a.get("attack")  # one column set per attack configuration
            target = str(a.get("target"))
            out.append(Measurement(f"{col}[{target}].{k}", str(col), target, k, x))
            worst[(str(col), k)].append(x)
    for (_col, metric), xs in list(worst.items()):
        if metric in LEAKAGE_METRICS and metric != Metric.W2:
            worst[(ANY_ATTACK, metric)].extend(xs)
    for (col, metric), xs in worst.items():
        xs = [x for x in xs if not math.isnan(x)]
        if xs:
            x = max(xs) if LEAKAGE_METRICS.get(metric, True) else min(xs)
            out.append(Measurement(f"{col}.{metric}", col, "worst", metric, x))
    return out


#: parties whose claimed ε is the same in every setting are shown as one row, column, view or
#: hover line once there are this many (a 100-client run listed 100 identical rows of "∞")
GROUP_PARTIES = 4
_EPS = "eps_claimed["


def natural(name: str) -> tuple:
    """Sort key that puts client_2 before client_10."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def parties_label(parties, every: bool) -> str:
    """Several parties in one cell: ``all 100 parties (client_0 … client_99)`` when they are
    every party there is (``every``), else each of them by name."""
    parties = sorted(parties, key=natural)
    if every:
        return f"all {len(parties)} parties ({parties[0]} … {parties[-1]})"
    return f"{len(parties)} parties: " + ", ".join(parties)


def eps_groups(agg: dict, keys=None) -> list[tuple[str, str]]:
    """The claimed-ε columns of ``agg`` (over the settings ``keys``, default all) as
    ``(label, column)``: one per party, in natural order, except that at least
    :data:`GROUP_PARTIES` parties whose column is the same in every setting share one, labelled
    ``eps_claimed[all 100 parties (client_0 … client_99)]`` (or with their names), where the
    first of them is."""
    keys = list(agg) if keys is None else list(keys)
    cols = sorted(
        {c for k in keys for c in agg[k] if c.startswith(_EPS)},
        key=lambda c: natural(c[len(_EPS) : -1]),
    )
    same: dict[tuple, list[str]] = {}
    for c in cols:
        same.setdefault(tuple(tuple(agg[k].get(c, ())) for k in keys), []).append(c)
    group_of = {c: g for g in same.values() for c in g}
    out, done = [], set()
    for c in cols:
        group = group_of[c]
        if len(group) < GROUP_PARTIES:
            out.append((c, c))
        elif group[0] not in done:
            done.add(group[0])
            names = [g[len(_EPS) : -1] for g in group]
            out.append((f"{_EPS}{parties_label(names, len(group) == len(cols))}]", group[0]))
    return out


def claimed_eps(res: dict) -> dict[str, float]:
    """Claimed epsilon per party; a party no mechanism protects has no guarantee (inf)."""
    out = {p: math.inf for p in res.get("parties") or {}}
    out.update({p: num(v.get("epsilon")) for p, v in (res.get("privacy") or {}).items()})
    return out


def measurements(res: dict) -> list[Measurement]:
    """Every scalar number of one cell's results: accuracy, task utility, transcript sizes, the
    observer's share, claimed epsilon per party, the attacks' metrics."""
    out = []
    for q, acc in (res.get("accuracy") or {}).items():
        for m in (Metric.ESTIMATE, Metric.EXACT, Metric.RELATIVE_ERROR):
            out.append(Measurement(f"{q}.{m}", q, "", m, num(acc.get(m))))
    head = res.get(HEADLINE) or {}
    if head:
        q = f"{HEADLINE}.relative_error"
        out.append(
            Measurement(
                q, HEADLINE, "", Metric.RELATIVE_ERROR, num(head.get(Metric.RELATIVE_ERROR))
            )
        )
    sec = head.get("secondary") or {}
    if sec:  # a ranking headline's error (FedBary's distances), kept beside it
        q = SECONDARY_ERROR
        out.append(
            Measurement(
                q, SECONDARY, "", Metric.RELATIVE_ERROR, num(sec.get(Metric.RELATIVE_ERROR))
            )
        )
    for k, v in sorted((res.get("utility") or {}).items()):
        out.append(Measurement(f"utility.{k}", "utility", "", k, num(v)))
    tr = res.get("transcript") or {}
    ov = res.get("observer_view") or {}
    for source, prefix, part in (("transcript", "", tr), ("observer", "observer_", ov)):
        for m in ("messages", "bytes"):
            if part.get(m) is not None:
                out.append(Measurement(prefix + m, source, "", m, num(part[m])))
    for p, e in claimed_eps(res).items():
        out.append(Measurement(f"eps_claimed[{p}]", "ledger", p, "eps_claimed", e))
    return out + attack_measurements(res)


def flatten(row: dict) -> dict[str, Any]:
    """A cell's identifiers and every scalar number by column name."""
    res = row["results"]
    out: dict[str, Any] = {
        "cell": row.get("cell", ""),
        "protocol": res.get("protocol", {}).get("name"),
        "mode": res.get("protocol", {}).get("mode"),
        "series": series_of(row),
        "setting": point_of(row),
        "seed": row.get("seed"),
        "observer": (res.get("observer_view") or {}).get("observer"),
    }
    out.update({m.column: m.value for m in measurements(res)})
    return out


def missing_cell(a: dict[str, Any], column: str) -> str:
    """What a table shows for a column a setting lacks: "not measured" for a record figure of
    an attack whose reconstruction was scored (its coverage is there) but whose record test
    did not run (:func:`testbed.scoring.vocabulary.record_test`), else "–" (the attack or
    figure is not part of that setting)."""
    stem, _, metric = column.rpartition(".")
    if metric in RECORD_KEYS and f"{stem}.coverage" in a:
        return NOT_MEASURED
    return "–"


def utility_columns(agg, keys) -> list[str]:
    """The task-utility columns (``utility.<name>``) the settings ``keys`` of ``agg`` have, but
    the ones the error column already says (:data:`UTILITY_SHOWN_EXCEPT`)."""
    return sorted(
        {
            c
            for k in keys
            for c in agg[k]
            if c.startswith("utility.") and c not in UTILITY_SHOWN_EXCEPT
        }
    )


#: results.json's one error of a run (testbed.run.evaluate.headline_accuracy)
HEADLINE = "accuracy_headline"
#: a ranking headline's secondary error (FedBary's distance error beside its contribution ranking)
SECONDARY = "accuracy_secondary"
SECONDARY_ERROR = f"{SECONDARY}.relative_error"


def error_key(rows: list[dict]) -> str | None:
    """The accuracy quantity of the report's error axis: each run's headline error when every
    row has one (so protocols with different quantities share the axis), else (results written
    before it existed) the first row's first accuracy quantity."""
    if rows and all(r["results"].get(HEADLINE) for r in rows):
        return HEADLINE
    for r in rows:
        acc = r["results"].get("accuracy") or {}
        if acc:
            return next(iter(acc))
    return None


def error_label(rows: list[dict], err_q: str | None) -> str | None:
    """What the error axis is the relative error of, in words: the quantity, or each protocol's
    (``fedwad: wasserstein; fedbary: distance_* (5 values)``) when they differ."""
    if err_q != HEADLINE:
        return err_q
    named: dict[str, str] = {}
    for r in rows:
        h = r["results"][HEADLINE]
        n = len(h.get("keys") or ())
        what = h.get("label") or str(h.get("quantity", "?")) + (f" ({n} values)" if n > 1 else "")
        named.setdefault(str((r["results"].get("protocol") or {}).get("name", "?")), what)
    if len(set(named.values())) == 1:
        return next(iter(named.values()))
    if any(RANKED in q for q in named.values()):  # each says what its error is
        return "; ".join(f"{p}: {error_words(q)}" for p, q in named.items())
    return "; ".join(f"{p}: {q}" for p, q in named.items())


#: the mark of a ranking headline's label (testbed.run.evaluate: FedBary's contribution ranking)
RANKED = "1 − Spearman ρ"


def error_words(label: str) -> str:
    """The error axis in words: ``relative error of <label>``, or the label itself when it says
    what its error is (a ranking headline's ``1 − Spearman ρ``)."""
    return label if RANKED in label else f"relative error of {label}"


def error_title(err_key: str, label: str | None = None, interval: str = "95 % CI") -> str:
    """The error axis' title: ``label`` (:func:`error_label`) or the column's quantity, and
    what the error bars are (``interval``)."""
    return f"{error_words(label or err_key.split('.')[0])} (mean, {interval})"


def aggregate(rows: list[dict]) -> dict[tuple[str, str], dict[str, Any]]:
    """(series, point) -> {"n": seeds, metric: (mean, lo, hi)} over the cells' seeds."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(series_of(r), point_of(r))].append(flatten(r))
    out = {}
    for key, flats in groups.items():
        agg: dict[str, Any] = {"n": len(flats), "seeds": [f["seed"] for f in flats]}
        names = sorted({k for f in flats for k, v in f.items() if isinstance(v, (int, float))})
        for k in names:
            if k in ("seed",):
                continue
            agg[k] = summarise([num(f.get(k)) for f in flats], k.rsplit(".", 1)[-1])
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


def settings_in_order(agg) -> list[tuple[str, str]]:
    """The settings of ``agg`` as the report lists and numbers them: by protocol series, and
    within one in the order the run made them (:func:`aggregate` keeps the rows' order: a
    sweep's own order, as ``testbed run`` prints it), not as text (``1, 10, 3``)."""
    first = {k: i for i, k in enumerate(agg)}
    return sorted(agg, key=lambda k: (k[0], first[k]))


def point_id(agg, key) -> int:
    """The setting's number (the "#" of the tables and figures)."""
    return settings_in_order(agg).index(key) + 1


def setting_name(point: str) -> str:
    return "no defense" if point in ("none", "base", "[]", "defenses=none") else point


#: what a headline metric measures, in words (DESIGN.md's pinned definitions)
MEANING = {
    Metric.RECORD_LEAKAGE: "record leakage (excess of coverage or exact recovery, raw or up to a "
    "transform, over the same figure on population rows no party holds; 0 unless the output is "
    "closer to the party's rows than to the population, permutation test at 5 %)",
    Metric.LEAKAGE: "distributional leakage (1 − W2 to the data / W2 of the prior-only baseline)",
    Metric.COVERAGE: "coverage@r (share of private rows with a reconstruction within r)",
    Metric.MATCHING_RATE: "matching rate (share of retrieved words in the private text)",
    Metric.AUC: "membership ROC-AUC",
    Metric.ADVANTAGE: "membership advantage max(TPR − FPR)",
}


def headline_metric(metric_keys: list[str]) -> str | None:
    for m in MEANING:
        if f"{ANY_ATTACK}.{m}" in metric_keys:
            return f"{ANY_ATTACK}.{m}"
    return None


#: attack output kind -> (threat, figure metric shown in the coverage matrix)
THREATS: dict[str, tuple[str, str]] = {
    "points": ("reconstruction", Metric.COVERAGE),
    "scores": ("membership", Metric.AUC),
    "histogram": ("attribute/label", Metric.TV),
    "words": ("text retrieval", Metric.MATCHING_RATE),
}


def cell_dir_of(run_dir: Path, row: dict) -> Path:
    """Where a row's own run directory is: the run itself, or a sweep's ``cells/<hash>/``."""
    cell = run_dir / "cells" / str(row.get("cell", ""))
    return cell if row.get("cell") and cell.is_dir() else run_dir


def best_rows(rows: list[dict], agg) -> dict[tuple[str, str], dict[str, Any]]:
    """(protocol, threat) -> the attack with the largest leak of that threat, over settings,
    with its setting key, attack, target and observer (mean over seeds)."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        s, p = series_of(r), point_of(r)
        for a in r["results"].get("attacks") or []:
            kind = a.get("kind")
            if kind not in THREATS:
                continue
            threat, metric = THREATS[kind]
            col = a.get("label") or a.get("attack")  # the column set of its configuration
            # the record-leak rule (issue 22), where the record test ran (issue 46)
            if kind == "points" and record_test(a)[0] != NOT_MEASURED:
                metric = Metric.RECORD_LEAKAGE
            name = f"{col}[{a.get('target')}].{metric}"
            t = agg[(s, p)].get(name)
            if t is None or not math.isfinite(t[0]):
                continue
            cur = best.get((s, threat))
            sign = 1 if LEAKAGE_METRICS[metric] else -1
            # a measured record figure ranks above a coverage whose record test did not run
            rank = (metric == Metric.RECORD_LEAKAGE, sign * t[0])
            if cur is None or rank > cur["rank"]:
                best[(s, threat)] = {
                    "value": t,
                    "metric": metric,
                    "attack": col,
                    "name": a.get("attack"),  # the plugin's name (col may be a label)
                    "source": a.get("source"),  # a `testbed attack` row's attacks file
                    "target": str(a.get("target")),
                    "observer": str(a.get("observer", "?")),
                    "key": (s, p),
                    "kind": kind,
                    "rank": rank,
                    "record_reason": record_test(a)[1],
                }
    return best


def evidence_for(run_dir: Path, rows: list[dict], b: dict) -> dict[str, Any] | None:
    """The saved arrays of the best attack row, from the lowest seed of its setting."""
    cells = sorted(
        (r for r in rows if (series_of(r), point_of(r)) == b["key"]),
        key=lambda r: str(r.get("seed")),
    )
    for r in cells:
        ev = load_evidence(cell_dir_of(run_dir, r))
        for i, a in enumerate(r["results"].get("attacks") or []):
            col = a.get("label") or a.get("attack")
            if (col, str(a.get("target"))) == (b["attack"], b["target"]) and i in ev:
                return {**ev[i], "seed": r.get("seed")}
    return None


def leakage_columns(agg) -> list[str]:
    """The aggregated leakage columns ``attack.metric`` (worst over targets), the cross-protocol
    ``any_attack`` view first."""
    return sorted(
        {
            k
            for a in agg.values()
            for k in a
            if "[" not in k
            and "." in k
            and k.rsplit(".", 1)[1] in LEAKAGE_METRICS
            and not k.endswith(Metric.RELATIVE_ERROR)
            and not k.endswith((".estimate", ".exact"))
        },
        key=lambda k: (not k.startswith(ANY_ATTACK + "."), k),
    )


@dataclass
class ReportData:
    """Everything a report section reads: the rows as the files hold them and their aggregation.

    ``agg`` maps (protocol series, setting) to ``{"n": seeds, "seeds": [...], column: (mean, lo,
    hi)}``; ``err_key`` is the accuracy column (``<quantity>.relative_error``; normally the
    runs' headline error, ``accuracy_headline.relative_error``) and ``err_label`` what it is the
    error of in words, ``lead`` the headline's leakage column, ``best`` each (protocol,
    threat)'s largest leak (:func:`best_rows`).
    """

    run_dir: Path
    rows: list[dict]
    info: dict[str, Any]
    agg: dict[tuple[str, str], dict[str, Any]]
    err_key: str | None
    metric_keys: list[str]
    lead: str | None
    best: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    err_label: str | None = None

    @property
    def err_q(self) -> str | None:
        """The quantity of ``err_key`` (:func:`error_key`)."""
        return self.err_key.rsplit(".", 1)[0] if self.err_key else None

    @property
    def first(self) -> dict:
        """The first cell's results (scenario name, config hash of a single run)."""
        return self.rows[0]["results"]

    @property
    def seeds(self) -> list:
        return sorted({r.get("seed") for r in self.rows}, key=str)

    @property
    def config_hash(self) -> str:
        return self.info.get("sweep", {}).get("sweep_hash") or self.first.get("config_hash", "")

    @property
    def title(self) -> str:
        return f"Leakage vs accuracy — {self.first.get('scenario', self.run_dir.name)}"

    @property
    def protocols(self) -> list[str]:
        return sorted({k[0] for k in self.agg})


def gather(run_dir: str | Path) -> ReportData:
    """Read a run directory into a :class:`ReportData` (the rows and their aggregation)."""
    run_dir = Path(run_dir)
    rows, info = load_rows(run_dir)
    if not rows:
        raise TestbedError(f"{run_dir}: no finished cells to report")
    agg = aggregate(rows)
    err_q = error_key(rows)
    metric_keys = leakage_columns(agg)
    return ReportData(
        run_dir=run_dir,
        rows=rows,
        info=info,
        agg=agg,
        err_key=f"{err_q}.relative_error" if err_q else None,
        metric_keys=metric_keys,
        lead=headline_metric(metric_keys),
        best=best_rows(rows, agg),
        err_label=error_label(rows, err_q),
    )


def front_membership(data: ReportData) -> dict[tuple[str, str], list[str]]:
    """(series, setting) -> the leakage columns on whose Pareto front (error vs leakage, both
    minimised) the setting lies; raw ``w2`` is left out (its scale is the data's)."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    agg, err_key = data.agg, data.err_key
    if not err_key:
        return out
    for mk in data.metric_keys:
        metric = mk.rsplit(".", 1)[1]
        if metric == Metric.W2:
            continue
        higher = LEAKAGE_METRICS[metric]
        keys = [k for k in agg if mk in agg[k] and err_key in agg[k]]
        pts = [(agg[k][err_key][0], agg[k][mk][0] * (1 if higher else -1)) for k in keys]
        for i in pareto_front(pts):
            out[keys[i]].append(mk)
    return out
