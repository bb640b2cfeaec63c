"""Leakage metrics (DESIGN.md, pinned definitions): hand-checked values and hypothesis properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.scoring.metrics import (
    MetricError,
    coverage_at_r,
    epsilon_lower_bound,
    epsilon_lower_bound_from_scores,
    exact_recovery_rate,
    matching_rate,
    median_loo_nn_distance,
    membership_metrics,
    precision_at_k,
    tv_distance,
    w2_leakage,
)

hists = st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=8).filter(
    lambda v: sum(v) > 1e-3
)


# ----------------------------------------------------------------------------- total variation
@given(hists, hists, hists)
@settings(max_examples=60, deadline=None)
def test_tv_is_a_metric_on_histograms(p, q, r):
    # Execute
    pq, qp, pr, rq = tv_distance(p, q), tv_distance(q, p), tv_distance(p, r), tv_distance(r, q)
    # Assert: bounded, symmetric, triangle inequality, identity
    assert 0.0 <= pq <= 1.0
    np.testing.assert_allclose(pq, qp, atol=1e-12)
    assert pq <= pr + rq + 1e-12
    np.testing.assert_allclose(tv_distance(p, p), 0.0, atol=1e-12)


def test_tv_hand_values():
    np.testing.assert_allclose(tv_distance([1, 0], [0, 1]), 1.0)
    np.testing.assert_allclose(tv_distance([2, 2], [1, 3]), 0.25)
    np.testing.assert_allclose(tv_distance([1, 1, 2], [1, 1]), 0.5)  # padded with a 0
    with pytest.raises(MetricError, match="histogram"):
        tv_distance([-1, 2], [1, 1])


# ----------------------------------------------------------------------------- membership
def test_membership_perfect_and_inverted():
    # Prepare
    is_member = np.r_[np.ones(50), np.zeros(200)].astype(bool)
    scores = np.r_[np.linspace(2, 3, 50), np.linspace(0, 1, 200)]
    # Execute
    good = membership_metrics(scores, is_member)
    bad = membership_metrics(-scores, is_member)
    # Assert
    assert good["auc"] == 1.0 and good["tpr_at_1pct_fpr"] == 1.0 and good["advantage"] == 1.0
    assert bad["auc"] == 0.0 and bad["tpr_at_1pct_fpr"] == 0.0 and bad["advantage"] == 0.0


def test_membership_floor_rule_never_nan():
    # Prepare: 20 non-members -> FPR resolution 0.05 > 1 % and 0.1 %
    rng = np.random.default_rng(0)
    is_member = np.r_[np.ones(20), np.zeros(20)].astype(bool)
    scores = rng.normal(size=40) + is_member
    # Execute
    m = membership_metrics(scores, is_member)
    # Assert
    assert m["alpha_used_1pct"] == 0.05 and m["alpha_used_0_1pct"] == 0.05
    assert not math.isnan(m["tpr_at_1pct_fpr"]) and not math.isnan(m["tpr_at_0_1pct_fpr"])


def test_membership_ties_all_equal_scores():
    # all scores tied: one ROC step from (0,0) to (1,1): AUC 0.5, TPR@1% = 0, advantage 0
    is_member = np.r_[np.ones(300), np.zeros(300)].astype(bool)
    m = membership_metrics(np.zeros(600), is_member)
    assert m["auc"] == 0.5 and m["tpr_at_1pct_fpr"] == 0.0 and m["advantage"] == 0.0


def test_membership_one_class_is_an_error():
    with pytest.raises(MetricError, match="members and non-members"):
        membership_metrics([0.1, 0.2], [True, True])


@given(
    st.lists(st.floats(-5, 5, allow_nan=False), min_size=4, max_size=60),
    st.integers(0, 2**31 - 1),
)
@settings(max_examples=60, deadline=None)
def test_membership_properties(scores, seed):
    # Prepare: random labels with both classes present
    rng = np.random.default_rng(seed)
    lab = rng.random(len(scores)) < 0.5
    lab[0], lab[1] = True, False
    # Execute
    m = membership_metrics(scores, lab)
    flipped = membership_metrics(-np.asarray(scores), lab)
    # Assert: ranges, monotone in alpha, AUC antisymmetry under score negation
    for k in ("auc", "tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr", "advantage"):
        assert 0.0 <= m[k] <= 1.0
    assert m["tpr_at_0_1pct_fpr"] <= m["tpr_at_1pct_fpr"]
    np.testing.assert_allclose(m["auc"] + flipped["auc"], 1.0, atol=1e-12)
    # an order-preserving transform of the scores changes nothing (x4 is exact in floating point)
    np.testing.assert_allclose(membership_metrics(4.0 * np.asarray(scores), lab)["auc"], m["auc"])


# ----------------------------------------------------------------------------- epsilon audit
def test_epsilon_lower_bound_hand_value():
    # Prepare: TPR 0.5 over 1000, FPR 0.01 over 1000; CP bounds by scipy
    from scipy.stats import beta

    tpr_lo = beta.ppf(0.025, 500, 501)
    fpr_hi = beta.ppf(0.975, 11, 990)
    # Execute
    eps = epsilon_lower_bound(0.5, 0.01, 1000, 1000)
    # Assert
    np.testing.assert_allclose(eps, math.log(tpr_lo / fpr_hi), rtol=1e-9)
    assert 3.0 < eps < math.log(50)  # below the point estimate log(0.5/0.01)


def test_epsilon_lower_bound_no_evidence_is_zero():
    assert epsilon_lower_bound(0.3, 0.3, 100, 100) == 0.0
    assert epsilon_lower_bound(0.0, 0.0, 100, 100) == 0.0


@given(st.integers(1, 500), st.integers(1, 500), st.floats(0, 1), st.floats(0, 1))
@settings(max_examples=80, deadline=None)
def test_epsilon_lower_bound_properties(n_pos, n_neg, tpr, fpr):
    e = epsilon_lower_bound(tpr, fpr, n_pos, n_neg)
    assert e >= 0.0 and math.isfinite(e)
    # more trials at the same rates never weaken the bound
    assert epsilon_lower_bound(tpr, fpr, 4 * n_pos, 4 * n_neg) >= e - 1e-9
    # a positive delta never strengthens it
    assert epsilon_lower_bound(tpr, fpr, n_pos, n_neg, delta=0.01) <= e + 1e-12


def test_epsilon_from_scores_separable_attack():
    is_member = np.r_[np.ones(500), np.zeros(500)].astype(bool)
    out = epsilon_lower_bound_from_scores(is_member.astype(float), is_member)
    # perfect test: TPR 1, FPR 0 over 500 trials each; CP: TPR_lo = c, FPR_hi = 1 - c
    c = 0.025 ** (1 / 500)
    np.testing.assert_allclose(out["epsilon_lb"], math.log(c / (1 - c)), rtol=1e-9)


# ----------------------------------------------------------------------------- record level
def test_coverage_and_exact_recovery():
    # Prepare: grid data with LOO NN distance 1 everywhere
    X = np.array([[i, j] for i in range(5) for j in range(5)], dtype=float)
    half = X[:12] + 1e-9
    far = X + 10.0
    # Execute / Assert
    np.testing.assert_allclose(median_loo_nn_distance(X), 1.0)
    cov = coverage_at_r(half, X)
    assert cov["coverage_r"] == 1.0
    # rows 0..11 recovered; rows next to them (distance 1 = r) covered too
    assert 12 / 25 <= cov["coverage"] <= 1.0
    np.testing.assert_allclose(exact_recovery_rate(half, X), 12 / 25)
    assert coverage_at_r(far, X)["coverage"] == 0.0
    assert exact_recovery_rate(X[::-1], X) == 1.0
    assert exact_recovery_rate(np.full((3, 2), np.nan), X) == 0.0


@given(st.integers(0, 2**31 - 1), st.integers(1, 20))
@settings(max_examples=30, deadline=None)
def test_coverage_monotone_in_reconstruction(seed, extra):
    # adding points to a reconstruction never lowers coverage or exact recovery
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(30, 3))
    R = rng.normal(size=(10, 3))
    R2 = np.vstack([R, X[:extra]])
    assert coverage_at_r(R2, X)["coverage"] >= coverage_at_r(R, X)["coverage"]
    assert exact_recovery_rate(R2, X) >= exact_recovery_rate(R, X)
    # continuous noise never lands within 1e-6 of a row; the copied rows always do
    np.testing.assert_allclose(exact_recovery_rate(R2, X), extra / 30, atol=1e-12)


def test_text_metrics():
    doc = ["the", "cat", "sat", "on", "mat"]
    assert matching_rate(["cat", "dog", "mat", "sat"], doc) == 0.75
    assert matching_rate([], doc) == 0.0
    ranked = [["cat", "dog", "cow"], ["sun", "moon", "mat"]]
    np.testing.assert_allclose(precision_at_k(ranked, doc, 1), 0.5)
    np.testing.assert_allclose(precision_at_k(ranked, doc, 3), (1 / 3 + 1 / 3) / 2)


def test_w2_leakage_ratio_and_clip():
    rng = np.random.default_rng(1)
    nu = rng.normal(size=(40, 2))
    good = w2_leakage(nu + 0.01, None, nu, nu + 3.0, None)
    worse = w2_leakage(nu + 5.0, None, nu, nu + 3.0, None)
    np.testing.assert_allclose(good["w2_ratio"], 0.01 * np.sqrt(2) / (3 * np.sqrt(2)), rtol=1e-6)
    assert 0.99 < good["leakage"] <= 1.0
    assert worse["w2_ratio"] > 1 and worse["leakage"] == 0.0
