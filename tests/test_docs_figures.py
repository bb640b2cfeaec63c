"""`make docs-check`: the figures README/docs quote are recomputed and compared (slow).

Each check names the doc, a pattern that captures the printed figure, and the generator that
recomputes it (``scripts/docs_figures.py``, or the demo sweep). A figure drifts when it moves by
more than the rounding of its printed value, or, for means over seeds, by more than the 95 %
interval over those seeds.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _figures():
    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "scripts/docs_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _quoted(doc: str, pattern: str) -> tuple[float, float]:
    """The figure a doc prints, and half a unit of its last printed digit."""
    text = " ".join((ROOT / doc).read_text().split())
    m = re.search(pattern, text)
    assert m, f"{doc}: no figure matches {pattern!r} (was the text reworded?)"
    s = m.group(1)
    decimals = len(s.split(".")[1]) if "." in s else 0
    return float(s), 0.5 * 10**-decimals


# (doc, pattern capturing the printed figure, generator, key, scale to the printed unit)
SINGLE = [
    ("docs/attacks.md", r"t = 0\.9\): \*\*([\d.]+) %\*\*", "eta_words", "eta_words_t0.9", 100),
    ("docs/attacks.md", r"t = 0\.5: ([\d.]+) %\)", "eta_words", "eta_words_t0.5", 100),
    (
        "docs/attacks.md",
        r"not a class subset\): k = 10: ([\d.]+) %",
        "eta_inversion",
        "inversion_first901_k10",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 10: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k10",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 100: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k100",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 450: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k450",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 900: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k900",
        100,
    ),
    (
        "docs/protocols.md",
        r"ratio ([\d.]+) / [\d.]+ / [\d.]+ for k = 5",
        "triangle_bias",
        "bias_k5_s1",
        1,
    ),
    (
        "docs/protocols.md",
        r"ratio [\d.]+ / ([\d.]+) / [\d.]+ for k = 5",
        "triangle_bias",
        "bias_k5_s5",
        1,
    ),
    (
        "docs/protocols.md",
        r"ratio [\d.]+ / [\d.]+ / ([\d.]+) for k = 5",
        "triangle_bias",
        "bias_k5_s20",
        1,
    ),
    ("docs/protocols.md", r"and ([\d.]+) for k = 300", "triangle_bias", "bias_k300_s20", 1),
]


@pytest.fixture(scope="module")
def generated():
    mod = _figures()
    cache: dict[str, dict[str, float]] = {}

    def get(name: str) -> dict[str, float]:
        if name not in cache:
            cache[name] = mod.FIGURES[name]()
        return cache[name]

    return get


@pytest.mark.parametrize("doc,pattern,gen,key,scale", SINGLE, ids=[s[3] for s in SINGLE])
def test_single_seed_figure(doc, pattern, gen, key, scale, generated):
    printed, half_unit = _quoted(doc, pattern)
    value = generated(gen)[key] * scale
    assert abs(value - printed) <= half_unit + 1e-9, f"{doc}: prints {printed}, now {value:.4g}"


# the demo table (docs/findings.md): setting as printed -> the sweep's setting label
DEMO_ROWS = {
    ("fedwad", "none"): "none",
    ("fedwad", "random_t"): "random_t",
    ("fedwad", "distances_at_end"): "distances_at_end",
    ("fedwad", "large_t (t = 0.9)"): "large_t(t=0.9)",
    ("fedwad", "small_support S = 5"): "small_support(support_size=5)",
    ("triangle_wad", "none"): "none",
    ("triangle_wad", "k = 100"): "small_support(support_size=100)",
    ("triangle_wad", "large_t (t = 0.9)"): "large_t(t=0.9)",
}


def test_demo_table(tmp_path):
    from testbed.config import load_scenario
    from testbed.report import _aggregate, _point, _series  # noqa: F401
    from testbed.sweep import run_sweep

    out = run_sweep(load_scenario(ROOT / "scenarios/leakage_vs_accuracy.yaml"), tmp_path, jobs=2)
    agg = _aggregate(out.rows)
    text = (ROOT / "docs/findings.md").read_text()
    checked = 0
    for (proto, printed_setting), label in DEMO_ROWS.items():
        m = re.search(
            rf"^\| {proto} \| {re.escape(printed_setting)} \| ([\d.e-]+) \| ([\d.]+) \|",
            text,
            flags=re.M,
        )
        assert m, f"docs/findings.md: no demo row for {proto} / {printed_setting}"
        a = agg[(proto, label)]
        for s, key in (
            (m.group(1), "wasserstein.relative_error"),
            (m.group(2), "any_attack.leakage"),
        ):
            mean, lo, hi = a[key]
            digits = len(s.split(".")[1]) if "." in s and "e" not in s else 0
            slack = max(hi - mean, mean - lo, 0.5 * 10**-digits if digits else abs(mean) * 0.05)
            assert math.isfinite(mean) and abs(float(s) - mean) <= slack + 1e-12, (
                f"{proto} {printed_setting} {key}: printed {s}, now {mean:.4g} [{lo:.4g}, {hi:.4g}]"
            )
            checked += 1
    assert checked == 2 * len(DEMO_ROWS)
