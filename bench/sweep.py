"""Sweep bookkeeping against the number of cells (issue 12): ``testbed bench --sweep-bookkeeping``.

The cells are trivial (no protocol runs; each returns a tiny result) and the grid is handed over
already expanded, so the time measured is the sweep's own work: finding finished cells, one
appended row per cell, the progress record and the final grid-order ``results.jsonl``. Linear
bookkeeping shows as a flat time per cell from 2 000 to 20 000 cells.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

__all__ = ["bookkeeping_seconds", "fake_cells", "run_bookkeeping"]


def fake_cells(n: int):
    """A sweep-like scenario and ``n`` ready cells (distinct hashes, nothing to validate)."""
    import testbed.run.sweep as sweep

    raw = {"name": "bk", "seed": 0}
    sc = SimpleNamespace(name="bk", sweep={"seed": list(range(n))}, seeds=None, seed=0, _raw=raw)
    cells = []
    for i in range(n):
        h = hashlib.sha256(str(i).encode()).hexdigest()
        cell_sc = SimpleNamespace(_raw=raw, _base_dir=".")
        rs = SimpleNamespace(scenario=cell_sc, config_hash=h)
        rs.portable = lambda rs=rs: rs  # nothing to strip: it never leaves this process
        cells.append(sweep.Cell(i, i, {"seed": i}, rs, labels={"seed": str(i)}))
    return sc, cells


def bookkeeping_seconds(n: int, out: Path) -> float:
    """Seconds ``run_sweep`` spends on ``n`` trivial cells written to ``out``."""
    import testbed.run.sweep as sweep

    sc, cells = fake_cells(n)
    saved = sweep.expand_cells, sweep._run_cell
    sweep.expand_cells = lambda _sc: cells
    sweep._run_cell = lambda rs, cdir: {"config_hash": cdir.name, "x": 1}
    try:
        t0 = time.perf_counter()
        res = sweep.run_sweep(sc, out)
        dt = time.perf_counter() - t0
    finally:
        sweep.expand_cells, sweep._run_cell = saved
    if res.computed != n:
        raise RuntimeError(f"bookkeeping bench: {res.computed} of {n} cells computed")
    return dt


def run_bookkeeping(sizes=(2000, 20000), log=print) -> list[dict]:
    """Time per cell at each size; rows ``{cells, seconds, us_per_cell}``."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            dt = bookkeeping_seconds(n, Path(tmp) / f"s{n}")
            rows.append({"cells": n, "seconds": dt, "us_per_cell": 1e6 * dt / n})
            log(f"sweep bookkeeping: {n} cells {dt:.2f} s ({1e6 * dt / n:.0f} us/cell)")
    return rows
