"""Frontier summary (bench.frontier), the coverage matrix (bench.coverage) and the shipped
frontier scenario."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from bench.coverage import SPECS, THREATS, _measure
from bench.frontier import best_per_budget, frontier_rows, main, setting_label
from testbed.registry import PROTOCOLS

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


def test_setting_label_tells_the_worst_case_calibration_from_the_tight_default():
    # scenarios/frontier_dp.yaml sweeps both at each epsilon: they must not be averaged together
    def row(**params):
        return {
            "setting": {"data": {"dataset": {"name": "digits"}}},
            "results": {
                "protocol": {"name": "fedwad", "params": {}},
                "defenses": [{"name": "gaussian_measure_noise", "params": params}],
            },
        }

    tight = row(target_epsilon=8.0, calibration="tight")
    worst = row(target_epsilon=8.0, calibration="worst_case")
    assert setting_label(tight) == "digits: fedwad + gaussian_measure_noise(ε=8)"
    assert setting_label(worst) == "digits: fedwad + gaussian_measure_noise(ε=8, worst case)"
    assert setting_label(row(calibration="worst_case")).endswith("(worst case)")


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
        s = c.rs.as_json()
        datasets.add(s["data"]["dataset"]["name"])
        for p in [s["protocol"].get("params", {})] + [d.get("params", {}) for d in s["defenses"]]:
            if p.get("target_epsilon") is not None:
                targets.add(p["target_epsilon"])
    assert targets == {1.0, 10.0}
    assert datasets == {"digits", "breast_cancer"}


# --------------------------------------------------------------------------------------------
# python -m bench.frontier RUN_DIR: the command's input, errors and output


def _sweep(run: Path, rows: list[dict], datasets: dict[str, str] | None = None) -> Path:
    """A sweep directory: ``results.jsonl`` of ``rows`` (each gets a cell ``c<i>``) and, per cell
    named in ``datasets``, ``cells/<cell>/resolved.yaml`` with that dataset."""
    run.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, row in enumerate(rows):
        row = {**row, "cell": f"c{i}"}
        lines.append(json.dumps(row))
        if datasets and row["cell"] in datasets:
            cell = run / "cells" / row["cell"]
            cell.mkdir(parents=True)
            resolved = {"data": {"dataset": {"name": datasets[row["cell"]]}}, "seed": row["seed"]}
            (cell / "resolved.yaml").write_text(yaml.safe_dump(resolved))
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    return run


def _unswept(proto, util, leak, seed, utility="distance_accuracy"):
    """A row of a sweep that does not sweep the dataset (scenario ``fr_scn``)."""
    row = _row(proto, "inf", util, leak, seed)
    row["setting"] = {"seed": seed}
    row["results"]["scenario"] = "fr_scn"
    row["results"]["utility"] = {utility: util}
    return row


def _error(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert captured.out == ""
    return lines[0]


def test_frontier_unknown_utility_is_an_error_naming_those_the_results_have(tmp_path, capsys):
    rows = [_row("a", "inf", 1.0, 0.5, 0)]
    rows[0]["results"]["utility"]["distance_rank"] = 0.9
    run = _sweep(tmp_path / "run", rows)
    assert main([str(run), "--utility", "foo"]) == 2
    assert _error(capsys) == (
        f"error: --utility foo: not in {run / 'results.jsonl'}; "
        "it has: distance_accuracy, distance_rank"
    )


@pytest.mark.parametrize(
    "case,expect",
    [
        ("missing", "{run}: no such run directory"),
        ("empty", "{run}: no results.jsonl (a sweep) or results.json (a single run)"),
        ("bad_line", "{run}/results.jsonl:2: not JSON ("),
        ("not_a_row", "{run}/results.jsonl:1: not a results row"),
        ("bad_single", "{run}/results.json:3: not JSON ("),
        ("bad_yaml", "{run}/cells/c0/resolved.yaml:1: not YAML"),
        ("unreadable", "{run}/results.jsonl: not readable"),
    ],
)
def test_frontier_unreadable_input_is_a_one_line_error(tmp_path, capsys, case, expect):
    run = tmp_path / "run"
    good = json.dumps({**_row("a", "inf", 1.0, 0.5, 0), "cell": "c0"})
    if case != "missing":
        run.mkdir()
    if case == "bad_line":
        (run / "results.jsonl").write_text(good + "\n{not json\n")
    elif case == "not_a_row":
        (run / "results.jsonl").write_text("[1, 2]\n")
    elif case == "bad_single":
        (run / "results.json").write_text('{\n  "protocol": {"name": "a"},\n  oops\n}\n')
    elif case == "bad_yaml":
        (run / "results.jsonl").write_text(good + "\n")
        (run / "cells" / "c0").mkdir(parents=True)
        (run / "cells" / "c0" / "resolved.yaml").write_text("data: a: b\n")
    elif case == "unreadable":
        (run / "results.jsonl").write_bytes(b"\xff\xfe not text\n")
    assert main([str(run)]) == 2
    line = _error(capsys)
    assert line.startswith("error: " + expect.format(run=run)), line


def test_frontier_reads_a_single_run(tmp_path, capsys):
    run = tmp_path / "single"
    run.mkdir()
    res = _row("triangle_wad", "inf", 0.75, 0.25, 0)["results"]
    (run / "results.json").write_text(json.dumps({**res, "scenario": "fr_scn"}))
    (run / "resolved.yaml").write_text(yaml.safe_dump({"data": {"dataset": {"name": "wine"}}}))
    assert main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "| wine: triangle_wad | 1 | ∞ | 0.750 [0.750, 0.750] | 0.250 [0.250, 0.250] |" in out
    assert "| ∞ (no claim) | wine | triangle_wad: 0.750 [0.750, 0.750] |" in out


def test_frontier_intervals_of_unit_metrics_are_clipped(tmp_path, capsys):
    # three seeds of 0.0, 0.05, 1.0: the Student-t interval runs far past both 0 and 1
    rows = [_row("a", "inf", u, u, s) for s, u in enumerate((0.0, 0.05, 1.0))]
    for r in rows:
        r["results"]["attacks"][0]["coverage_baseline"] = r["results"]["attacks"][0]["coverage"]
    table = frontier_rows(rows)
    for key in ("utility", "leakage", "coverage", "coverage_baseline"):
        m, lo, hi = table[0][key]
        assert (lo, hi) == (0.0, 1.0) and m == pytest.approx(0.35), key
    # a utility that does not live in [0, 1] (a Spearman) keeps its interval
    for r in rows:
        r["results"]["utility"] = {"distance_rank": r["results"]["utility"]["distance_accuracy"]}
    m, lo, hi = frontier_rows(rows, "distance_rank")[0]["utility"]
    assert lo < 0 and hi > 1
    run = _sweep(tmp_path / "run", [_row("a", "inf", u, u, s) for s, u in enumerate((0, 0.05, 1))])
    assert main([str(run)]) == 0
    assert "| digits: a | 3 | ∞ | 0.350 [0.000, 1.000] | 0.350 [0.000, 1.000] |" in (
        capsys.readouterr().out
    )


def test_frontier_dataset_comes_from_resolved_yaml_when_not_swept(tmp_path, capsys):
    rows = [_unswept("a", 0.5, 0.1, s) for s in range(2)]
    run = _sweep(tmp_path / "run", rows, datasets={"c0": "digits", "c1": "digits"})
    assert main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "| digits: a | 2 | ∞ |" in out
    assert "| ∞ (no claim) | digits | a: 0.500" in out
    assert "fr_scn" not in out
    # callers that pass rows without "dataset" (scripts/docfigs) still get the scenario's name
    assert setting_label(rows[0]) == "fr_scn: a"
    # the swept dataset wins over the resolved one
    assert setting_label({**_row("a", "inf", 1, 0, 0), "dataset": "wine"}) == "digits: a"


def _set(row: dict, path: str, value) -> dict:
    """``row`` with the dotted ``path`` set to ``value``."""
    *head, last = path.split(".")
    node = row
    for k in head:
        node = node[k]
    node[last] = value
    return row


@pytest.mark.parametrize(
    "path,value,field",
    [
        ("setting", ["data"], "setting is not an object"),
        ("setting", None, "setting is not an object"),
        ("setting.data", "digits", "setting.data is not an object with a dataset object"),
        ("setting.data.dataset", "digits", "setting.data is not an object with a dataset object"),
        ("setting.data.dataset.name", 3, "setting.data.dataset.name is not a string"),
        ("results.utility", [0.5], "results.utility is not an object"),
        ("results.utility", "high", "results.utility is not an object"),
        ("results.utility", 0.5, "results.utility is not an object"),
        ("results.utility.distance_accuracy", "0.5", "results.utility.distance_accuracy is not"),
        ("results.utility.distance_accuracy", {"m": 1}, "results.utility.distance_accuracy is"),
        ("results.protocol.params", [1], "results.protocol.params is not an object"),
        ("results.protocol.params", {"noise_multiplier": "x"}, "params.noise_multiplier is not"),
        ("results.privacy_epsilon", "lots", "results.privacy_epsilon is not"),
        ("results.attacks", {"leakage": 1}, "results.attacks is not a list of objects"),
        ("results.attacks", [{"leakage": "x"}], "results.attacks is not a list of objects with"),
        ("results.defenses", ["mask"], "results.defenses is not a list of objects"),
        ("results.defenses", [{"name": "m", "params": {"target_epsilon": "1"}}], "defenses (m)"),
    ],
)
def test_frontier_row_of_the_wrong_shape_is_a_one_line_error(tmp_path, capsys, path, value, field):
    # before: a row whose setting or utility was not an object raised AttributeError (a
    # traceback) in setting_label, frontier_rows or main; now one line naming the line and field
    rows = [_row("a", "inf", 1.0, 0.5, 0), _set(_row("b", "inf", 0.5, 0.5, 0), path, value)]
    run = _sweep(tmp_path / "run", rows)
    assert main([str(run)]) == 2
    line = _error(capsys)
    assert line.startswith(f"error: {run / 'results.jsonl'}:2: "), line
    assert field in line, line


def test_frontier_null_utility_attacks_and_setting_data_are_read_as_absent(tmp_path, capsys):
    rows = [_row("a", "inf", 1.0, 0.5, 0), _row("b", "inf", 0.5, 0.5, 0)]
    rows[1]["results"].update(utility=None, attacks=None, defenses=None)
    rows[1]["setting"]["data"] = None
    rows[1]["results"]["scenario"] = "fr_scn"
    run = _sweep(tmp_path / "run", rows)
    assert main([str(run)]) == 0
    out = capsys.readouterr().out
    # no attack: the leakage was not measured, not 0 (issue 46)
    assert "| fr_scn: b | 1 | ∞ | – | not measured | not measured | not measured |" in out


def test_frontier_single_run_whose_utility_is_not_an_object_is_a_one_line_error(tmp_path, capsys):
    run = tmp_path / "single"
    run.mkdir()
    res = _row("triangle_wad", "inf", 0.75, 0.25, 0)["results"]
    (run / "results.json").write_text(json.dumps({**res, "utility": [0.75]}))
    assert main([str(run)]) == 2
    assert _error(capsys) == f"error: {run / 'results.json'}:1: results.utility is not an object"
