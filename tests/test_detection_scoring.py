"""The runner's detection hook: per-row scores against the noise masks (ROC-AUC and precision/recall
at the true noise rate), and matrix-valued accuracy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.errors import TestbedError
from testbed.run.evaluate import accuracy_of as _accuracy
from testbed.run.evaluate import score_detection
from testbed.scoring.metrics import detection_metrics


def test_perfect_and_reversed_scores():
    mask = np.array([0, 1, 0, 1, 0, 0], bool)
    good = detection_metrics(mask.astype(float) + 0.1, mask)
    assert good["roc_auc"] == 1.0 and good["precision_at_rate"] == 1.0
    assert good["recall_at_rate"] == 1.0 and good["flagged_at_zero"] == 6.0
    bad = detection_metrics(-mask.astype(float), mask)
    assert bad["roc_auc"] == 0.0 and bad["precision_at_rate"] == 0.0
    assert math.isnan(bad["precision_at_zero"])  # nothing flagged by the sign rule


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(4, 60))
def test_auc_matches_pairwise_definition(seed, n):
    rng = np.random.default_rng(seed)
    mask = rng.random(n) < 0.3
    if mask.all() or not mask.any():
        return
    s = rng.normal(size=n)
    pos, neg = s[mask], s[~mask]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    np.testing.assert_allclose(detection_metrics(s, mask)["roc_auc"], pairs)


def test_score_detection_pools_and_treats_unmasked_parties_as_clean():
    scores = {"d": {"a": np.array([1.0, 0.0]), "b": np.array([0.5, -1.0, 2.0])}}
    masks = {"b": np.array([False, False, True])}
    out = score_detection(scores, masks)["d"]
    assert math.isnan(out["a"]["roc_auc"])  # one class only
    assert out["b"]["roc_auc"] == 1.0
    assert out["pooled"]["rows"] == 5.0 and out["pooled"]["noisy"] == 1.0
    with pytest.raises(TestbedError, match="2 scores"):
        score_detection({"d": {"b": np.zeros(2)}}, masks)


def test_matrix_accuracy_is_frobenius():
    ex = np.array([[0.0, 2.0], [2.0, 0.0]])
    acc = _accuracy(ex * 1.5, ex)
    np.testing.assert_allclose(acc["relative_error"], 0.5)
    np.testing.assert_allclose(acc["signed_relative_error"], 0.5)
    np.testing.assert_allclose(_accuracy(3.0, 2.0)["signed_relative_error"], 0.5)
