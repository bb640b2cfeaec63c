"""Sweep bookkeeping is linear in the number of cells (issue 12; marker ``benchmark``).

The cells are trivial (``_run_cell`` returns a tiny result without running a protocol) and the
grid is given directly, so the time measured is the sweep's own bookkeeping: finding finished
cells, appending one row per cell, the progress record and the final grid-order results.jsonl.
Run: ``pytest -m benchmark tests/benchmarks/test_sweep_bookkeeping.py -s``.
"""

from __future__ import annotations

import hashlib
import time
from types import SimpleNamespace

import pytest

import testbed.sweep as sweep

pytestmark = pytest.mark.benchmark


def _fake(n: int):
    raw = {"name": "bk", "seed": 0}
    sc = SimpleNamespace(name="bk", sweep={"seed": list(range(n))}, seeds=None, seed=0, _raw=raw)
    cells = []
    for i in range(n):
        h = hashlib.sha256(str(i).encode()).hexdigest()
        cell_sc = SimpleNamespace(_raw=raw, _base_dir=".")
        cells.append(sweep.Cell(i, i, {"seed": i}, cell_sc, {}, h, labels={"seed": str(i)}))
    return sc, cells


def _time_sweep(tmp_path, monkeypatch, n: int) -> float:
    sc, cells = _fake(n)
    monkeypatch.setattr(sweep, "expand_cells", lambda _sc: cells)
    monkeypatch.setattr(
        sweep, "_run_cell", lambda raw, base_dir, cdir: {"config_hash": cdir.name, "x": 1}
    )
    t0 = time.perf_counter()
    out = sweep.run_sweep(sc, tmp_path / f"s{n}")
    dt = time.perf_counter() - t0
    assert out.computed == n
    lines = (out.out_dir / "results.jsonl").read_text().splitlines()
    assert len(lines) == n
    return dt


def test_bookkeeping_linear(tmp_path, monkeypatch):
    small, big = 2000, 20000
    t_small = _time_sweep(tmp_path, monkeypatch, small)
    t_big = _time_sweep(tmp_path, monkeypatch, big)
    per_small, per_big = t_small / small, t_big / big
    print(
        f"\nsweep bookkeeping: {small} cells {t_small:.2f} s ({per_small * 1e6:.0f} us/cell), "
        f"{big} cells {t_big:.2f} s ({per_big * 1e6:.0f} us/cell), ratio {t_big / t_small:.1f}x "
        f"for {big // small}x cells"
    )
    # quadratic bookkeeping would cost ~10x more per cell at 10x the cells
    assert per_big < 3 * per_small
