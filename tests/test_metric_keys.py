"""Metrics you can cite (issue 11): exact recovery relative to the data's scale and independent
of BLAS threads; raw and clipped leakage; every key the scorer writes is one the report knows."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from testbed.report import model as report
from testbed.run.execute import execute
from testbed.scenario.loading import load_scenario
from testbed.scoring.metrics import (
    EXACT_RECOVERY_REL_TOL,
    LEAKAGE_METRICS,
    METRIC_KEYS,
    exact_recovery_rate,
    exact_recovery_tolerance,
    w2_leakage,
)


def _digits(n=600):
    from sklearn.datasets import load_digits

    return load_digits().data.astype(np.float64)[:n]


def _round_trip(X, seed=0):
    """A true 100 % recovery as an inversion returns it: rows through an orthogonal map and
    back (errors ~1e-14 relative)."""
    Q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(X.shape[1],) * 2))
    return (X @ Q) @ Q.T


@pytest.mark.parametrize("threads", [1, 2])
def test_true_full_recovery_is_100_percent_for_any_thread_count(threads):
    # Prepare: digits rows have norm ~60, where |x|^2 - 2xy + |y|^2 rounds to ~1e-6
    X = _digits()
    R = _round_trip(X)
    assert np.max(np.linalg.norm(R - X, axis=1)) < 1e-12
    # Execute
    with threadpool_limits(threads):
        rate = exact_recovery_rate(R, X)
    # Assert
    assert rate == 1.0


def test_exact_recovery_tolerance_is_relative_and_not_loose():
    X = _digits(300)
    med = float(np.median(np.linalg.norm(X, axis=1)))
    np.testing.assert_allclose(exact_recovery_tolerance(X), EXACT_RECOVERY_REL_TOL * med)
    u = np.random.default_rng(1).normal(size=X.shape)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    # 1e-5 x the median norm away (6e-4 here): not exact; a tolerance loosened to 1e-2 (or to
    # 1e-5 relative) would count it
    assert exact_recovery_rate(X + 1e-5 * med * u, X) == 0.0
    # 1e-7 x the median norm away: exact; a tolerance tightened below that would miss it
    assert exact_recovery_rate(X + 1e-7 * med * u, X) == 1.0
    # scale-free: the same rows scaled by 1e6 (or 1e-6) recover the same share
    for s in (1e-6, 1e6):
        assert exact_recovery_rate((X + 1e-7 * med * u) * s, X * s) == 1.0
        assert exact_recovery_rate((X + 1e-5 * med * u) * s, X * s) == 0.0


def test_leakage_raw_and_clipped_are_both_stored():
    nu = np.random.default_rng(2).normal(size=(40, 2))
    worse = w2_leakage(nu + 5.0, None, nu, nu + 3.0, None)
    assert worse["leakage_raw"] < 0 and worse["leakage"] == 0.0 and worse["leakage_clipped"] == 1.0
    np.testing.assert_allclose(worse["leakage_raw"], 1.0 - worse["w2_ratio"])
    good = w2_leakage(nu + 0.01, None, nu, nu + 3.0, None)
    assert good["leakage"] == good["leakage_raw"] and good["leakage_clipped"] == 0.0


def _rows_of(out, *scenarios):
    from testbed.scenario.schema import ThreatModel

    rows = []
    for name, attacks, observer in scenarios:
        sc = load_scenario(f"scenarios/{name}")
        sc = sc.model_copy(
            update={
                "attacks": attacks or sc.attacks,
                "threat_model": ThreatModel(observer=observer),
            }
        )
        rows += execute(sc, out / name).results["attacks"]
    return rows


def test_every_key_the_scorer_writes_is_one_the_report_knows(tmp_path):
    from testbed.scenario.schema import AttackSpec

    rows = _rows_of(
        tmp_path,
        ("contract_tiny_membership.yaml", None, "server"),  # scores
        ("contract_tiny.yaml", [AttackSpec(name="fedwad_distributional")], "server"),  # points
        ("contract_tiny_words.yaml", [AttackSpec(name="word2vec_retrieval")], "bob"),  # words
    )
    kinds = {r["kind"] for r in rows}
    assert {"points", "scores", "words"} <= kinds
    written = {k for r in rows for k in r}
    assert written <= set(METRIC_KEYS), sorted(written - set(METRIC_KEYS))
    # every leakage measure the scorer writes is plotted by the report, in the same direction
    for k in written:
        if METRIC_KEYS[k][1] is not None:
            assert report.LEAKAGE_METRICS[k] == METRIC_KEYS[k][1] == LEAKAGE_METRICS[k]
