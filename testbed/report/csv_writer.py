"""The CSV writers: ``results.csv`` in tidy long format (one row per cell x number, the setting's
fields as their own columns) and ``summary.csv`` (per setting x number: seeds, mean and 95 %
Student-t interval, the same aggregation the report shows)."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from pathlib import Path
from typing import Any

from testbed.report.files import write_public
from testbed.report.model import measurements, point_of, series_of, summarise

__all__ = ["csv_safe", "setting_fields", "write_csv", "write_summary_csv"]

_CSV_FORMULA = ("=", "+", "-", "@", "\t", "\r")
#: what identifies a row of results.csv, before the setting's fields and the measurement
_ID = ["cell", "seed", "protocol", "mode", "series", "setting", "observer"]
_MEASURE = ["source", "target", "metric", "column", "value"]


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


def setting_fields(setting: Any, prefix: str = "setting") -> dict[str, Any]:
    """A cell's swept fields as scalar columns: nested mappings and lists by dotted path
    (``setting.defenses.0.params.clip_norm``), never JSON in a cell."""
    if isinstance(setting, dict):
        out: dict[str, Any] = {}
        for k, v in setting.items():
            out.update(setting_fields(v, f"{prefix}.{k}"))
        return out
    if isinstance(setting, (list, tuple)):
        if not setting:
            return {prefix: ""}
        out = {}
        for i, v in enumerate(setting):
            out.update(setting_fields(v, f"{prefix}.{i}"))
        return out
    return {prefix: setting}


def _identity(row: dict) -> dict[str, Any]:
    res = row["results"]
    return {
        "cell": row.get("cell", ""),
        "seed": row.get("seed"),
        "protocol": res.get("protocol", {}).get("name"),
        "mode": res.get("protocol", {}).get("mode"),
        "series": series_of(row),
        "setting": point_of(row),
        "observer": (res.get("observer_view") or {}).get("observer"),
    }


def _write(path: Path, header: list[str], records: list[dict[str, Any]]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([csv_safe(c) for c in header])  # column names carry labels and party names too
    for rec in records:
        w.writerow([csv_safe("" if rec.get(k) is None else rec[k]) for k in header])
    write_public(path, buf.getvalue().encode())


def write_csv(path: Path, rows: list[dict]) -> None:
    """``results.csv``: one row per cell x seed x number."""
    records, fields = [], {}
    for r in rows:
        ident = {**_identity(r), **setting_fields(r.get("setting") or {})}
        fields.update(dict.fromkeys(k for k in ident if k.startswith("setting.")))
        for m in measurements(r["results"]):
            records.append({**ident, **{k: getattr(m, k) for k in _MEASURE}})
    _write(path, _ID + list(fields) + _MEASURE, records)


def write_summary_csv(path: Path, rows: list[dict]) -> None:
    """``summary.csv``: per protocol, setting and number the seeds, mean and 95 % interval."""
    groups: dict[tuple, dict[int, float]] = defaultdict(dict)
    for r in rows:
        key = (series_of(r), point_of(r))
        for m in measurements(r["results"]):
            groups[(*key, m.source, m.target, m.metric, m.column)][id(r)] = m.value
    records = []
    for (series, setting, source, target, metric, column), vals in groups.items():
        mean, lo, hi = summarise(list(vals.values()), metric)
        records.append(
            {
                "series": series,
                "setting": setting,
                "source": source,
                "target": target,
                "metric": metric,
                "column": column,
                "n": len(vals),
                "mean": mean,
                "ci95_low": lo,
                "ci95_high": hi,
            }
        )
    header = ["series", "setting", "source", "target", "metric", "column", "n", "mean"]
    _write(path, [*header, "ci95_low", "ci95_high"], records)
