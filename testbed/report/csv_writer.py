"""The CSV writer: ``results.csv``, one row per cell with every scalar metric in a column."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from testbed.exchange.bus import atomic_write_bytes
from testbed.report.model import flatten

__all__ = ["csv_safe", "write_csv"]

_CSV_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(v: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (``= + - @``, tab, CR first) gets a
    leading ``'``; numbers, and text that reads as a number (``-inf``, ``-0.5``), are left."""
    if not isinstance(v, str) or not v.startswith(_CSV_FORMULA):
        return v
    try:
        float(v)
        return v
    except ValueError:
        return "'" + v


def write_csv(path: Path, rows: list[dict]) -> None:
    flats = [flatten(r) for r in rows]
    cols: list[str] = []
    for f in flats:
        cols.extend(k for k in f if k not in cols)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([csv_safe(c) for c in cols])  # column names carry labels and party names too
    for f in flats:
        w.writerow([csv_safe("" if f.get(k) is None else f[k]) for k in cols])
    atomic_write_bytes(path, buf.getvalue().encode())
