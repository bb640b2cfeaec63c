"""The 'what a user waits for' section of testbed bench (issue 23): its ratios and its table
from measured rows (no timing is asserted)."""

from __future__ import annotations

from testbed.bench.waits import pair_summary, to_markdown


def test_pair_summary_takes_the_n2000_rows_and_renders_side_by_side():
    rows = [
        {"case": "fedwad_paper", "n": 2000, "d": 64, "seconds": 0.8, "ratio": 3.0},
        {"case": "fedwad_public", "n": 2000, "d": 64, "seconds": 1.0, "ratio": 4.0},
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
    assert "FedWAD paper mode / the public algorithm 0.80x" in text
    assert "Guard share of the protocol's time: 25.0 %" in text
    assert "| on (default) | 50.0 | 40.0 |" in text
