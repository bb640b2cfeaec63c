"""The bench section that measures the privacy guard's and the transcript's share (issue 23)."""

from __future__ import annotations

from bench.cases import BenchOptions
from bench.guard import BUDGET, guard_kit, guard_markdown, guard_rows
from bench.output import _md_table


def test_guard_rows_measure_the_guard_inside_the_same_run():
    opts = BenchOptions.quick(
        overhead_n=(40,), overhead_d=(4,), clients=(3,), cases=["triangle_wad", "fedbary"]
    )
    rows = guard_rows(opts, guard_kit(opts))
    assert [(r["case"], r["clients"]) for r in rows] == [("triangle_wad", 2), ("fedbary", 3)]
    assert [r["repeats"] for r in rows] == [3, 3]  # small cases: the fastest of 3
    for r in rows:
        assert r["messages"] > 0 and r["rows_indexed"] == r["clients"] * r["n"]
        assert 0.0 < r["guard_seconds"] <= r["send_seconds"] < r["run_seconds"]
        assert r["guard_transcript_share"] >= r["guard_share"] + r["transcript_share"]
        assert r["within_budget"] == (r["guard_transcript_share"] <= BUDGET)
    text = "\n".join(guard_markdown(rows, None, _md_table))
    assert "Privacy guard and transcript" in text and "| triangle_wad | 2 | 40 | 4 | " in text
    assert "| messages | runs |" in text


def test_fedbary_row_runs_on_the_default_engine_with_its_guard_and_transcript_share(monkeypatch):
    import bench.timing as timing
    from bench.cases import BenchCase
    from bench.guard import fedbary_guard_on_off

    opts = BenchOptions.quick()
    case = BenchCase("fedbary", "fedbary", {}, points_per_client=30, dim=4)
    kit = guard_kit(opts)
    one = fedbary_guard_on_off(opts, case, kit, clients=4, off=True)
    # the bus testbed run opens by default: worker processes for large runs (forced here)
    monkeypatch.setattr(timing, "resolve_workers", lambda workers, parties: 2)
    two = fedbary_guard_on_off(opts, case, kit, clients=4, off=True)
    assert (one["workers"], two["workers"]) == (1, 2)
    for r in (one, two):
        assert r["same_transcript"] is True  # the guard only reads
        assert 0.0 < r["guard_share"] and 0.0 < r["transcript_share"]
        assert r["guard_transcript_share"] >= r["guard_share"] + r["transcript_share"]
        assert r["rows_indexed"] == 4 * 30 and r["messages"] > 0
    text = "\n".join(guard_markdown([], two, _md_table))
    assert "| fedbary 4x30 d=4 | 2 |" in text and "transcript share" in text


def test_fedbary_row_says_why_it_did_not_run():
    from bench.guard import fedbary_skip_reason

    assert fedbary_skip_reason(BenchOptions.quick()) is None
    assert fedbary_skip_reason(BenchOptions(targets=True)) is None
    assert "--cases" in fedbary_skip_reason(BenchOptions.quick(cases=["triangle_wad"]))
    narrowed = fedbary_skip_reason(BenchOptions())  # what the CLI builds for a narrowed grid
    assert "--n/--d/--clients/--cases" in narrowed
    text = "\n".join(guard_markdown([], None, _md_table, narrowed))
    assert "not run (the grid is narrowed" in text
