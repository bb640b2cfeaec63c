"""The 'what a user waits for' section of testbed bench (issue 23): its ratios and its table
from measured rows (no timing is asserted)."""

from __future__ import annotations

from bench.waits import pair_summary, to_markdown


def test_pair_summary_takes_the_n2000_rows_and_renders_side_by_side():
    rows = [
        {"case": "fedwad_paper", "n": 2000, "d": 64, "seconds": 0.8, "ratio": 3.0},
        {
            "case": "fedwad_public",
            "n": 2000,
            "d": 64,
            "seconds": 1.0,
            "ratio": 4.0,
            "paper_over_public_cpu": 0.9,
        },
        {"case": "triangle_wad", "n": 2000, "d": 64, "seconds": 0.5, "ratio": 0.3},
        {"case": "fedwad_paper", "n": 500, "d": 64, "seconds": 9.0, "ratio": 9.0},
    ]
    p = pair_summary(rows)
    assert p["fedwad_paper_over_public"] == 0.8 and p["triangle_wad_over_emd"] == 0.3
    run = {
        "seconds": 50.0,
        "protocol_seconds": 40.0,
        "load_average_start": 1.0,
        "solvers": ["linear_sum_assignment"],
    }
    w = {
        "cli": [
            {"command": "bare import (numpy, yaml, pydantic)", "seconds": 0.2, "ratio": 1.0},
            {"command": "testbed plugins", "seconds": 0.5, "ratio": 2.5},
        ],
        "pairs": p,
        "fedbary": {
            "scenario": "scenarios/fedbary_100_clients.yaml",
            "guard_on": run,
            "guard_off": {**run, "protocol_seconds": 30.0},
            "guard_share": 0.25,
            "same_transcript": True,
            "limit_seconds": 60.0,
        },
    }
    text = "\n".join(to_markdown(w))
    assert "| `testbed plugins` | 0.500 | 2.50 |" in text
    assert (
        "FedWAD paper mode / the public algorithm 0.80x in wall time, 0.90x in CPU time "
        "(goal <= 0.5 at equal error)"
    ) in text
    assert "Guard share of the protocol's time: 25.0 %" in text
    assert "| on (default) | 50.0 | 40.0 |" in text


def _fake_runs(monkeypatch, seconds, digests=None):
    """``_run_scenario`` replaced by canned runs, in call order; returns the calls' extras."""
    from bench import waits

    calls = []
    digests = digests or ["d"] * len(seconds)

    def run(path, extra=""):
        i = len(calls)
        calls.append(extra)
        return {
            "seconds": seconds[i],
            "protocol_seconds": seconds[i] / 2,
            "returncode": 0,
            "stderr_tail": [],
            "load_average_start": 1.0,
            "digest": digests[i],
            "solvers": ["linear_sum_assignment"],
        }

    monkeypatch.setattr(waits, "_run_scenario", run)
    return calls


def test_fedbary_rows_interleave_and_keep_each_sides_fastest_run(monkeypatch):
    from bench.waits import fedbary_rows

    calls = _fake_runs(monkeypatch, [58.0, 50.0, 52.0, 55.0])  # on, off, on, off
    fb = fedbary_rows(repeats=2)
    assert calls == ["", "guard: off\n", "", "guard: off\n"]  # interleaved
    assert fb["guard_on"]["seconds"] == 52.0 and fb["guard_off"]["seconds"] == 50.0
    assert fb["guard_on"]["all_seconds"] == [58.0, 52.0]
    assert fb["guard_off"]["all_seconds"] == [50.0, 55.0]
    assert fb["guard_share"] == 1.0 - 25.0 / 26.0 and fb["same_transcript"] is True
    text = "\n".join(to_markdown({"cli": [], "pairs": pair_summary([]), "fedbary": fb}))
    assert "| on (default) | 52.0 | 26.0 | 1.0 | 58.0, 52.0 |" in text
    assert "| off | 50.0 | 25.0 | 1.0 | 50.0, 55.0 |" in text
    assert "2 of each" in text


def test_fedbary_rows_same_transcript_needs_every_run_to_agree(monkeypatch):
    from bench.waits import fedbary_rows

    _fake_runs(monkeypatch, [50.0, 50.0, 50.0, 50.0], ["a", "a", "b", "a"])
    assert fedbary_rows(repeats=2)["same_transcript"] is False
    _fake_runs(monkeypatch, [50.0, 50.0], [None, None])  # both failed: nothing to compare
    assert fedbary_rows(repeats=1)["same_transcript"] is False
