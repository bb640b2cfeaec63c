"""Metric values computed by hand (or by the definition, via scipy/sklearn) on tiny inputs,
boundaries included, and the scorer's rows for every output kind. Written against the
survivors of mutation testing (docs/guide/development.md, "Mutation testing")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta
from scipy.stats import t as student_t

from attacks._base import AttackOutput
from testbed.scoring.metrics import (
    HELDOUT_METHOD,
    MetricError,
    _nn_distance,
    _rows_in,
    coverage_at_r,
    detection_metrics,
    epsilon_lower_bound,
    epsilon_lower_bound_from_scores,
    exact_recovery_rate,
    exact_recovery_tolerance,
    gdp_delta,
    gdp_epsilon,
    gdp_mu_lower_bound,
    heldout_epsilon_lb,
    matching_rate,
    mean_ci,
    median_loo_nn_distance,
    membership_metrics,
    precision_at_k,
    score_attack,
    tpr_at_fpr,
    tv_distance,
    w2_leakage,
)
from testbed.scoring.truth import GroundTruth, PartyTruth


# ----------------------------------------------------------------------------- small helpers
def test_mean_ci_is_the_student_t_interval():
    m, lo, hi = mean_ci([1.0, 2.0, 3.0, 6.0])
    half = student_t.ppf(0.975, 3) * np.std([1, 2, 3, 6], ddof=1) / 2.0
    assert m == 3.0 and lo == pytest.approx(3.0 - half) and hi == pytest.approx(3.0 + half)
    _, lo90, _ = mean_ci([1.0, 2.0, 3.0, 6.0], level=0.9)
    assert lo90 == pytest.approx(3.0 - student_t.ppf(0.95, 3) * np.std([1, 2, 3, 6], ddof=1) / 2)
    # None and non-finite values are dropped: [1, 3], std sqrt(2), n 2
    t1 = student_t.ppf(0.975, 1)
    assert mean_ci([1, None, math.nan, math.inf, 3]) == pytest.approx((2.0, 2 - t1, 2 + t1))


def test_a_nonnegative_quantitys_interval_never_goes_below_zero():
    """A relative error over seeds whose Student-t interval reaches below zero (docs/findings/findings.md
    once printed "4.26 % [-1.3, 9.8]"): its interval is formed on the log scale, positive, with
    the same mean; unit metrics stay clipped to [0, 1]; a tight spread reads as the t interval."""
    from testbed.scoring.accuracy import positive_ci, summarise

    # Prepare: three seeds' errors with a large spread
    vals = [0.005, 0.02, 0.103]
    m, lo_t, hi_t = mean_ci(vals)
    assert lo_t < 0  # the plain interval crosses zero
    # Execute
    mean, lo, hi = summarise(vals, "relative_error")
    # Assert: same mean, 0 < lo < mean < hi, the log-scale delta-method bounds
    h = (hi_t - m) / m
    assert mean == pytest.approx(m) and 0 < lo < mean < hi
    assert (lo, hi) == pytest.approx((m * math.exp(-h), m * math.exp(h)))
    assert positive_ci([0.0, 0.0]) == (0.0, 0.0, 0.0)
    # a small spread: close to the t interval
    _, lo2, hi2 = summarise([1.0, 1.01, 0.99], "relative_error")
    _, tlo2, thi2 = mean_ci([1.0, 1.01, 0.99])
    assert (lo2, hi2) == pytest.approx((tlo2, thi2), rel=1e-3)
    assert summarise([0.1, 0.9, 0.0], "leakage")[1] == 0.0  # unit metric: clipped


def test_detection_metrics_hand_values():
    s = [3.0, -1.0, 2.0, 0.5, -2.0]
    y = [True, False, False, True, False]
    d = detection_metrics(s, y)
    assert d["rows"] == 5.0 and d["noisy"] == 2.0
    assert d["roc_auc"] == pytest.approx(5 / 6)  # 5 of the 6 (noisy, clean) pairs ordered
    assert d["precision_at_rate"] == 0.5 and d["recall_at_rate"] == 0.5  # top 2: rows 0 and 2
    assert d["flagged_at_zero"] == 3.0
    assert d["precision_at_zero"] == pytest.approx(2 / 3) and d["recall_at_zero"] == 1.0
    # a tie at the cut: the earlier row is taken first
    assert detection_metrics([1.0, 1.0, 0.0], [False, True, False])["precision_at_rate"] == 0.0
    with pytest.raises(ValueError, match="3 scores for 2 rows"):
        detection_metrics([1, 2, 3], [True, False])


def test_detection_metrics_one_class_and_nothing_flagged():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # undefined values are NaN by rule, not by a warning
        clean = detection_metrics([-1.0, -2.0], [False, False])
        allnoisy = detection_metrics([1.0, -2.0], [True, True])
    assert math.isnan(clean["roc_auc"]) and math.isnan(clean["recall_at_zero"])
    assert math.isnan(clean["precision_at_zero"]) and clean["flagged_at_zero"] == 0.0
    assert "precision_at_rate" not in clean
    assert math.isnan(allnoisy["roc_auc"]) and allnoisy["precision_at_rate"] == 1.0
    assert allnoisy["recall_at_zero"] == 0.5 and allnoisy["precision_at_zero"] == 1.0


# ----------------------------------------------------------------------------- points
def test_w2_leakage_hand_values_and_clip_flags():
    truth = np.array([[0.0], [1.0]])
    out = w2_leakage(np.array([[0.0], [2.0]]), None, truth, np.array([[10.0], [11.0]]), None)
    assert out["w2"] == pytest.approx(math.sqrt(0.5))
    assert out["w2_baseline"] == pytest.approx(10.0)
    assert out["w2_ratio"] == pytest.approx(math.sqrt(0.5) / 10)
    assert out["leakage_raw"] == pytest.approx(1 - math.sqrt(0.5) / 10)
    assert out["leakage"] == out["leakage_raw"] and out["leakage_clipped"] == 0.0
    worse = w2_leakage(np.array([[20.0], [21.0]]), None, truth, np.array([[10.0], [11.0]]), None)
    assert worse["leakage_raw"] == pytest.approx(1 - 20 / 10) and worse["leakage"] == 0.0
    assert worse["leakage_clipped"] == 1.0
    exact_base = w2_leakage(truth + 1, None, truth, truth, None)
    assert exact_base["w2_ratio"] == math.inf and exact_base["leakage"] == 0.0
    assert set(w2_leakage(truth, None, truth)) == {"w2"}
    # weights are used: 0.5 stays at 0, 0.25 moves 0 -> 1 and 0.25 moves 3 -> 1
    weighted = w2_leakage(np.array([[0.0], [3.0]]), np.array([0.75, 0.25]), truth)
    assert weighted["w2"] == pytest.approx(math.sqrt(0.25 * 1 + 0.25 * 4))
    assert w2_leakage(np.array([[0.0], [3.0]]), None, truth)["w2"] == pytest.approx(math.sqrt(2))


def test_median_loo_and_coverage_at_the_radius():
    T = np.array([[0.0], [1.0], [3.0], [7.0]])  # loo NN distances 1, 1, 2, 4 -> median 1.5
    assert median_loo_nn_distance(T) == 1.5
    with pytest.raises(MetricError, match="got 1"):
        median_loo_nn_distance(T[:1])
    c = coverage_at_r(np.array([[1.5], [8.5]]), T)  # distances 1.5, 0.5, 1.5, 1.5
    assert c == {"coverage": 1.0, "coverage_r": 1.5}
    c2 = coverage_at_r(np.array([[1.5], [8.5]]), T, r=1)
    assert c2 == {"coverage": 0.25, "coverage_r": 1.0}


def test_nn_distance_is_from_differences_and_skips_non_finite_rows():
    truth = np.array([[0.0, 0.0], [5.0, 5.0]])
    recon = np.array([[0.0, 0.5], [np.nan, 0.0], [5.0, 6.0]])
    np.testing.assert_array_equal(_nn_distance(truth, recon), [0.5, 1.0])
    assert np.all(_nn_distance(truth, np.zeros((0, 2))) == np.inf)
    three = np.vstack([truth, [[1.0, 1.0]]])  # one distance per private row, whatever happens
    assert _nn_distance(three, np.zeros((0, 2))).shape == (3,)
    assert _nn_distance(three, np.full((2, 2), np.nan)).shape == (3,)
    assert np.all(_nn_distance(truth, np.full((2, 2), np.inf)) == np.inf)
    assert np.all(_nn_distance(truth, np.zeros(2)) == np.inf)  # not rows
    with pytest.raises(MetricError, match="dimension 3, private data 2"):
        _nn_distance(truth, np.zeros((2, 3)))
    # the true nearest row among several near candidates (one recon row only: k clipped to 1)
    np.testing.assert_array_equal(_nn_distance(truth, np.array([[5.0, 5.0]])), [math.sqrt(50), 0])
    R = np.array([[0.0, 3.0], [0.0, 2.0], [0.0, 1.0], [0.0, 4.0], [0.0, 5.0]])
    np.testing.assert_array_equal(_nn_distance(np.array([[0.0, 0.0]]), R), [1.0])


def test_exact_recovery_tolerance_and_rate_at_the_boundary():
    T = np.array([[0.0, 2.0], [0.0, 4.0], [0.0, 6.0]])  # median norm 4
    assert exact_recovery_tolerance(T) == pytest.approx(4e-6)
    assert exact_recovery_tolerance(T, 0.125) == 0.5
    assert exact_recovery_tolerance(np.zeros((3, 2)), 0.25) == 0.25
    assert exact_recovery_tolerance(T / 8, 0.25) == 0.125  # median norm 0.5: still relative
    R = np.array([[0.0, 2.5], [0.0, 4.75], [0.0, 100.0]])
    assert exact_recovery_rate(R, T, 0.125) == pytest.approx(1 / 3)  # 0.5 <= tol: recovered
    assert exact_recovery_rate(T, T) == 1.0
    assert exact_recovery_rate(T + 1e-5, T) == 0.0


# ----------------------------------------------------------------------------- words, hist
def test_word_metrics_hand_values():
    assert matching_rate(["a", "b", "c", "a"], ["a", "c"]) == 0.75
    assert matching_rate([], ["a"]) == 0.0
    assert precision_at_k([["a", "b"], ["c"]], ["a", "c"], 2) == 0.5
    assert precision_at_k([["a", "b"], ["c"]], ["a", "c"], 1) == 1.0
    assert precision_at_k([["b", "a", "c"]], ["a", "c"], 2) == 0.5  # only the top 2 count
    assert precision_at_k([], ["a"], 3) == 0.0
    with pytest.raises(MetricError, match="got 0"):
        precision_at_k([["a"]], ["a"], 0)


def test_tv_distance_validation_names_the_histogram():
    assert tv_distance([3, 1], [1, 3]) == 0.5
    for p, q, name in (
        ([0, 0], [1], "p"),
        ([1], [1, -1, 2], "q"),
        ([1, np.nan], [1], "p"),
        ([1], [np.inf], "q"),
    ):
        with pytest.raises(MetricError, match=f"{name} must be"):
            tv_distance(p, q)


# ----------------------------------------------------------------------------- membership
def test_membership_metrics_hand_values_and_errors():
    s = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    m = np.array([1, 0, 1, 0, 0, 1], bool)
    out = membership_metrics(s, m)
    assert out["auc"] == pytest.approx(5 / 9)  # member > non-member in 5 of 9 pairs
    assert out["advantage"] == pytest.approx(1 / 3)  # threshold 0.9: TPR 1/3, FPR 0
    # 3 non-members: floor 1/3 for both levels -> TPR 2/3 at FPR 1/3
    assert out["tpr_at_1pct_fpr"] == out["tpr_at_0_1pct_fpr"] == pytest.approx(2 / 3)
    assert out["alpha_used_1pct"] == out["alpha_used_0_1pct"] == pytest.approx(1 / 3)
    assert (out["n_members"], out["n_nonmembers"]) == (3.0, 3.0)
    for bad, match in (
        ((s[:5], m), "5 scores for 6 labels"),
        ((np.r_[s[:5], np.nan], m), "finite"),
        ((s, np.ones(6, bool)), "got 6 and 0"),
        ((s, np.zeros(6, bool)), "got 0 and 6"),
    ):
        with pytest.raises(MetricError, match=match):
            membership_metrics(*bad)


def test_tpr_at_fpr_uses_the_larger_of_alpha_and_the_floor():
    fpr = np.array([0.0, 0.05, 0.1, 1.0])
    tpr = np.array([0.2, 0.5, 0.9, 1.0])
    assert tpr_at_fpr(fpr, tpr, 0.05, 100) == (0.5, 0.05)
    assert tpr_at_fpr(fpr, tpr, 0.01, 10) == (0.9, 0.1)  # floor 1/10, FPR exactly at it
    assert tpr_at_fpr(fpr, tpr, 0.0999, 1000) == (0.5, 0.0999)


def test_epsilon_lower_bound_both_inequalities_by_hand():
    n = 100

    def lo(k):
        return beta.ppf(0.025, k, n - k + 1)

    def hi(k):
        return beta.ppf(0.975, k + 1, n - k)

    # TPR 0.5, FPR 0: the first inequality binds
    assert epsilon_lower_bound(0.5, 0.0, n, n) == pytest.approx(math.log(lo(50) / hi(0)))
    # TPR 1, FPR 0.5: the second (1 - FPR <= e^eps (1 - TPR)) binds
    assert epsilon_lower_bound(1.0, 0.5, n, n) == pytest.approx(
        math.log((1 - hi(50)) / (1 - (0.025 ** (1 / n))))
    )
    d = 0.01
    assert epsilon_lower_bound(0.5, 0.0, n, n, delta=d) == pytest.approx(
        math.log((lo(50) - d) / hi(0))
    )
    assert epsilon_lower_bound(1.0, 0.5, n, n, delta=d) == pytest.approx(
        math.log((1 - d - hi(50)) / (1 - 0.025 ** (1 / n)))
    )
    # confidence 0.8: each one-sided bound at 0.9
    assert epsilon_lower_bound(0.5, 0.0, n, n, confidence=0.8) == pytest.approx(
        math.log(beta.ppf(0.1, 50, 51) / beta.ppf(0.9, 1, 100))
    )
    # rates are rounded to counts; the other boundary of the rate range is accepted
    assert epsilon_lower_bound(0.504, 0.0, n, n) == epsilon_lower_bound(0.5, 0.0, n, n)
    assert epsilon_lower_bound(0.0, 1.0, n, n) == 0.0
    for bad in ((-0.1, 0.0), (0.5, 1.1), (0.5, -0.1)):
        with pytest.raises(MetricError, match="rates must be in"):
            epsilon_lower_bound(*bad, n, n)
    with pytest.raises(MetricError, match="at least one"):
        epsilon_lower_bound(0.5, 0.5, n, 0)


def test_gdp_bounds_confidence_and_known_values():
    n = 200
    lo = beta.ppf(0.05, 150, 51)
    hi = beta.ppf(0.95, 31, 170)
    from scipy.stats import norm

    assert gdp_mu_lower_bound(0.75, 0.15, n, n, confidence=0.9) == pytest.approx(
        norm.ppf(lo) - norm.ppf(hi)
    )
    with pytest.raises(MetricError):
        gdp_mu_lower_bound(0.5, 0.5, n, 0)
    # mu = 1: delta(eps = 1) by the closed form
    assert gdp_delta(1.0, 1.0) == pytest.approx(norm.cdf(-0.5) - math.e * norm.cdf(-1.5))
    assert gdp_delta(-1.0, 1.0) == 0.0
    # a large mu needs the bracket to grow beyond 1
    e = gdp_epsilon(3.0, 1e-5)
    assert e > 4 and gdp_delta(3.0, e) == pytest.approx(1e-5, rel=1e-6)
    assert gdp_epsilon(1.0, gdp_delta(1.0, 0.0)) == 0.0  # delta(0) <= delta: eps 0


def test_epsilon_from_scores_reports_its_operating_point():
    s = np.r_[np.arange(10.0) + 20, np.arange(10.0)]
    m = np.r_[np.ones(10), np.zeros(10)].astype(bool)
    out = epsilon_lower_bound_from_scores(s, m)
    assert out == {"epsilon_lb": epsilon_lower_bound(1.0, 0.0, 10, 10), "tpr": 1.0, "fpr": 0.0}
    assert epsilon_lower_bound_from_scores(s, m, confidence=0.5)["epsilon_lb"] == pytest.approx(
        epsilon_lower_bound(1.0, 0.0, 10, 10, confidence=0.5)
    )
    assert epsilon_lower_bound_from_scores(s, m, delta=0.1)["epsilon_lb"] == pytest.approx(
        epsilon_lower_bound(1.0, 0.0, 10, 10, delta=0.1)
    )
    tied = epsilon_lower_bound_from_scores(np.zeros(20), m)
    assert tied == {"epsilon_lb": 0.0, "tpr": 0.0, "fpr": 0.0}


def test_heldout_bound_evaluates_the_chosen_threshold_on_the_odd_trials():
    m = np.array([True, True, False, False] * 10)  # even and odd trials both have 10 + 10
    s = np.where(m, 1.0, 0.0)
    s[1::2] = np.where(m[1::2], 1.0, 0.0)
    out = heldout_epsilon_lb(s, m)
    assert out["threshold"] == 1.0 and out["tpr"] == 1.0 and out["fpr"] == 0.0
    assert out["epsilon_lb"] == epsilon_lower_bound(1.0, 0.0, 10, 10)
    assert out["method"] == HELDOUT_METHOD
    # scores equal to the threshold count as positive; 3 odd non-members at it: FPR 0.3
    s2 = s.copy()
    s2[[3, 7, 11]] = 1.0
    out2 = heldout_epsilon_lb(s2, m)
    assert out2["fpr"] == pytest.approx(0.3) and out2["tpr"] == 1.0
    assert out2["epsilon_lb"] == pytest.approx(epsilon_lower_bound(1.0, 0.3, 10, 10))
    assert heldout_epsilon_lb(s, m, delta=0.1)["epsilon_lb"] == pytest.approx(
        epsilon_lower_bound(1.0, 0.0, 10, 10, delta=0.1)
    )
    assert heldout_epsilon_lb(s, m, confidence=0.5)["epsilon_lb"] == pytest.approx(
        epsilon_lower_bound(1.0, 0.0, 10, 10, confidence=0.5)
    )
    # the odd trials have no non-member: no bound
    m3 = m.copy()
    m3[1::2] = True
    none = heldout_epsilon_lb(s, m3)
    assert none == {
        "epsilon_lb": 0.0,
        "tpr": 0.0,
        "fpr": 0.0,
        "threshold": math.inf,
        "method": HELDOUT_METHOD,
    }


# ----------------------------------------------------------------------------- the scorer
X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0], [4.0, 4.0]])
Y = np.array([[9.0, 9.0], [8.0, 9.0]])


def _truth(**kw):
    parties = {
        "a": PartyTruth(X, y=np.array([0, 1, 1, 2]), source_index=np.array([0, 1])),
        "b": PartyTruth(Y, source_index=np.array([2])),
    }
    return GroundTruth(parties, **kw)


def test_score_points_row():
    out = AttackOutput("points", "a", points=X[:2].copy(), meta={"method": "m1"})
    base = AttackOutput("points", "a", points=X + 100.0)
    row = score_attack(out, base, _truth())
    assert row["kind"] == "points" and row["method"] == "m1"
    assert row["exact_recovery"] == 0.5
    assert row["exact_recovery_tol"] == pytest.approx(1e-6 * np.median([0, 1, 3, math.sqrt(32)]))
    assert row["coverage_r"] == median_loo_nn_distance(X)
    assert row["coverage"] == coverage_at_r(X[:2], X)["coverage"]
    assert row["coverage_baseline"] == 0.0
    assert row["w2_baseline"] == pytest.approx(100 * math.sqrt(2))
    assert row["leakage"] == pytest.approx(1 - row["w2"] / row["w2_baseline"])
    alone = score_attack(out, None, _truth())
    assert "coverage_baseline" not in alone and "w2_baseline" not in alone
    assert "method" not in score_attack(AttackOutput("points", "a", points=X), None, _truth())


def test_score_words_row():
    toks = ("apple", "pear", "fig", "kiwi")
    out = AttackOutput(
        "words", "a", words=("apple", "fig", "plum"), meta={"ranked": [["apple", "fig"]]}
    )
    base = AttackOutput("words", "a", words=("pear", "kiwi"))
    row = score_attack(out, base, _truth(tokens=toks))
    assert row["matching_rate"] == pytest.approx(1 / 3)  # a's document: apple, pear
    assert row["matching_rate_any"] == pytest.approx(2 / 3)  # with b's: fig
    assert row["n_words"] == 3 and row["k"] == 2 and row["precision_at_k"] == 0.5
    assert row["matching_rate_baseline"] == 0.5 and row["matching_rate_any_baseline"] == 0.5
    plain = score_attack(AttackOutput("words", "a", words=("apple",)), None, _truth(tokens=toks))
    assert "precision_at_k" not in plain and "matching_rate_baseline" not in plain
    with pytest.raises(MetricError, match="no tokens"):
        score_attack(out, None, _truth())


def test_score_membership_row_with_ground_truth_labels():
    m = np.array([True, True, False, False] * 10)
    s = np.where(m, 1.0, 0.0)
    out = AttackOutput("scores", "a", scores=s)
    row = score_attack(out, None, _truth(membership={"a": m}, delta=0.1))
    assert row["auc"] == 1.0 and row["n_members"] == 20.0 and row["kind"] == "scores"
    assert row["eps_lower"] == heldout_epsilon_lb(s, m, delta=0.1)["epsilon_lb"] > 0
    assert row["eps_method"] == HELDOUT_METHOD
    with pytest.raises(MetricError, match="no membership ground truth for 'b'"):
        score_attack(AttackOutput("scores", "b", scores=s), None, _truth(membership={"a": m}))


def test_score_membership_over_candidates_rows_and_pool_labels():
    cand = np.vstack([X, Y, X + 0.5])  # rows of a: the first 4
    s = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0, 6.0, 0.5, 0.2, 0.1])
    out = AttackOutput("scores", "a", scores=s, meta={"candidates": cand, "score": "loss"})
    base = AttackOutput("scores", "a", scores=-s)
    truth = _truth(claimed_epsilon={"a": 2.0})
    row = score_attack(out, base, truth)
    is_member = _rows_in(cand, X)
    np.testing.assert_array_equal(is_member, [True] * 4 + [False] * 6)
    ref = membership_metrics(s, is_member)
    assert row["auc"] == ref["auc"] and row["score"] == "loss"
    assert row["claimed_epsilon"] == 2.0
    assert row["eps_lower"] == row["epsilon_lb"]
    assert row["epsilon_lb"] == heldout_epsilon_lb(s, is_member, delta=1e-5)["epsilon_lb"]
    assert row["eps_method"] == HELDOUT_METHOD
    assert row["baseline_auc"] == pytest.approx(1 - ref["auc"])
    assert row["baseline_tpr_at_1pct_fpr"] == membership_metrics(-s, is_member)["tpr_at_1pct_fpr"]
    # the baseline scored in its own candidate order
    rev = AttackOutput("scores", "a", scores=s[::-1], meta={"candidates": cand[::-1]})
    assert score_attack(out, rev, truth)["baseline_auc"] == ref["auc"]
    # pool labels are used when the attack scored the pool's candidates
    pool = np.array([False, True] * 5)
    pooled = score_attack(out, None, _truth(candidates={"a": cand}, membership={"a": pool}))
    assert pooled["auc"] == membership_metrics(s, pool)["auc"]
    other = score_attack(out, None, _truth(candidates={"a": cand[::-1]}, membership={"a": pool}))
    assert other["auc"] == ref["auc"]
    assert math.isinf(score_attack(out, None, _truth())["claimed_epsilon"])


def test_rows_in_rounds_to_nine_decimals():
    C = np.array([[1.0 + 1e-11, 2.0], [1.0 + 1e-7, 2.0], [1.0, 2.0]])
    np.testing.assert_array_equal(_rows_in(C, np.array([[1.0, 2.0]])), [True, False, True])
    np.testing.assert_array_equal(_rows_in(C, np.array([1.0, 2.0])), [True, False, True])


def test_score_histogram_row_and_unknown_kind():
    out = AttackOutput("histogram", "a", histogram=np.array([0.25, 0.5, 0.25, 0.0]))
    base = AttackOutput("histogram", "a", histogram=np.array([1.0, 0.0, 0.0, 0.0]))
    row = score_attack(out, base, _truth())
    assert row == {"kind": "histogram", "tv": 0.0, "tv_baseline": 0.75}
    assert "tv_baseline" not in score_attack(out, None, _truth())
    with pytest.raises(MetricError, match="no labels"):
        score_attack(AttackOutput("histogram", "b", histogram=np.ones(2)), None, _truth())
    with pytest.raises(MetricError, match="no scorer for attack output kind 'blob'"):
        score_attack(AttackOutput("blob", "a"), None, _truth())


# ----------------------------------------------------------------------------- more boundaries
def test_relative_error_divides_by_the_exact_value():
    from testbed.scoring.metrics import relative_error

    assert relative_error(3.0, 2.0) == 0.5 and relative_error(1.0, -4.0) == 1.25


def test_gdp_mu_bound_accepts_one_trial_per_class():
    assert gdp_mu_lower_bound(1.0, 0.0, 1, 1) == 0.0  # one trial each: no evidence, no error
    for n_pos, n_neg in ((0, 5), (5, 0)):
        with pytest.raises(MetricError, match="need at least one member and one non-member"):
            gdp_mu_lower_bound(1.0, 0.0, n_pos, n_neg)


def test_gdp_delta_for_mu_other_than_one_and_epsilon_below_one():
    from scipy.stats import norm

    assert gdp_delta(2.0, 1.0) == pytest.approx(norm.cdf(0.5) - math.e * norm.cdf(-1.5))
    # delta(1) <= target < delta(0): the answer lies in (0, 1)
    target = gdp_delta(1.0, 0.5)
    assert gdp_epsilon(1.0, target) == pytest.approx(0.5, abs=1e-8)


def test_membership_labels_pool_only_when_the_target_has_both_candidates_and_labels():
    from types import SimpleNamespace

    from testbed.scoring.metrics import membership_labels

    cand = np.vstack([X[:2], Y])
    rows = membership_labels(cand, "a", _truth(candidates={"a": cand}))  # no labels: rows of a
    np.testing.assert_array_equal(rows, [True, True, False, False])
    pool = membership_labels(
        cand, "a", _truth(candidates={"a": cand}, membership={"a": [0, 1, 1, 0]})
    )
    assert pool.dtype == bool and pool.tolist() == [False, True, True, False]
    bare = SimpleNamespace(parties=_truth().parties, membership=None)  # an older truth record
    np.testing.assert_array_equal(membership_labels(cand, "b", bare), [False, False, True, True])


def test_candidate_membership_audit_is_at_delta_1e_5():
    rng = np.random.default_rng(3)
    cand = rng.normal(size=(80, 2))
    labels = np.array([True, True, False, False] * 20)
    s = np.where(labels, 1.0, 0.0) + 0.01 * rng.normal(size=80)
    out = AttackOutput("scores", "a", scores=s, meta={"candidates": cand})
    row = score_attack(out, None, _truth(candidates={"a": cand}, membership={"a": labels}))
    assert row["epsilon_lb"] == heldout_epsilon_lb(s, labels, delta=1e-5)["epsilon_lb"] > 1.0
    assert row["epsilon_lb"] != heldout_epsilon_lb(s, labels)["epsilon_lb"]


def test_detection_metrics_takes_columns_and_integer_masks():
    s = np.array([[3.0], [-1.0], [2.0], [0.5], [-2.0]])
    ref = detection_metrics(s.ravel(), [True, False, False, True, False])
    got = detection_metrics(s, np.array([[1], [0], [0], [1], [0]]))
    assert got == ref and got["recall_at_zero"] == 1.0


def test_rows_in_casts_both_sides_and_rounds_at_nine_decimals():
    X = np.array([[1.5, 2.25], [3.0, 4.0]])
    C = np.array([[1.5 + 3e-10, 2.25], [1.5 + 3e-9, 2.25], [3.0, 4.0], [2.0, 2.0]])
    np.testing.assert_array_equal(_rows_in(C, X), [True, False, True, False])
    ints = np.array([[3, 4], [4, 3]])
    np.testing.assert_array_equal(_rows_in(ints, X), [True, False])
    np.testing.assert_array_equal(_rows_in(C[2:], ints), [True, False])


def _two_halves(n_half=100, members_share=0.6):
    """Even trials separate perfectly at 1.0; odd ones: 80 % of members and 5 % of non-members
    score 1.0, the other members 0.5, the other non-members 0."""
    k = int(members_share * n_half)
    m_even = np.arange(n_half) < k
    m_odd = np.arange(n_half) < k
    s_even = np.where(m_even, 1.0, 0.0)
    s_odd = np.zeros(n_half)
    s_odd[: int(0.8 * k)] = 1.0
    s_odd[int(0.8 * k) : k] = 0.5
    s_odd[k : k + int(0.05 * (n_half - k))] = 1.0
    m = np.empty(2 * n_half, bool)
    s = np.empty(2 * n_half)
    m[::2], m[1::2], s[::2], s[1::2] = m_even, m_odd, s_even, s_odd
    return s, m, k


def test_heldout_threshold_comes_from_the_even_trials_only():
    s, m, k = _two_halves()
    out = heldout_epsilon_lb(s, m)
    # threshold 1.0 from the even trials; on the odd ones TPR 0.8, FPR 0.05 (not 1.0 and 0.05,
    # which the odd trials' own best threshold 0.5 would give)
    assert out["threshold"] == 1.0
    assert out["tpr"] == pytest.approx(0.8) and out["fpr"] == pytest.approx(0.05)
    assert out["epsilon_lb"] == epsilon_lower_bound(0.8, 0.05, k, 100 - k) > 0
    # integer labels are membership flags, not bit patterns
    assert heldout_epsilon_lb(s, m.astype(int)) == out


def test_heldout_without_one_class_in_the_fit_half_gives_no_bound():
    s, m, _ = _two_halves()
    for flip in (True, False):
        m2 = m.copy()
        m2[::2] = flip
        out = heldout_epsilon_lb(s, m2)
        assert out["epsilon_lb"] == 0.0 and out["threshold"] == math.inf


def test_heldout_without_evidence_predicts_nobody():
    # the even trials carry no signal: every threshold bounds 0; the first (inf) is kept
    m = np.array([True, True, False, False] * 20)  # both classes in both halves
    s = np.zeros(80)
    out = heldout_epsilon_lb(s, m)
    assert out["threshold"] == math.inf and out["tpr"] == 0.0 and out["fpr"] == 0.0


def test_detection_ties_are_broken_by_row_order_and_one_noisy_row_has_a_recall():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 3, size=20).astype(float)
    y = rng.random(20) < 0.4
    k = int(y.sum())
    top = sorted(range(20), key=lambda i: (-s[i], i))[:k]  # earlier row first among ties
    assert detection_metrics(s, y)["precision_at_rate"] == pytest.approx(y[top].mean())
    one = detection_metrics([2.0, -1.0, 0.5], [False, True, False])
    assert one["recall_at_zero"] == 0.0 and one["precision_at_zero"] == 0.0


def test_w2_leakage_uses_baseline_weights_and_small_baseline_distances():
    truth = np.array([[0.0], [1.0]])
    base = np.array([[0.0], [3.0]])
    out = w2_leakage(truth[:1], None, truth, base, np.array([0.75, 0.25]))
    assert out["w2_baseline"] == pytest.approx(math.sqrt(1.25))
    near = w2_leakage(np.array([[0.0], [1.1]]), None, truth, np.array([[0.0], [1.5]]), None)
    assert near["w2_baseline"] == pytest.approx(math.sqrt(0.125))
    assert near["w2_ratio"] == pytest.approx(math.sqrt(0.005) / math.sqrt(0.125))


def _interleave(fit_scores, fit_members):
    s = np.repeat(np.asarray(fit_scores, float), 2)  # odd trials: a copy of the even ones
    m = np.repeat(np.asarray(fit_members, bool), 2)
    return s, m


def test_heldout_threshold_search_uses_the_fit_half_s_own_counts_and_delta():
    members = np.r_[np.ones(30, bool), np.zeros(10, bool)]
    # with 30 members and 10 non-members no threshold gives evidence (it would with 30 and 30)
    a = [2, 3, 4, 5, 0, 0, 4, 5, 1, 1, 5, 2, 1, 4, 1, 2, 3, 3, 0, 0, 5, 4, 5, 3, 4, 1, 2, 4, 0, 1]
    s, m = _interleave(a + [0, 1, 3, 0, 1, 1, 3, 0, 2, 1], members)
    assert heldout_epsilon_lb(s, m)["threshold"] == math.inf
    # here delta = 0.05 removes the evidence that delta = 0 finds at threshold 2
    b = [0, 0, 3, 2, 0, 0, 5, 3, 0, 1, 3, 1, 4, 1, 3, 0, 4, 4, 3, 3, 0, 3, 2, 0, 0, 2, 4, 4, 1, 0]
    s, m = _interleave(b + [1, 1, 0, 0, 1, 0, 0, 0, 1, 1], members)
    assert heldout_epsilon_lb(s, m)["threshold"] == 2.0
    assert heldout_epsilon_lb(s, m, delta=0.05)["threshold"] == math.inf
    # odd trials without members: no bound (and no error)
    s, m = _two_halves()[:2]
    m[1::2] = False
    assert heldout_epsilon_lb(s, m)["epsilon_lb"] == 0.0


def test_median_loo_with_two_rows_and_the_error_counts_rows():
    assert median_loo_nn_distance(np.array([[0.0, 0.0], [3.0, 4.0]])) == 5.0
    with pytest.raises(MetricError, match="got 1$"):
        median_loo_nn_distance(np.zeros((1, 3)))


def test_roc_keeps_collinear_points():
    # tied pairs: the ROC steps (1/3, 1/3), (2/3, 2/3) lie on a line; TPR at the floor FPR 1/3
    # needs the first of them
    from testbed.scoring.metrics import _roc

    out = membership_metrics([3.0, 3.0, 2.0, 2.0, 1.0, 1.0], [1, 0, 1, 0, 1, 0])
    assert out["tpr_at_1pct_fpr"] == pytest.approx(1 / 3)
    fpr, tpr, thr, n_pos, n_neg = _roc([3.0, 3.0, 2.0, 2.0, 1.0, 1.0], [1, 0, 1, 0, 1, 0])
    assert (n_pos, n_neg) == (3, 3) and thr[1:].tolist() == [3.0, 2.0, 1.0]
    assert tpr_at_fpr(fpr, tpr, 2 / 3, n_neg) == (pytest.approx(2 / 3), 2 / 3)


def test_score_attack_passes_weights_and_scores_the_baseline_itself():
    truth = _truth()
    pts = np.array([[0.0, 0.0], [4.0, 4.0]])
    w = np.array([0.9, 0.1])
    out = AttackOutput("points", "a", points=pts, weights=w, meta=None)
    base = AttackOutput("points", "a", points=X.copy(), weights=np.array([0.7, 0.1, 0.1, 0.1]))
    row = score_attack(out, base, truth)
    ref = w2_leakage(pts, w, X, X, base.weights)
    assert row["w2"] == pytest.approx(ref["w2"]) and row["w2_baseline"] == pytest.approx(
        ref["w2_baseline"]
    )
    assert row["w2_baseline"] > 0.1 and row["coverage_baseline"] == 1.0
    assert "method" not in row


def test_score_histogram_with_float_labels():
    parties = {"a": PartyTruth(X, y=np.array([0.0, 1.0, 1.0, 2.0]))}
    out = AttackOutput("histogram", "a", histogram=np.array([0.25, 0.5, 0.25]))
    assert score_attack(out, None, GroundTruth(parties))["tv"] == 0.0
