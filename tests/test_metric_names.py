"""A metric's name is written once, in testbed/scoring/names.py (issue 49): the report and the
CLI take every metric name from :class:`~testbed.scoring.names.Metric`, never as a string
literal of their own, and the scorer's METRIC_KEYS and the results schema are made from it."""

from __future__ import annotations

import ast
from pathlib import Path

from testbed.scoring.metrics import LEAKAGE_METRICS, METRIC_KEYS
from testbed.scoring.names import ATTACK, Metric, RowField
from testbed.scoring.results_models import AttackRow

ROOT = Path(__file__).resolve().parents[1]
NAMES = {m.value for m in Metric}


def _literals(path: Path) -> list[str]:
    """String constants of ``path`` that are a metric's name (the text parts of an f-string
    left out: words in a sentence, not a key)."""
    tree = ast.parse(path.read_text())
    prose = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    return [
        f"{path.parent.name}/{path.name}:{n.lineno}: {n.value!r}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and n.value in NAMES and id(n) not in prose
    ]


def test_the_report_and_the_cli_name_no_metric_of_their_own():
    found = [
        hit
        for folder in ("testbed/report", "testbed/cli")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for hit in _literals(path)
    ]
    assert not found, "metric names written as literals (use testbed.scoring.names.Metric):\n" + (
        "\n".join(found)
    )


def test_the_scanner_sees_a_literal_key(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('x = row["leakage"]\ny = f"{row[\'auc\']:.2f} leakage"\n')
    assert [h.split(": ", 1)[1] for h in _literals(probe)] == ["'leakage'", "'auc'"]


def test_every_attack_row_field_comes_from_the_names():
    assert set(METRIC_KEYS) == {f.value for f in RowField} | {
        m.value for m in Metric if m.row == ATTACK
    }
    assert set(AttackRow.model_fields) == set(METRIC_KEYS)
    for m in Metric:
        assert m.meaning and m == m.value  # a member is its name wherever a string is
        if m.row == ATTACK and m.higher is not None:
            assert LEAKAGE_METRICS[m] is m.higher
