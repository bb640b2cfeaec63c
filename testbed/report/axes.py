"""Where a trade-off figure's axes go, decided once for the interactive and the static figures:
log or linear, the floor below which points are drawn at the axis edge, a fixed range where
autoscaling would mislead (an all-zero metric, a metric living in [0, 1]). Pure arithmetic."""

from __future__ import annotations

import math
from dataclasses import dataclass

from testbed.report.fmt import EXACT_BELOW

__all__ = ["LOG_DECADES", "Axis", "error_axis", "is_exact", "value_axis"]

#: a log axis of a leakage or epsilon shows at most this many decades below its largest value;
#: smaller values (all about as small as nothing) are drawn at the floor and flagged (a
#: triangle, and a note in the hover text and the static figures' legend). The error axis has
#: no such floor for inexact errors: every one is drawn where it is
LOG_DECADES = 4


@dataclass(frozen=True)
class Axis:
    type: str  # "log" or "linear"
    floor: float | None = None  # values below are drawn at the floor (log axes only)
    range: tuple[float, float] | None = None  # fixed range in data units (linear axes only)
    nonnegative: bool = False  # a linear axis of values that are never negative starts at 0

    def place(self, x: float) -> tuple[float, bool]:
        """Where a value is drawn, and whether it was moved up to the floor."""
        if self.floor is not None and x < self.floor:
            return self.floor, True
        return x, False


def is_exact(err: float) -> bool:
    """An exact estimate: its relative error is floating-point rounding only."""
    return math.isfinite(err) and abs(err) < EXACT_BELOW


def _log(vals: list[float]) -> bool:
    v = [x for x in vals if math.isfinite(x)]
    pos = [x for x in v if x > 0]
    return len(pos) >= 2 and len(pos) == len(v) and max(pos) / min(pos) > 50


def error_axis(errs: list[float]) -> Axis:
    """The relative-error axis: exact estimates neither choose the scale nor stretch it — on a
    log axis they sit at the floor (half a decade below the smallest inexact error). Every
    inexact error is drawn at its value, however many decades the errors span: a setting with a
    huge error must not move the good ones (a cap of four decades under the largest error drew
    errors of 3.7 %, 4.6 % and 6.5 % at 59 % beside one of 5890)."""
    inexact = [x for x in errs if math.isfinite(x) and not is_exact(x)]
    if not _log(inexact):  # autoscaled, but never to negative errors (one point: plotly centres it)
        return Axis("linear", nonnegative=True)
    floor = min(inexact)
    if any(is_exact(x) for x in errs):
        floor /= 10**0.5
    return Axis("log", floor)


def value_axis(vals: list[float], unit: bool = False) -> Axis:
    """A leakage or epsilon axis: log when the values span more than 50x; all zero -> [0, 1];
    a metric living in [0, 1] shows all of [0, 1]."""
    v = [x for x in vals if math.isfinite(x)]
    if _log(v):
        pos = [x for x in v if x > 0]
        return Axis("log", max(min(pos), max(pos) / 10**LOG_DECADES))
    if v and all(x == 0 for x in v):
        return Axis("linear", range=(-0.03, 1.03) if unit else (0.0, 1.0))
    if unit and v and all(0 <= x <= 1 for x in v):
        return Axis("linear", range=(-0.03, 1.03))
    return Axis("linear")
