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
