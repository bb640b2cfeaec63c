"""The bench section that measures the privacy guard's and the transcript's share (issue 23)."""

from __future__ import annotations

from testbed.bench.cases import BenchOptions
from testbed.bench.guard import BUDGET, guard_kit, guard_markdown, guard_rows
from testbed.bench.output import _md_table


def test_guard_rows_measure_the_guard_inside_the_same_run():
    opts = BenchOptions.quick(
        overhead_n=(40,), overhead_d=(4,), clients=(3,), cases=["triangle_wad", "fedbary"]
    )
    rows = guard_rows(opts, guard_kit(opts))
    assert [(r["case"], r["clients"]) for r in rows] == [("triangle_wad", 2), ("fedbary", 3)]
    for r in rows:
        assert r["messages"] > 0 and r["rows_indexed"] == r["clients"] * r["n"]
        assert 0.0 < r["guard_seconds"] <= r["send_seconds"] < r["run_seconds"]
        assert r["guard_transcript_share"] >= r["guard_share"] + r["transcript_share"]
        assert r["within_budget"] == (r["guard_transcript_share"] <= BUDGET)
    text = "\n".join(guard_markdown(rows, None, _md_table))
    assert "Privacy guard and transcript" in text and "| triangle_wad | 2 | 40 | 4 |" in text
