"""How the report writes a number: one function per kind of figure, importing nothing heavy so
that the command line's summary can print the same text as the report."""

from __future__ import annotations

import math

__all__ = ["ci", "fmt", "pct"]


def fmt(x: float) -> str:
    """A measured value as text (``–`` for a missing one, ``∞`` for no guarantee)."""
    if isinstance(x, str):
        return x
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.4g}"


def ci(t) -> str:
    """A (mean, low, high) triple as ``mean [low, high]``, or the mean alone when they agree."""
    m, lo, hi = t
    if not math.isfinite(m) or math.isclose(lo, hi, rel_tol=1e-9, abs_tol=1e-12):
        return fmt(m)
    return f"{fmt(m)} [{fmt(lo)}, {fmt(hi)}]"


def pct(x: float) -> str:
    """A relative error as a percentage (exact estimates show their rounding error)."""
    if not math.isfinite(x):
        return fmt(x)
    if abs(x) < 1e-9:
        return f"exact ({x:.1g})"
    v = 100 * x
    return f"{v:.3g} %" if v < 1000 else f"{v:,.0f} %"
