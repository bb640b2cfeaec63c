"""Frontier summary (testbed.scoring.frontier), the coverage matrix (testbed.report.coverage) and the shipped
frontier scenario."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from testbed.registry import PROTOCOLS
from testbed.report.coverage import SPECS, THREATS, _measure
from testbed.scoring.frontier import best_per_budget, frontier_rows, setting_label

ROOT = Path(__file__).resolve().parents[1]


def _row(proto, eps, util, leak, seed, defenses=()):
    return {
        "setting": {"data": {"dataset": {"name": "digits"}}},
        "seed": seed,
        "results": {
            "protocol": {"name": proto, "params": {}},
            "defenses": list(defenses),
            "privacy_epsilon": eps,
            "utility": {"distance_accuracy": util},
            "attacks": [{"leakage": leak, "coverage": leak, "coverage_baseline": 0.0}],
        },
    }


def test_frontier_rows_and_best_per_budget():
    rows = [_row("a", "inf", 1.0, 1.0, s) for s in range(3)]
    rows += [_row("b", 1.0, 0.2 + 0.1 * s, 0.0, s) for s in range(3)]
    rows += [_row("c", 10.0, 0.5, 0.1, s) for s in range(3)]
    table = frontier_rows(rows)
    by = {t["setting"]: t for t in table}
    assert by["digits: b"]["utility"][0] == pytest.approx(0.3)
    assert by["digits: b"]["utility"][1] < 0.3 < by["digits: b"]["utility"][2]
    assert math.isinf(by["digits: a"]["epsilon"])
    best = {b: t["setting"] for b, _, t in best_per_budget(table)}
    assert best == {1.0: "digits: b", 10.0: "digits: c", math.inf: "digits: a"}


def test_setting_label_names_noise_and_defense():
    s = {
        "setting": {"data": {"dataset": {"name": "wine"}}},
        "results": {
            "protocol": {"name": "dp_jl_ot", "params": {"target_epsilon": 10.0}},
            "defenses": [{"name": "secret_isometry_mask", "params": {"mode": "per_party"}}],
        },
    }
    assert setting_label(s) == "wine: dp_jl_ot(ε=10) + secret_isometry_mask(per_party)"


def test_coverage_specs_fill_every_protocol_and_threat():
    # every registered protocol has a row, every cell is measured or has a concrete reason
    builtin = {n for n, c in PROTOCOLS.items() if c.__module__.startswith("protocols.")}
    assert builtin <= set(SPECS)
    for proto, cells in SPECS.items():
        assert set(cells) == set(THREATS), proto
        for threat, spec in cells.items():
            if isinstance(spec, str):
                assert len(spec) > 20, (proto, threat)
            else:
                assert (ROOT / "scenarios" / spec[0]).exists(), spec[0]


def test_coverage_cell_is_measured():
    cell = _measure(
        "fedwad_clustering", "reconstruction", SPECS["fedwad_clustering"]["reconstruction"]
    )
    assert cell["metric"] == "coverage@r" and cell["value"] > cell["baseline"]


def test_frontier_scenario_validates_with_matched_budgets():
    from testbed.run.sweep import expand_cells
    from testbed.scenario.loading import load_scenario

    cells = expand_cells(load_scenario(ROOT / "scenarios" / "frontier.yaml"))
    # every noisy setting targets epsilon 1 or 10 (matched), on two datasets
    targets, datasets = set(), set()
    for c in cells:
        s = c.resolved
        datasets.add(s["data"]["dataset"]["name"])
        for p in [s["protocol"].get("params", {})] + [d.get("params", {}) for d in s["defenses"]]:
            if p.get("target_epsilon") is not None:
                targets.add(p["target_epsilon"])
    assert targets == {1.0, 10.0}
    assert datasets == {"digits", "breast_cancer"}
