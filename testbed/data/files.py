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

__all__ = ["CsvConfig", "CsvFile", "FileConfig", "NpyConfig", "NpyFile"]


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


#: ``testbed validate`` reads at most this much of a CSV file: its first row, the header
_FIRST_ROW_CHARS = 1 << 20


def _is_header(row: list[str]) -> bool:
    """The loader's rule: a first row whose first cell is not a number is a header."""
    try:
        float(row[0])
    except (ValueError, IndexError):
        return True
    return False


def _first_row(path: str) -> list[str] | None:
    """The first CSV row of ``path``, read alone (at most 1 MiB); None when it cannot be read that
    way: an empty or unreadable file, a longer row (the loader reports what is wrong)."""
    read = 0
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:

            def lines():
                nonlocal read
                while read < _FIRST_ROW_CHARS:
                    line = f.readline(_FIRST_ROW_CHARS - read)
                    if not line:
                        return
                    read += len(line)
                    yield line

            row = next(csv.reader(lines()), None)  # a quoted cell may span lines
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return row if read < _FIRST_ROW_CHARS else None


def _blank(path: str) -> bool:
    """Whether the file holds nothing but whitespace (read in blocks, stopping at the first
    other character)."""
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 16):
                if block.strip():
                    return False
    except OSError:
        return False  # the loader names an unreadable file
    return True


def _label_problem(
    col: int | str | None, header: list[str] | None, ncols: int, fname: str
) -> str | None:
    """What is wrong with ``label_column`` for file ``fname`` of ``ncols`` columns and this
    header row (None: no header), or None: the same words at validate time and at load time."""
    if isinstance(col, str):
        if header is None:
            return f"{col!r}: {fname} has no header row (give the column's index)"
        if col not in header:
            shown = ", ".join(header[:10]) + (", ..." if len(header) > 10 else "")
            return f"{col!r} is not in the header of {fname} ({shown})"
    elif col is not None and not -ncols <= col < ncols:
        return f"{col} is out of range for the {ncols} columns of {fname}"
    return None


def _split_labels(arr: np.ndarray, col: int | None, where: str):
    if col is None:
        return arr, None
    bad = _label_problem(col, None, arr.shape[1], Path(where).name)
    if bad:
        raise DataError(f"{where}: label_column {bad}")
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


class CsvConfig(FileConfig):
    @field_validator("path")
    @classmethod
    def _not_empty(cls, v: str) -> str:
        """A file with no row at all is refused here, not only when the run loads it."""
        if _blank(v):
            raise ValueError(f"{Path(v).name} is empty (no rows)")
        return v

    @field_validator("label_column")
    @classmethod
    def _in_file(cls, v, info: ValidationInfo):
        """Checked against the file's first row only (the header), never the whole file."""
        path = info.data.get("path")
        row = _first_row(path) if v is not None and path is not None else None
        if row is None:
            return v
        header = row if _is_header(row) else None
        if header is not None and not isinstance(v, str):
            return v  # an index counts the data rows' columns, which a header may not match
        bad = _label_problem(v, header, len(row), Path(path).name)
        if bad:
            raise ValueError(bad)
        return v


def npy_shape(path: str) -> tuple[int, ...]:
    """The shape in a .npy file's header (nothing else is read); ValueError saying what the
    file is instead (an .npz archive, empty, not .npy, an object array)."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
            if head[:2] == b"PK":
                raise ValueError("an .npz archive, not a .npy file: save one array with numpy.save")
            if head != b"\x93NUMPY":
                raise ValueError("not a .npy file (empty, or another format)")
    except OSError as exc:
        raise ValueError(f"cannot read it ({exc})") from None
    try:  # the header only: the array is mapped, not read
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, EOFError, ValueError) as exc:
        raise ValueError(f"not a plain numeric .npy file ({' '.join(str(exc).split())})") from None
    return tuple(arr.shape)


class NpyConfig(FileConfig):
    @field_validator("path")
    @classmethod
    def _is_npy(cls, v: str) -> str:
        npy_shape(v)  # the header only
        return v

    @field_validator("label_column")
    @classmethod
    def _in_file(cls, v, info: ValidationInfo):
        if isinstance(v, str):
            raise ValueError("must be a column index for .npy files (they have no header)")
        path = info.data.get("path")
        if v is not None and path is not None:
            shape = npy_shape(path)
            bad = _label_problem(v, None, shape[1], Path(path).name) if len(shape) == 2 else None
            if bad:
                raise ValueError(bad)
        return v


@DATASETS.register
class CsvFile(DatasetPlugin):
    """Your own CSV file (numeric columns; optional header; optional label column)."""

    name = "csv"
    Config = CsvConfig
    light = True

    def has_labels(self) -> bool:
        return self.config.label_column is not None

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
        if _is_header(rows[0]):
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
            bad = _label_problem(col, header, arr.shape[1], path.name)
            if bad:
                raise DataError(f"{path}: label_column {bad}")
            col = header.index(col)
        X, y = _split_labels(arr, col, str(path))
        return Dataset(X, None if y is None else y.astype(np.int64), path.name)


@DATASETS.register
class NpyFile(DatasetPlugin):
    """Your own NPY file (2-D numeric array; optional label column index)."""

    name = "npy"
    Config = NpyConfig
    light = True

    def has_labels(self) -> bool:
        return self.config.label_column is not None

    def load(self, rng):
        path = Path(self.config.path)
        try:
            npy_shape(str(path))  # its message says what the file is instead
        except ValueError as exc:
            raise DataError(f"{path}: {exc}") from None
        try:
            arr = np.load(path, allow_pickle=False)
        except (ValueError, EOFError) as exc:
            raise DataError(f"{path}: not a plain numeric .npy file ({exc})") from None
        col = self.config.label_column
        if isinstance(col, str):
            raise DataError(f"{path}: label_column must be an integer for .npy files")
        arr = check_matrix(arr, str(path))
        X, y = _split_labels(arr, col, str(path))
        return Dataset(X, None if y is None else y.astype(np.int64), path.name)
