"""How the report writes a number, in one place: three significant figures for every measured
figure (headline, tables, coverage matrix, hover text, and the command line's summary, which
imports this module), so one figure reads the same everywhere. Imports nothing heavy."""

from __future__ import annotations

import html
import math

from testbed.scoring.names import Metric

__all__ = [
    "EXACT_BELOW",
    "PCT_CAP",
    "ci",
    "fmt",
    "fmt_bytes",
    "pct",
    "pct_ci",
    "plotly_text",
    "value_ci",
]

#: a relative error below this is an exact estimate (what is left is floating-point rounding)
EXACT_BELOW = 1e-9
#: relative errors at or above this percentage are written in words, not as a long number
PCT_CAP = 1000


def fmt(x: float) -> str:
    """A measured value as text: three significant figures (``0.255``, ``53.1``, ``1.21e+05``);
    a whole count below a million as the integer it is; ``–`` missing, ``∞`` no guarantee."""
    if isinstance(x, str):
        return x
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    if float(x).is_integer() and abs(x) < 1e6:
        return str(int(x))
    return f"{x:.3g}"


def ci(t) -> str:
    """A (mean, low, high) triple as ``mean [low, high]``, or the mean alone when they agree."""
    m, lo, hi = t
    if not math.isfinite(m) or math.isclose(lo, hi, rel_tol=1e-9, abs_tol=1e-12):
        return fmt(m)
    return f"{fmt(m)} [{fmt(lo)}, {fmt(hi)}]"


def pct(x: float) -> str:
    """A relative error as a percentage with three significant figures (``53.1 %``); an exact
    estimate says so with its rounding error (``exact (2e-15)``); from 1000 % on, in words with
    the factor (``over 1000 % (1.21e+03×)``)."""
    if not math.isfinite(x):
        return fmt(x)
    if abs(x) < EXACT_BELOW:
        return f"exact ({x:.1g})"
    v = 100 * x
    if abs(v) >= PCT_CAP:
        return f"over {PCT_CAP} % ({fmt(x)}×)"
    return f"{fmt(v)} %"


def pct_ci(t) -> str:
    """A relative error's (mean, low, high) in the one format of a relative error, a percentage
    (``53.8 % [51.6, 56.0]``, bounds in percent to three significant figures); the mean alone
    when the bounds agree or the mean is not a plain percentage (exact, or over 1000 %)."""
    m, lo, hi = t
    text = pct(m)
    if (
        not math.isfinite(m)
        or not text.endswith(" %")
        or math.isclose(lo, hi, rel_tol=1e-9, abs_tol=1e-12)
    ):
        return text
    return f"{text} [{fmt(100 * lo)}, {fmt(100 * hi)}]"


def value_ci(column: str, t) -> str:
    """A column's (mean, low, high) in its quantity's one format: a relative error as a
    percentage (:func:`pct_ci`), anything else as :func:`ci`."""
    return pct_ci(t) if str(column).endswith(Metric.RELATIVE_ERROR) else ci(t)


def fmt_bytes(n: float) -> str:
    """A size in bytes, KiB, MiB or GiB (binary units, one decimal above bytes)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def plotly_text(text: str) -> str:
    """Text for a plotly label, title or hover: plotly reads it as a subset of HTML, so ``&``,
    ``<`` and ``>`` are escaped (no tag can be injected); quotes are left as they are, since
    plotly shows ``&quot;`` literally."""
    return html.escape(str(text), quote=False)
