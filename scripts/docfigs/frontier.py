"""docs/findings/frontier.md: the frontier, the distance matrix, data valuation, the mask attack in domain, the coverage matrix."""

from __future__ import annotations

import numpy as np

from .common import ROOT


def frontier_fedbary() -> dict[str, float]:
    """docs/findings/frontier.md, data-valuation table (``scenarios/frontier_fedbary.yaml``, seeds 0-2):
    per setting (index in the sweep) the report's mean [95 % interval] of the two utilities, the
    worst leakage and coverage@r, and the largest claimed epsilon over parties."""
    import tempfile

    from testbed.report.model import aggregate
    from testbed.run.sweep import expand_cells, run_sweep
    from testbed.scenario.loading import load_scenario

    sc = load_scenario(ROOT / "scenarios/frontier_fedbary.yaml")
    order = list(dict.fromkeys(next(iter(c.labels.values())) for c in expand_cells(sc)))
    with tempfile.TemporaryDirectory(prefix="docs-frontier-") as tmp:
        rows = run_sweep(sc, tmp, jobs=2).rows
    from testbed.report.model import point_of
    from testbed.scoring.metrics import mean_ci

    agg = aggregate(rows)
    out = {}
    for (_, point), a in agg.items():
        i = order.index(point)
        for key in ("contribution_spearman", "detection_auc"):
            vals = [float(r["results"]["utility"][key]) for r in rows if point_of(r) == point]
            m, lo, hi = mean_ci(vals)
            out[f"{i}.utility.{key}.mean"], out[f"{i}.utility.{key}.lo"] = m, lo
            out[f"{i}.utility.{key}.hi"] = hi
        for key in ("any_attack.leakage", "any_attack.coverage"):
            out[f"{i}.{key}.mean"], out[f"{i}.{key}.lo"], out[f"{i}.{key}.hi"] = a[key]
        # the claim of the parties that sent anything (the validation party sends nothing)
        eps = [v[0] for k, v in a.items() if k.startswith("eps_claimed[")]
        finite = [e for e in eps if np.isfinite(e)]
        out[f"{i}.eps"] = max(finite) if finite else float("inf")
    return out


def _frontier_table(name: str, utility: str) -> dict[str, float]:
    """``scenarios/<name>.yaml`` swept (seeds 0-2, 2 jobs) and summarised by ``python -m
    bench.frontier RUN --utility <utility>``: per setting label (``dataset: protocol...``)
    ``<label>.{utility,leakage,coverage}.{mean,lo,hi}`` and ``<label>.eps``; per budget and
    dataset the best setting as ``best.<budget>.<dataset>::<label>`` = its mean utility; for the
    DP baselines ``<label>.{z,op_norm,sigma}.{min,max}`` over seeds (noise multiplier, ||U||_op,
    noise scale); and ``cells``, the number of cells the sweep ran."""
    import os
    import tempfile
    from pathlib import Path

    from bench.frontier import best_per_budget, frontier_rows, setting_label
    from testbed.run.sweep import run_sweep
    from testbed.scenario.loading import load_scenario

    sc = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
    keep = os.environ.get("DOCS_FIGURES_SWEEPS")
    if keep:  # resume (or start) the sweep in DIR/<name>: finished cells are not recomputed
        rows = run_sweep(sc, Path(keep) / name, jobs=2).rows
    else:
        with tempfile.TemporaryDirectory(prefix="docs-frontier-") as tmp:
            rows = run_sweep(sc, tmp, jobs=2).rows
    table = frontier_rows(rows, utility)
    out: dict[str, float] = {"cells": float(len(rows))}
    for t in table:
        out[f"{t['setting']}.eps"] = float(t["epsilon"])
        for key in ("utility", "leakage", "coverage"):
            m, lo, hi = t[key]
            out[f"{t['setting']}.{key}.mean"] = m
            out[f"{t['setting']}.{key}.lo"], out[f"{t['setting']}.{key}.hi"] = lo, hi
    for b, ds, t in best_per_budget(table):
        out[f"best.{b:g}.{ds}::{t['setting']}"] = t["utility"][0]
    # the DP baselines' noise: z, ||U||_op (sensitivity / 2C) and sigma, lowest and highest seed
    noise: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        o, p = row["results"].get("outputs") or {}, row["results"]["protocol"]["params"]
        if "sigma" in o and "sensitivity" in o and p.get("clip_norm"):
            per = noise.setdefault(setting_label(row), {"z": [], "op_norm": [], "sigma": []})
            per["z"].append(float(o["noise_multiplier"]))
            per["op_norm"].append(float(o["sensitivity"]) / (2 * float(p["clip_norm"])))
            per["sigma"].append(float(o["sigma"]))
    for label, per in noise.items():
        for k, vs in per.items():
            out[f"{label}.{k}.min"], out[f"{label}.{k}.max"] = min(vs), max(vs)
    return out


def frontier_main() -> dict[str, float]:
    """docs/findings/frontier.md, the frontier (``scenarios/frontier.yaml``, seeds 0-2): per setting the
    mean [95 % interval] over seeds of ``utility.distance_accuracy``, the worst attack's leakage
    and coverage@r, the claimed ε; the best setting per budget."""
    return _frontier_table("frontier", "distance_accuracy")


def frontier_matrix() -> dict[str, float]:
    """docs/findings/frontier.md, dataset-distance matrix (``scenarios/frontier_matrix.yaml``, seeds 0-2):
    as :func:`frontier_main` with ``utility.distance_rank``."""
    return _frontier_table("frontier_matrix", "distance_rank")


def mask_in_domain() -> dict[str, float]:
    """docs/findings/frontier.md: ``blind_mask_inversion`` against TriangleWad (k = 1) on digits under the
    shared ``secret_isometry_mask`` (``triangle_wad_digits`` as in
    ``tests/test_secret_mask.py``, seed 0), with the Gaussian prior and with 600 real held-out
    digits as its proxy: coverage@r and leakage (against the prior-only baseline) per party."""
    from dataclasses import replace

    import yaml

    from attacks.blind_mask_inversion import BlindMaskInversion
    from bench.coverage import _heldout
    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world
    from testbed.scenario.loading import parse_scenario
    from testbed.scoring.metrics import coverage_at_r, w2_leakage

    path = ROOT / "scenarios/triangle_wad_digits.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["protocol"]["params"].update({"support_size": 1, "gamma_mean": 0.5, "gamma_std": 0.5})
    raw["data"]["transform"] = {"name": "scale", "params": {"factor": 0.0625, "clip_norm": 5.0}}
    raw["data"].pop("noise", None)
    raw["defenses"] = [{"name": "secret_isometry_mask"}]
    world = build_world(parse_scenario(yaml.safe_dump(raw), str(path), str(path.parent)))
    _out = run_and_evaluate(world)
    tr = _out.transcript
    public = replace(
        world.public, extra={**world.public.extra, "candidates": _heldout(world)[:600]}
    )
    view = tr.view("server", own_data={p: d.X for p, d in world.parties.items()}, public=public)
    out = {}
    for proxy in ("prior", "candidates"):
        att = BlindMaskInversion(BlindMaskInversion.Config(proxy=proxy))
        base = {b.target: b for b in att.baseline(view, public, np.random.default_rng(0))}
        for o in att.run(view, public, np.random.default_rng(0)):
            X = world.parties[o.target].X
            b = base[o.target]
            out[f"{proxy}.{o.target}.coverage"] = coverage_at_r(o.points, X)["coverage"]
            out[f"{proxy}.{o.target}.leakage"] = w2_leakage(
                o.points, o.weights, X, b.points, b.weights
            )["leakage"]
    return out


def coverage_cells() -> dict[str, float]:
    """docs/findings/frontier.md, "Coverage matrix" (``python -m bench.coverage``, seed 0): per protocol
    and threat the best attack's figure (``<protocol>.<threat>.value``) and its baseline
    (``.baseline``), the attack as ``.attack.<name>`` = 1, or ``.not_applicable`` = 1."""
    from bench.coverage import coverage_matrix

    out: dict[str, float] = {}
    for proto, cells in coverage_matrix().items():
        for threat, c in cells.items():
            key = f"{proto}.{threat}"
            if c.get("not_applicable"):
                out[f"{key}.not_applicable"] = 1.0
                continue
            out[f"{key}.attack.{c['attack']}"] = 1.0
            out[f"{key}.value"] = float(c["value"])
            if isinstance(c.get("baseline"), (int, float)):
                out[f"{key}.baseline"] = float(c["baseline"])
    return out


def _findings_seeds() -> list[int]:
    """The seeds docs/findings/findings.md says its frontier_dp table was measured with (its caption's
    ``seed 0`` or ``seeds 0–N``): the figures are recomputed for those, so the check compares like with like
    when a shorter run than the scenario's five seeds was quoted."""
    import re

    text = " ".join((ROOT / "docs/findings/findings.md").read_text().split())
    m = re.search(r"scenarios/frontier_dp\.yaml.{0,300}?\bseeds? (\d+)(?:–(\d+))?", text)
    if not m:
        raise ValueError(
            "docs/findings/findings.md: no 'scenarios/frontier_dp.yaml ... seeds A–B' caption"
        )
    return list(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))


def frontier_dp() -> dict[str, float]:
    """docs/findings/findings.md, "The frontier at the tightest honest accounting" and docs/reference/privacy.md:
    ``scenarios/frontier_dp.yaml`` swept with the seeds the table names (2 jobs;
    ``DOCS_FIGURES_SWEEPS`` keeps and resumes it), per setting (``bench.frontier``'s label):
    ``<label>.{error,distance_error,spearman,leakage,coverage,record}.{mean,lo,hi}`` (the
    headline relative error: of the distance, or FedBary's 1 - Spearman; FedBary's distances'
    error; its contribution Spearman; the worst attack's normalised leakage, coverage@r and
    record leakage against the population) and ``<label>.eps`` (largest claim over seeds)."""
    import os
    import re
    import tempfile
    from pathlib import Path

    from testbed.run.sweep import run_sweep
    from testbed.scenario.loading import parse_scenario

    path = ROOT / "scenarios/frontier_dp.yaml"
    seeds = _findings_seeds()
    text = re.sub(r"(?m)^seeds: .*$", f"seeds: {seeds}", path.read_text())
    sc = parse_scenario(text, str(path), str(path.parent))
    keep = os.environ.get("DOCS_FIGURES_SWEEPS")
    if keep:
        rows = run_sweep(sc, Path(keep) / "frontier_dp", jobs=2).rows
    else:
        with tempfile.TemporaryDirectory(prefix="docs-frontier-dp-") as tmp:
            rows = run_sweep(sc, tmp, jobs=2).rows
    return frontier_dp_summary(rows)


def frontier_dp_summary(rows: list[dict]) -> dict[str, float]:
    """:func:`frontier_dp`'s figures from a sweep's rows (``bench.frontier.load_rows``)."""
    import math
    from collections import defaultdict

    from bench.frontier import setting_label
    from testbed.scoring.accuracy import summarise

    def worst(res: dict, key: str) -> float:
        xs = [float(a[key]) for a in res.get("attacks") or [] if a.get(key) is not None]
        return max(xs, default=math.nan)

    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[setting_label(row)].append(row["results"])
    out: dict[str, float] = {"cells": float(len(rows))}
    for label, res in groups.items():
        eps = [
            math.inf if r["privacy_epsilon"] in (None, "inf") else r["privacy_epsilon"] for r in res
        ]
        out[f"{label}.eps"] = float(max(eps))
        series = {
            "error": [float(r["accuracy_headline"]["relative_error"]) for r in res],
            # FedBary: the headline is its ranking (1 - Spearman); the distances' error beside it
            "distance_error": [
                float(
                    (r["accuracy_headline"].get("secondary") or {}).get("relative_error", math.nan)
                )
                for r in res
            ],
            "spearman": [
                float((r.get("utility") or {}).get("contribution_spearman", math.nan)) for r in res
            ],
            "leakage": [worst(r, "leakage") for r in res],
            "coverage": [worst(r, "coverage") for r in res],
            "record": [worst(r, "record_leakage") for r in res],
        }
        for key, vals in series.items():
            if all(math.isnan(v) for v in vals):
                continue
            metric = {"error": "relative_error", "distance_error": "relative_error"}.get(key, key)
            metric = "record_leakage" if key == "record" else metric
            m, lo, hi = summarise(vals, metric)
            out[f"{label}.{key}.mean"], out[f"{label}.{key}.lo"] = m, lo
            out[f"{label}.{key}.hi"] = hi
    return out
