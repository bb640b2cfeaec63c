"""docs/findings/figures.json against the docs, fast: each figure's quote is printed verbatim in its
page and its printed form is its value, so the prose and the file cannot drift apart (the values
themselves are recomputed by ``make docs-check``, tests/test_docs_figures.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from docfigs import figures_file as ff  # noqa: E402

FIGURES = ff.load()


def _entry(**over) -> dict:
    f = {
        "doc": "docs/x.md",
        "quote": "W2 gap 1.74 after 3 rounds",
        "at": 7,
        "printed": "1.74",
        "generator": "g",
        "key": "gap",
        "scale": 1,
        "unit": "",
        "decimals": 2,
        "style": "",
        "tolerance": "rounding",
        "value": 1.74,
    }
    return {**f, **over}


def test_every_quoted_figure_is_printed_in_its_page():
    pages: dict[str, str] = {}
    bad = [ff.in_doc(n, f, pages) or ff.consistent(n, f) for n, f in FIGURES.items()]
    assert not [b for b in bad if b], "\n".join(b for b in bad if b)
    assert len(FIGURES) >= 200


def test_every_figure_has_a_generator():
    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "scripts/docs_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert {f["generator"] for f in FIGURES.values()} <= set(mod.FIGURES)


def test_a_reworded_page_or_a_rewritten_figure_is_caught():
    f = _entry()
    assert ff.in_doc("gap", f, {"docs/x.md": "the W2 gap 1.74 after 3 rounds, then"}) is None
    drift = ff.in_doc("gap", f, {"docs/x.md": "the W2 gap 1.75 after 3 rounds, then"})
    assert drift and "no longer prints 'W2 gap 1.74 after 3 rounds'" in drift
    new = ff.rewrite(f, {"gap": 1.8049})
    assert (new["printed"], new["quote"], new["value"]) == (
        "1.80",
        "W2 gap 1.80 after 3 rounds",
        1.8049,
    )
    assert ff.consistent("gap", new) is None
    assert ff.consistent("gap", {**new, "value": 1.81}) == "gap: value 1.81 prints 1.81"


def test_rounding_interval_and_upper_tolerances():
    f = _entry()
    assert ff.compare("gap", f, {"gap": 1.7449}) is None
    assert ff.compare("gap", f, {"gap": 1.7451}) == "gap: prints 1.74, now 1.745 (rounding)"
    pct = _entry(printed="6.2", quote="+6.2", at=1, scale=100, decimals=1, style="+")
    assert ff.compare("err", pct, {"gap": 0.0624}) is None
    assert ff.compare("err", pct, {"gap": 0.0626}) is not None
    iv = _entry(printed="0.299 [0.211, 0.386]", quote="| 0.299 [0.211, 0.386]", at=2)
    iv.update(decimals=3, tolerance="interval")
    ok = {"gap.mean": 0.33, "gap.lo": 0.24, "gap.hi": 0.42}  # half-width 0.09 > 0.031 moved
    assert ff.compare("iv", iv, ok) is None
    tight = {"gap.mean": 0.33, "gap.lo": 0.32, "gap.hi": 0.34}
    assert ff.compare("iv", iv, tight) == "iv: prints 0.299 [0.211, 0.386], now 0.33 [0.32, 0.34]"
    up = _entry(printed="0.08", quote="≤ 0.08", at=2, scale=100, tolerance="upper")
    assert ff.compare("up", up, {"gap": 0.0008}) is None
    assert ff.compare("up", up, {"gap": 0.0009}) is not None
    assert ff.rewrite(up, {"gap": 0.0001}) == up  # a stated bound is not rewritten


@pytest.mark.parametrize(
    "value,decimals,style,printed",
    [
        (0.1234, 3, ".", ".123"),
        (-0.5, 1, "−", "−0.5"),
        (0.062, 1, "+", "+0.1"),
        (6.24, 1, "+", "+6.2"),
    ],
)
def test_printed_styles(value, decimals, style, printed):
    assert ff.fmt(value, decimals, style) == printed
    assert ff.style_of(printed) in ("", style)


def test_load_refuses_a_malformed_entry(tmp_path):
    path = tmp_path / "figures.json"
    for bad, why in (
        ({"tolerance": "loose"}, "tolerance 'loose'"),
        ({"at": 3}, "quote[at:] does not start with printed"),
        ({"units": "%"}, "unknown ['units']"),
        ({"tolerance": "interval", "key": "max(a | b)"}, "an interval is of one key"),
    ):
        path.write_text(json.dumps({"figures": {"gap": _entry(**bad)}}))
        with pytest.raises(ValueError, match=re.escape(why)):
            ff.load(path)


def test_an_interval_prints_its_bounds_signed_only_when_negative():
    printed = "+0.007 [−0.038, 0.053]"
    assert ff.style_of(printed) == "+−"
    f = _entry(printed=printed, quote=printed, at=0, decimals=3, style="+−", tolerance="interval")
    assert ff.render(f, 0.007, -0.038, 0.053) == printed
    assert ff.rewrite(f, {"gap.mean": -0.0104, "gap.lo": -0.05, "gap.hi": 0.03})["quote"] == (
        "−0.010 [−0.050, 0.030]"
    )


def test_one_printed_figure_for_the_smallest_or_largest_of_several_keys():
    values = {"a.cov": 0.41, "b.cov": 0.38}
    lo = _entry(printed="0.38", quote="coverage 0.38", at=9, key="min(a.cov | b.cov)")
    hi = _entry(printed="0.41", quote="–0.41", at=1, key="max(a.cov | b.cov)")
    assert ff.compare("lo", lo, values) is None and ff.compare("hi", hi, values) is None
    assert ff.compare("lo", lo, {**values, "b.cov": 0.40}) is not None
    assert ff.rewrite(hi, {**values, "a.cov": 0.5})["quote"] == "–0.50"
