"""The benchmark machinery: the bare bus, the public FedWAD loop, exponents, outputs, the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.cases import BenchOptions, fedwad_public_algorithm
from bench.data import make_clients, make_pair
from bench.main import run_bench
from bench.output import write_outputs
from bench.target_checks import fedbary_target
from bench.timing import BareBus, fit_exponent, time_interleaved
from protocols.fedwad import FedWAD
from testbed import ot as tot
from testbed.cli.main import main
from testbed.exchange.bus import Bus
from testbed.measure import Measure


def test_bare_bus_gives_the_same_result_and_logs_nothing():
    # Prepare
    parties = make_pair(60, 3, seed=1)
    proto = FedWAD.from_params({"support_size": 5, "iterations": 4})
    # Execute
    bus, bare = Bus(parties=parties), BareBus(parties=parties)
    a = proto.run(parties, bus, np.random.default_rng(3))
    b = proto.run(parties, bare, np.random.default_rng(3))
    # Assert
    assert a.estimates == b.estimates
    assert a.history == b.history
    assert len(bus.transcript) > 0 and len(bare.transcript) == 0


def test_public_algorithm_equals_our_barycentric_loop_for_uniform_weights():
    # the public code's n*P*Y equals diag(1/a)*P*Y when weights are uniform: same iterates
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(40, 3)), rng.normal(2.0, 1.0, size=(30, 3))
    xi0 = rng.normal(size=(6, 3))
    got = fedwad_public_algorithm(X, Y, iterations=5, t=0.4, xi0=xi0)
    mu, nu, xi = Measure(X), Measure(Y), Measure(xi0)
    for _ in range(5):
        a = tot.interpolate_barycentric(mu, xi, 0.4)
        b = tot.interpolate_barycentric(nu, xi, 0.4)
        xi = Measure(tot.interpolate_barycentric(a, b, 0.4).support)  # public code: uniform xi
    expected = tot.wasserstein(mu, xi) + tot.wasserstein(xi, nu)
    np.testing.assert_allclose(got, expected, rtol=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    e=st.floats(0.5, 3.0),
    c=st.floats(1e-4, 10.0),
    xs=st.lists(st.integers(2, 5000), min_size=2, max_size=6, unique=True),
)
def test_fit_exponent_recovers_a_power_law(e, c, xs):
    ys = [c * x**e for x in xs]
    np.testing.assert_allclose(fit_exponent(xs, ys), e, rtol=1e-6)


def test_fit_exponent_needs_two_distinct_points():
    assert fit_exponent([10], [1.0]) is None
    assert fit_exponent([10, 10], [1.0, 2.0]) is None


def test_time_interleaved_alternates_and_respects_repeats():
    calls = []
    f, b = (lambda: calls.append("f")), (lambda: calls.append("b"))
    tf, tb, reps = time_interleaved(f, b, min_repeats=3, max_repeats=3, budget=0.0)
    assert reps == 3 and calls == ["b", "f"] * 3
    assert tf >= 0 and tb >= 0


def test_make_clients_plants_groups():
    parties = make_clients(7, 5, 2, seed=0, groups=3)
    assert list(parties) == [f"client_{i}" for i in range(7)]
    assert [int(p.y[0]) for p in parties.values()] == [0, 1, 2, 0, 1, 2, 0]
    assert all(p.X.shape == (5, 2) for p in parties.values())


def test_tiny_bench_writes_table_json_and_plot(tmp_path):
    # Prepare: the smallest grid that still fits exponents
    opts = BenchOptions(
        ns=(40, 80),
        ds=(2,),
        clients=(5, 6),
        cases=["fedwad_paper", "fedwad_public", "fedbary"],
        overhead_n=(40,),
        overhead_d=(2,),
        budget=0.0,
        memory=True,
    )
    # Execute
    res = run_bench(opts, command="testbed bench (test)")
    paths = write_outputs(res, tmp_path)
    # Assert: every row carries a positive ratio; estimates of our FedWAD and the public
    # algorithm are upper bounds of W of similar size; the outputs exist and parse
    assert {r["case"] for r in res["pairs"]} == {"fedwad_paper", "fedwad_public"}
    for r in res["pairs"]:
        assert r["ratio"] > 0 and r["peak_mib"] >= 0 and r["seconds"] > 0
        parties = make_pair(r["n"], r["d"])
        exact = tot.wasserstein(Measure(parties["alice"].X), Measure(parties["bob"].X))
        assert r["estimate"] >= exact * (1 - 1e-9)
    assert [r["clients"] for r in res["clients"]] == [5, 6]
    assert res["overhead"] and all(math.isfinite(r["transcript_overhead"]) for r in res["overhead"])
    assert any(e["case"] == "fedwad_paper" and e["against"] == "n" for e in res["exponents"])
    data = json.loads(paths[0].read_text())
    assert data["command"] == "testbed bench (test)"
    md = paths[1].read_text()
    assert "| fedwad_paper | 40 | 2 |" in md and "Fitted exponents" in md
    assert paths[2].stat().st_size > 1000
    # a narrowed grid leaves out the user-facing sections, and says so
    assert data["waits"] is None and "--n/--d/--clients/--cases" in data["waits_skipped"]
    assert "Not run: the grid is narrowed" in md
    assert "FedBary 100 x 500, d = 64 with the guard on: not run" in md


def test_cli_bench_quick_subset(tmp_path, capsys):
    code = main(
        [
            "bench",
            "--quick",
            "--n",
            "30",
            "--d",
            "2",
            "--clients",
            "5",
            "--cases",
            "fedwad_paper",
            "--no-memory",
            "-q",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    assert "wrote" in capsys.readouterr().out
    rows = json.loads((tmp_path / "bench.json").read_text())["pairs"]
    assert [(r["case"], r["n"], r["d"]) for r in rows] == [("fedwad_paper", 30, 2)]


@pytest.mark.parametrize("cases", ["nope", "fedwad_paper,fedbary_100", ","])
def test_cli_bench_refuses_an_unknown_case(tmp_path, capsys, cases):
    """A misspelt --cases key is bad input (one line naming it and the known keys, exit 2), not
    a bench that measures nothing and writes an empty report; --scaling reads the same keys."""
    for extra in ([], ["--scaling"]):
        out = tmp_path / "o"
        assert main(["bench", "--cases", cases, "-q", "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: bench: --cases: ") and err.count("\n") == 1, err
        assert "the cases: fedwad_paper, fedwad_accurate, triangle_wad, fedbary" in err
        assert not out.exists()


def test_cli_bench_rejects_bad_grid(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--n", "0,10"])
    assert "positive integers" in capsys.readouterr().err


def test_fedbary_target_row_on_workers_profiles_a_miss():
    # a tiny FedBary with a zero budget: the row is a miss, profiled on the plain bus, whose
    # transcript must equal the worker-process run's
    key, sec, limit, unit, met, detail, prof = fedbary_target(
        BenchOptions(), workers=2, clients=4, points=20, limit=0.0
    )
    assert key == "fedbary_100x500" and unit == "s" and sec > 0 and not met
    assert "2 worker processes" in detail and "same transcript: True" in detail
    assert prof and all(r["calls"] > 0 for r in prof)


def test_issue15_rows_report_what_was_measured_and_say_why_not_otherwise():
    from bench.targets import issue15_lines, issue15_rows

    res = {
        "targets": [
            {"target": "fedbary_100x500", "measured": 41.5, "detail": "2 workers"},
            {"target": "triangle_wad_vs_emd", "measured": 0.4, "detail": "d = 64: 0.4x"},
        ],
        "overhead": [
            {"case": "triangle_wad", "n": 1000, "d": 784, "transcript_overhead": 0.09},
            {"case": "fedwad_paper", "n": 1000, "d": 784, "transcript_overhead": 0.04},
        ],
    }
    rows = issue15_rows(res)
    assert [r["value"] for r in rows] == [41.5, 0.09, None, 0.4, None]
    assert rows[2]["detail"].startswith("not measured: ")
    assert rows[4]["detail"].startswith("not measured: ")
    # the transcript section's own logging rows take precedence when present
    res["transcript_hash"] = {
        "logging": [{"case": "triangle_wad", "n": 2000, "d": 784, "logging_share": 0.03}]
    }
    res["pairwise_1000"] = {"peak_rss_mib": 1234.0, "engine": "ray"}
    rows = issue15_rows(res)
    assert rows[1]["value"] == 0.03 and rows[4]["value"] == 1234.0
    md = "\n".join(issue15_lines(res))
    assert "| FedBary, 100 clients x 500 points, d = 64 | 41.5 | s |" in md
    assert issue15_lines({}) == []


FEW = ("fedwad_paper", "fedbary")


# the scaling section: ~110 s on 2 busy cores; testbed bench's end-to-end run stays in make test
@pytest.mark.slow
def test_cli_bench_scaling_writes_table_json_and_plot(tmp_path, capsys):
    # a tiny grid; a zero per-point budget stops every case after its first size, with a note
    from bench.scaling import ScalingOptions, bench_scaling, write_scaling

    res = bench_scaling(ScalingOptions(ns=(30, 60), clients=(6, 8), d=2, ray=False, cases=FEW))
    assert {(r["axis"], r["size"]) for r in res["rows"]} >= {("n", 30), ("n", 60), ("N", 6)}
    assert all(r["seconds"] > 0 and r["peak_mib"] is not None for r in res["rows"])
    assert any("not installed" in n for n in res["notes"])
    capped = bench_scaling(
        ScalingOptions(ns=(30, 60), clients=(6,), d=2, ray=False, cases=FEW, point_budget=0)
    )
    assert all(r["size"] in (30, 6) for r in capped["rows"])
    assert any("per point" in n for n in capped["notes"])
    paths = write_scaling(res, tmp_path, "testbed bench --scaling (test)")
    assert "| fedbary | inprocess | N | 6 |" in paths[1].read_text()
    assert json.loads(paths[0].read_text())["rows"] and paths[2].stat().st_size > 1000
    code = main(
        [
            "bench",
            "--scaling",
            "--n",
            "30",
            "--clients",
            "6",
            "--cases",
            "fedbary",
            "--d",
            "2",
            "-q",
            "--out",
            str(tmp_path / "cli"),
        ]
    )
    assert code == 0 and (tmp_path / "cli" / "scaling.md").exists()


def test_isolation_section_times_both_paths():
    """`testbed bench` reports, per attack, the in-process and the isolated time of the same
    call on the same View (the isolation overhead; no timing is asserted)."""
    from bench.cases import BenchOptions
    from bench.isolation import ISOLATION_CASES, isolation_rows

    rows = isolation_rows(BenchOptions(), repeats=1)
    assert [r["attack"] for r in rows] == [a for _, a in ISOLATION_CASES]
    for r in rows:
        assert r["in_process_s"] > 0 and r["isolated_s"] > 0
        assert r["overhead_ms"] == pytest.approx(1e3 * (r["isolated_s"] - r["in_process_s"]))


def test_run_bench_puts_the_n1000_pairwise_row_where_the_issue15_table_reads_it(monkeypatch):
    import bench.pairwise as bp
    from bench.targets import issue15_rows

    seen = {}

    def fake(opts):
        seen["clients"], seen["pairs"] = list(opts.clients), opts.pairs
        return [
            {
                **dict.fromkeys(("pairs_run", "seconds", "spilled_mib"), 1.0),
                "clients": N,
                "peak_rss_mib": float(N),
                "pairs_total": N * (N - 1) // 2,
            }
            for N in opts.clients
        ]

    monkeypatch.setattr(bp, "bench_pairwise", fake)
    opts = BenchOptions(
        ns=(40,),
        ds=(2,),
        clients=(),
        cases=["none"],
        public_fedwad=False,
        overhead_n=(),
        pairwise_clients=(100, 1000),
        pairwise_pairs=7,
    )
    res = run_bench(opts)
    assert seen == {"clients": [100, 1000], "pairs": 7}
    assert res["pairwise_1000"]["peak_rss_mib"] == 1000.0
    assert issue15_rows(res)[4]["value"] == 1000.0


def test_cli_bench_outside_a_checkout_says_where_the_benchmarks_are(tmp_path, capsys, monkeypatch):
    """The benchmarks (bench/) ship with the source checkout, not the installed package: an
    installed copy with no bench/ beside testbed/ refuses in one line, before measuring."""
    import testbed.cli.bench as entry

    monkeypatch.setattr(entry, "CHECKOUT", tmp_path)
    out = tmp_path / "o"
    assert main(["bench", "-q", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ship with the source checkout" in err, err
    assert str(tmp_path) in err and not out.exists()
