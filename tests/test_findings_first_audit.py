"""docs/findings/findings.md's table for the README's first example (``scenarios/first_audit_curve.yaml``,
3 seeds x 7 noise levels) against a fresh run: every printed mean within its printed rounding or
the seeds' 95 % interval, the intervals as printed, the claimed ε to its rounding. Slow (the
sweep takes about two minutes on two cores): ``pytest -m slow tests/test_findings_first_audit.py``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
#: a row of the table; an error's lower bound is never negative (no "−" in it)
ROW = re.compile(
    r"^\| (?P<z>[\d.]+)(?: \(no noise\))? \| (?P<err>[\d.]+) % \[(?P<elo>[\d.]+), (?P<ehi>[\d.]+)\]"
    r" \| (?P<leak>[\d.]+)(?: \[(?P<llo>[\d.]+), (?P<lhi>[\d.]+)\])? \| (?P<eps>\S+) \|$",
    flags=re.M,
)


def _num(text: str) -> float:
    return float(text.replace("−", "-"))


def _half_unit(printed: str) -> float:
    """Half a unit of the last printed digit."""
    return 0.5 * 10 ** -(len(printed.split(".")[1]) if "." in printed else 0)


def check_table(agg: dict, text: str) -> int:
    """Compare the section's rows with ``aggregate``'s (mean, lo, hi); returns rows checked."""
    rows = list(ROW.finditer(text[text.index("## The README's first example") :]))
    for m in rows:
        a = agg.get(("fedwad", m["z"])) or agg[("fedwad", f"noise_multiplier={m['z']}")]
        mean, lo, hi = (100 * v for v in a["wasserstein.relative_error"])
        assert abs(_num(m["err"]) - mean) <= max(hi - mean, _half_unit(m["err"])), m.group(0)
        for printed, now in ((m["elo"], lo), (m["ehi"], hi)):
            assert abs(_num(printed) - now) <= max(hi - lo, _half_unit(printed)), m.group(0)
        mean, lo, hi = a["any_attack.leakage"]
        assert abs(_num(m["leak"]) - mean) <= max(hi - mean, _half_unit(m["leak"])), m.group(0)
        eps = max(v[0] for k, v in a.items() if k.startswith("eps_claimed["))
        if m["eps"] == "∞":
            assert math.isinf(eps), m.group(0)
        else:  # three significant figures
            assert abs(_num(m["eps"]) - eps) <= 0.005 * eps, (m.group(0), eps)
    return len(rows)


def test_the_first_example_table_reproduces(tmp_path):
    from testbed.report.model import aggregate
    from testbed.run.sweep import run_sweep
    from testbed.scenario.loading import load_scenario

    out = run_sweep(load_scenario(ROOT / "scenarios/first_audit_curve.yaml"), tmp_path, jobs=2)
    text = (ROOT / "docs/findings/findings.md").read_text()
    assert check_table(aggregate(out.rows), text) == 7
