"""Datasets a user brings: a CSV or NPY file (numeric features, optional integer label column).

Wrong kinds of data are refused with one line naming the file: non-numeric, complex or object
arrays, NaN or inf, and labels that are not integers >= 0 (never truncated in silence).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from testbed.data.datasets import Dataset, DatasetPlugin, check_matrix
from testbed.errors import DataError
from testbed.registry import DATASETS, PluginConfig

__all__ = ["CsvFile", "FileConfig", "NpyFile"]


class FileConfig(PluginConfig):
    path: str = Field(
        description="CSV or NPY file; relative paths are resolved against the scenario's folder"
    )
    label_column: int | str | None = Field(
        None, description="column holding labels (index or CSV header name)"
    )

    @field_validator("path")
    @classmethod
    def _exists(cls, v: str, info: ValidationInfo) -> str:
        base = Path((info.context or {}).get("base_dir", "."))
        p = Path(v)
        if not p.is_absolute():
            p = base / p
        if not p.is_file():
            raise ValueError(f"data file not found: {p}")
        return str(p.resolve())


def _split_labels(arr: np.ndarray, col: int | None, where: str):
    if col is None:
        return arr, None
    if not -arr.shape[1] <= col < arr.shape[1]:
        raise DataError(f"{where}: label_column {col} out of range for {arr.shape[1]} columns")
    col = col % arr.shape[1]
    y = arr[:, col]
    bad = np.flatnonzero((y != np.round(y)) | (y < 0))
    if bad.size:
        raise DataError(
            f"{where}: label column {col} holds {y[bad[0]]:g} at row {bad[0]}; class labels "
            "must be integers >= 0"
        )
    X = np.delete(arr, col, axis=1)
    return X, y


@DATASETS.register
class CsvFile(DatasetPlugin):
    """Your own CSV file (numeric columns; optional header; optional label column)."""

    name = "csv"
    Config = FileConfig

    def load(self, rng):
        path = Path(self.config.path)
        try:
            with path.open(newline="", encoding="utf-8-sig") as f:  # a leading BOM is dropped
                rows = list(csv.reader(f))
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{path}: not UTF-8 text (byte {exc.start}); save the CSV as UTF-8"
            ) from None
        if not rows:
            raise DataError(f"{path}: empty file")
        header = None
        try:
            float(rows[0][0])
        except (ValueError, IndexError):
            header, rows = rows[0], rows[1:]
        data = []
        for lineno, row in enumerate(rows, 2 if header else 1):
            if not row:
                continue
            try:
                vals = [float(v) for v in row]
            except ValueError:
                raise DataError(f"{path}:{lineno}: non-numeric value") from None
            if data and len(vals) != len(data[0]):
                raise DataError(
                    f"{path}:{lineno}: expected {len(data[0])} columns, got {len(vals)}"
                )
            bad = [j for j, v in enumerate(vals) if not np.isfinite(v)]
            if bad:
                raise DataError(f"{path}:{lineno}: NaN or inf in column {bad[0]}")
            data.append(vals)
        if not data:
            raise DataError(f"{path}: no data rows")
        arr = np.asarray(data, dtype=np.float64)
        col = self.config.label_column
        if isinstance(col, str):
            if header is None or col not in header:
                raise DataError(f"{path}: label_column {col!r} not in header")
            col = header.index(col)
        X, y = _split_labels(arr, col, str(path))
        return Dataset(X, None if y is None else y.astype(np.int64), path.name)


@DATASETS.register
class NpyFile(DatasetPlugin):
    """Your own NPY file (2-D numeric array; optional label column index)."""

    name = "npy"
    Config = FileConfig

    def load(self, rng):
        path = Path(self.config.path)
        try:
            arr = np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise DataError(f"{path}: not a plain numeric .npy file ({exc})") from None
        col = self.config.label_column
        if isinstance(col, str):
            raise DataError(f"{path}: label_column must be an integer for .npy files")
        arr = check_matrix(arr, str(path))
        X, y = _split_labels(arr, col, str(path))
        return Dataset(X, None if y is None else y.astype(np.int64), path.name)
