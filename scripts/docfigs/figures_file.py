"""docs/findings/figures.json: every figure the docs quote, as data.

One entry per figure, by name::

    "fedbary_barycenter.gap_k3": {
        "doc": "docs/reference/protocols.md",     # the page that prints it
        "quote": "W2 gap 0.12 after 3 rounds",    # verbatim in the page (whitespace collapsed)
        "at": 7,                                  # where ``printed`` starts in ``quote``
        "printed": "0.12",                        # the figure as printed
        "generator": "fedbary_barycenter",        # scripts/docs_figures.py's FIGURES name
        "key": "gap_k3",                          # the generator's key (``.mean/.lo/.hi`` below;
                                                  # ``min(K1 | K2)``/``max(...)``: of several)
        "scale": 1, "unit": "",                   # printed = generator value x scale, in unit
        "decimals": 2,                            # printed decimals
        "style": "",                              # "+" signed, "." no leading zero, "−" minus,
                                                  # "," or " " thousands separator
        "tolerance": "rounding",                  # or "interval" or "upper"
        "value": 0.1213,                          # the generator's value x scale, last --write
    }

Tolerances, as ``make docs-check`` applies them to a fresh run of the generator:

- ``rounding``: the recomputed value rounds to the printed one (within half its last digit);
- ``interval``: a mean over seeds; the printed mean (and, when printed as ``m [lo, hi]``, the
  printed bounds) within the recomputed 95 % interval's half-width or the rounding, whichever is
  wider (a printed ``0`` within 0.005 unless the interval is wider);
- ``upper``: a printed upper bound ("≤ 4 %", "< 1e-7"); the recomputed value stays below it
  (within the printed rounding).

The default test suite checks, fast, that each ``quote`` appears in its page and that
``printed`` is ``value`` in the figure's format, so the prose and this file cannot drift apart;
``make docs-check`` recomputes the values (tests/test_docs_figures.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATH = ROOT / "docs/findings/figures.json"
TOLERANCES = ("rounding", "interval", "upper")
FIELDS = "doc quote at printed generator key scale unit decimals style tolerance value".split()
_NUM = r"[+−-]?(?:\d+\.?\d*|\.\d+)"
_AGGREGATE = re.compile(r"(min|max)\((.+)\)")
_INTERVAL = re.compile(rf"({_NUM}) \[({_NUM}), ({_NUM})\]")


def load(path: Path = PATH) -> dict[str, dict]:
    """The figures by name; refuses an entry with a field missing, unknown or malformed."""
    data = json.loads(path.read_text())
    figures = data["figures"]
    for name, f in figures.items():
        missing = [k for k in FIELDS if k not in f]
        extra = [k for k in f if k not in FIELDS]
        if missing or extra:
            raise ValueError(f"{path.name}: {name}: missing {missing}, unknown {extra}")
        if f["tolerance"] not in TOLERANCES:
            raise ValueError(f"{path.name}: {name}: tolerance {f['tolerance']!r}")
        if f["tolerance"] == "interval" and _AGGREGATE.fullmatch(f["key"]):
            raise ValueError(f"{path.name}: {name}: an interval is of one key, not {f['key']!r}")
        if f["quote"][f["at"] : f["at"] + len(f["printed"])] != f["printed"]:
            raise ValueError(f"{path.name}: {name}: quote[at:] does not start with printed")
    return figures


def save(figures: dict[str, dict], path: Path = PATH) -> None:
    body = {"about": "figures the docs quote; scripts/docfigs/figures_file.py says each field"}
    body["figures"] = dict(sorted(figures.items()))
    path.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")


def collapsed(text: str) -> str:
    return " ".join(text.split())


def parse(s: str) -> float:
    return float(s.replace("−", "-").replace(",", "").replace(" ", "").lstrip("+"))


def style_of(s: str) -> str:
    """The habits of a printed figure (its first number; a bound of ``m [lo, hi]`` is signed only
    when negative): "+" signed, "−" minus sign, "." no leading zero, "," or " " a thousands
    separator."""
    s, rest = numbers(s)[0], numbers(s)[1:]
    out = "+" if s.startswith("+") else ""
    out += "−" if s.startswith("−") or any(r.startswith("−") for r in rest) else ""
    out += "," if "," in s else " " if " " in s else ""
    return out + ("." if s.lstrip("+−-").startswith(".") else "")


def fmt(value: float, decimals: int, style: str) -> str:
    """``value`` printed with ``decimals`` digits in ``style`` (see :func:`style_of`)."""
    sep = "," if "," in style else " " if " " in style else ""
    s = f"{abs(value):{',' if sep else ''}.{decimals}f}".replace(",", sep)
    if "." in style and s.startswith("0."):
        s = s[1:]
    negative = round(value, decimals) < 0
    if negative:
        return ("−" if "−" in style else "-") + s
    return ("+" if "+" in style else "") + s


def half_unit(decimals: int) -> float:
    return 0.5 * 10**-decimals


def numbers(printed: str) -> list[str]:
    """The one number of a printed figure, or its mean and bounds (``m [lo, hi]``)."""
    m = _INTERVAL.fullmatch(printed)
    return list(m.groups()) if m else [printed]


def render(f: dict, mean: float, lo: float | None = None, hi: float | None = None) -> str:
    """The printed form of a figure at these values (its bounds only if it prints them)."""
    s = fmt(mean, f["decimals"], f["style"])
    if len(numbers(f["printed"])) == 3:  # the bounds: a sign only when negative
        bound = f["style"].replace("+", "")
        s += f" [{fmt(lo, f['decimals'], bound)}, {fmt(hi, f['decimals'], bound)}]"
    return s


def consistent(name: str, f: dict) -> str | None:
    """Why ``printed`` is not ``value`` in the figure's format (None when it is)."""
    first = numbers(f["printed"])[0]
    if f["tolerance"] == "upper":  # a stated bound, printed as the prose states it ("1e-7")
        return None if parse(first) == f["value"] else f"{name}: value {f['value']} != {first}"
    if fmt(f["value"], f["decimals"], f["style"]) != first:
        return f"{name}: value {f['value']} prints {fmt(f['value'], f['decimals'], f['style'])}"
    return None


def in_doc(name: str, f: dict, pages: dict[str, str]) -> str | None:
    """Why the figure's quote is not in its page (None when it is)."""
    if f["doc"] not in pages:
        pages[f["doc"]] = collapsed((ROOT / f["doc"]).read_text())
    if f["quote"] not in pages[f["doc"]]:
        return f"{f['doc']} no longer prints {f['quote']!r} ({name}; figures.json)"
    return None


def lookup(values: dict[str, float], key: str) -> float:
    """A generator's value by key, or the smallest or largest of several keys when the prose
    prints one figure for them: ``min(KEY | KEY ...)``, ``max(...)``."""
    m = _AGGREGATE.fullmatch(key)
    if not m:
        return values[key]
    parts = [values[k.strip()] for k in m.group(2).split(" | ")]
    return min(parts) if m.group(1) == "min" else max(parts)


def compare(name: str, f: dict, values: dict[str, float]) -> str | None:
    """Why a fresh generator output drifts from the printed figure (None when within tolerance)."""
    printed = [parse(s) for s in numbers(f["printed"])]
    scale, tol = f["scale"], f["tolerance"]
    # a bound printed as a power of ten ("< 1e-7") is exact
    rounding = 0.0 if "e" in f["printed"] else half_unit(f["decimals"])
    if tol == "interval":
        mean, lo, hi = (values[f"{f['key']}.{k}"] * scale for k in ("mean", "lo", "hi"))
        if numbers(f["printed"])[0].lstrip("+−-") == "0":
            rounding = 0.005
        slack = max(rounding, hi - mean, mean - lo) + 1e-9
        fresh = (mean, lo, hi)[: len(printed)]
        if any(abs(p - v) > slack for p, v in zip(printed, fresh)):
            return f"{name}: prints {f['printed']}, now {mean:.4g} [{lo:.4g}, {hi:.4g}]"
        return None
    value = lookup(values, f["key"]) * scale
    if tol == "upper":
        ok = value <= printed[0] + rounding + 1e-9
    else:
        ok = abs(value - printed[0]) <= rounding + 1e-9
    return None if ok else f"{name}: prints {f['printed']}, now {value:.4g} ({tol})"


def rewrite(f: dict, values: dict[str, float]) -> dict:
    """The entry after a fresh generator run: value, printed and quote as they would print."""
    scale = f["scale"]
    if f["tolerance"] == "upper":  # a bound the prose states, not a measurement: kept
        return dict(f)
    if f["tolerance"] == "interval":
        mean, lo, hi = (values[f"{f['key']}.{k}"] * scale for k in ("mean", "lo", "hi"))
        printed = render(f, mean, lo, hi)
        value = mean
    else:
        value = lookup(values, f["key"]) * scale
        printed = render(f, value)
    q, at = f["quote"], f["at"]
    quote = q[:at] + printed + q[at + len(f["printed"]) :]
    return {**f, "value": round(value, 10), "printed": printed, "quote": quote}
