"""The results schema: one typed attack row, made from the scorer's METRIC_KEYS, published as
JSON Schema in docs/reference/results.schema.json, and checked when a row is made (a metric the schema
does not name stops the run instead of reaching results.json under a name nothing reads)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import testbed.run.score as score_mod
from attacks._base import AttackOutput
from testbed.errors import TestbedError
from testbed.run.attack import AttackRun
from testbed.run.score import failure_row, score_runs
from testbed.scoring.metrics import LEAKAGE_METRICS, METRIC_KEYS
from testbed.scoring.results_schema import (
    RESULTS_SCHEMA_VERSION,
    AttackRow,
    dumps,
    results_json_schema,
)
from testbed.scoring.truth import GroundTruth, PartyTruth

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(5)
A, B = RNG.normal(size=(8, 2)), RNG.normal(size=(8, 2)) + 3
TRUTH = GroundTruth(parties={"alice": PartyTruth(A), "bob": PartyTruth(B)})


def _run(*outputs, failure=None):
    base = tuple(AttackOutput("points", o.target, points=np.zeros((4, 2))) for o in outputs)
    return AttackRun(0, "probe", "probe", None, "server", outputs, base, "process", failure)


def test_the_published_schema_is_the_one_the_models_make():
    published = (ROOT / "docs" / "reference" / "results.schema.json").read_text()
    assert published == dumps(), (
        "docs/reference/results.schema.json is stale: python -m testbed.scoring.results_schema > "
        "docs/reference/results.schema.json"
    )
    assert json.loads(published)["version"] == RESULTS_SCHEMA_VERSION


def test_every_metric_is_in_the_schema_once_with_its_direction():
    props = results_json_schema()["$defs"]["AttackRow"]["properties"]
    assert set(props) == set(METRIC_KEYS)
    for key, (meaning, _) in METRIC_KEYS.items():
        assert props[key]["description"] == meaning
        want = LEAKAGE_METRICS.get(key)
        got = props[key].get("leakage")
        assert got == (None if want is None else "higher" if want else "lower"), key


def test_a_scored_row_is_a_schema_row():
    out = AttackOutput("points", "alice", points=A + 0.01)
    (row,) = score_runs([_run(out)], TRUTH)
    assert AttackRow.model_validate(row).leakage == row["leakage"]
    assert row["kind"] == "points" and row["target"] == "alice"


def test_a_metric_outside_the_schema_stops_the_scorer(monkeypatch):
    real = score_mod.score_attack

    def renamed(*args, **kwargs):  # a metric added under a name the schema does not have
        got = real(*args, **kwargs)
        got["leakage_v2"] = got.pop("leakage")
        return got

    monkeypatch.setattr(score_mod, "score_attack", renamed)
    out = AttackOutput("points", "alice", points=A + 0.01)
    with pytest.raises(TestbedError, match=r"attack row of 'probe': leakage_v2: Extra inputs"):
        score_runs([_run(out)], TRUTH)


def test_a_failure_row_is_a_schema_row():
    row = failure_row(_run(failure=("run", "it raised ValueError")))
    assert AttackRow.model_validate(row).failed == "run"
    with pytest.raises(TestbedError, match="failed: Input should be a valid string"):
        failure_row(_run(failure=(3, "a phase that is not text")))
