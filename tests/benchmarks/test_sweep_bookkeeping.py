"""Sweep bookkeeping is linear in the number of cells (issue 12; marker ``benchmark``).

The cells are trivial (``_run_cell`` returns a tiny result without running a protocol) and the
grid is given directly, so the time measured is the sweep's own bookkeeping: finding finished
cells, appending one row per cell, the progress record and the final grid-order results.jsonl.
Run: ``pytest -m benchmark tests/benchmarks/test_sweep_bookkeeping.py -s`` or
``testbed bench --sweep-bookkeeping`` (the same measurement, printed and written as JSON).
"""

from __future__ import annotations

import pytest

from bench.sweep import bookkeeping_seconds

pytestmark = pytest.mark.benchmark


def _time_sweep(tmp_path, n: int) -> float:
    dt = bookkeeping_seconds(n, tmp_path / f"s{n}")
    assert len((tmp_path / f"s{n}" / "results.jsonl").read_text().splitlines()) == n
    return dt


def test_bookkeeping_linear(tmp_path):
    small, big = 2000, 20000
    t_small = _time_sweep(tmp_path, small)
    t_big = _time_sweep(tmp_path, big)
    per_small, per_big = t_small / small, t_big / big
    print(
        f"\nsweep bookkeeping: {small} cells {t_small:.2f} s ({per_small * 1e6:.0f} us/cell), "
        f"{big} cells {t_big:.2f} s ({per_big * 1e6:.0f} us/cell), ratio {t_big / t_small:.1f}x "
        f"for {big // small}x cells"
    )
    # quadratic bookkeeping would cost ~10x more per cell at 10x the cells
    assert per_big < 3 * per_small
