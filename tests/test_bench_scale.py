"""``testbed bench --scale``: the scenario of each point, the fitted exponents and the
projection (the timed runs themselves are the bench's, not a test's)."""

import math

import pytest

from bench.scale import CASES, ScaleOptions, bench_scale, projection, scenario_text
from testbed.scenario.loading import parse_scenario


@pytest.mark.parametrize("case", sorted(CASES))
def test_point_scenario_has_n_clients_of_rows_each(case):
    # Prepare / Execute: 7 clients of 13 rows in d = 5 (7 * 13 is not a multiple of 5)
    sc = parse_scenario(scenario_text(case, 7, 13, 5))
    # Assert
    comps = sc.data.dataset.params["components"]
    assert sum(c["n"] for c in comps) == 7 * 13
    assert sc.data.dataset.params["d"] == 5 and sc.data.parties == 7
    assert sc.protocol.name == CASES[case][0]


def test_exponents_and_projection(monkeypatch):
    # Prepare: a fake point whose protocol time grows as N^1.5 and memory as N
    def fake(case, N, rows, d, opts):
        return {
            "case": case,
            "clients": N,
            "rows": rows,
            "d": d,
            "returncode": 0,
            "seconds": 2.0 + 0.01 * N**1.5,
            "cpu_seconds": 3.0 + 0.01 * N**1.5,
            "protocol_seconds": 0.01 * N**1.5,
            "peak_tree_mib": 5.0 * N,
            "peak_pss_mib": 3.0 * N,
            "peak_process_mib": 1.0,
            "messages": 10 * N,
            "transcript_bytes": 1000 * N,
            "load_average_start": 1.0,
        }

    monkeypatch.setattr("bench.scale.run_point", fake)
    opts = ScaleOptions(clients=(10, 100), rows_axis=(500,), d_axis=(64,), cases=("fedbary",))
    # Execute
    res = bench_scale(opts)
    proj = projection(res, targets=(10_000,), nodes=(1, 10))
    # Assert: N = 10 appears once although it lies on all three axes
    assert len(res["rows"]) == 2
    exps = {(e["against"], e["of"]): e["exponent"] for e in res["exponents"]}
    assert math.isclose(exps[("clients", "protocol_seconds")], 1.5, rel_tol=1e-9)
    assert math.isclose(exps[("clients", "peak_pss_mib")], 1.0, rel_tol=1e-9)
    one, ten = proj
    per_client = 0.01 * (100**1.5 - 10**1.5) / 90  # CPU seconds per added client
    assert math.isclose(one["cpu_seconds_per_client"], per_client, rel_tol=1e-9)
    assert math.isclose(one["hours"], per_client * 10_000 / 2 / 3600, rel_tol=1e-9)
    assert math.isclose(ten["hours"], one["hours"] / 10, rel_tol=1e-9)
    assert math.isclose(one["transcript_gib"], 1000 * 10_000 / 2**30, rel_tol=1e-9)


def test_goal_point_is_the_shipped_1000_client_scenario():
    # Prepare / Execute: the bench's point at the goal and the shipped scenario
    from pathlib import Path

    from bench.scale import GOAL

    point = parse_scenario(scenario_text("fedbary", GOAL["clients"], GOAL["rows"], GOAL["d"]))
    shipped = parse_scenario(Path("scenarios/fedbary_1000_clients.yaml").read_text())
    # Assert: the same data and protocol (names aside)
    assert point.data == shipped.data
    assert point.protocol.name == shipped.protocol.name == "fedbary"
    assert point.protocol.params["iterations"] == shipped.protocol.params["iterations"] == 10


def test_goal_line_says_met_missed_or_not_measured():
    from bench.scale import goal_lines

    row = {
        "case": "fedbary",
        "clients": 1000,
        "rows": 500,
        "d": 64,
        "returncode": 0,
        "seconds": 400.0,
        "cpu_seconds": 700.0,
        "peak_pss_mib": 7000.0,
        "peak_tree_mib": 9000.0,
        "load_average_start": 0.5,
    }
    (line,) = goal_lines({"rows": [row]})
    assert "400 s (met)" in line and "7000 MiB PSS (missed" in line
    (line,) = goal_lines({"rows": [{**row, "clients": 100}]})
    assert "not measured" in line
