"""The one-run, Gaussian-DP and reconstruction bounds of testbed.scoring.audit_bounds on
hand-made counts: values by hand and from the papers, monotonicity, zero at chance."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom, norm

from testbed.scoring.audit_bounds import (
    cp_epsilon_lower_bound,
    default_guess_grid,
    gdp_mu_from_scores,
    guess_counts,
    one_run_bounds,
    one_run_epsilon,
    one_run_gdp_mu,
    one_run_gdp_rejects,
    one_run_p_value,
    reconstruction_audit,
    reconstruction_bound,
)
from testbed.scoring.metrics import MetricError, epsilon_lower_bound


# ----------------------------------------------------------------------------- by hand
def test_p_value_without_delta_is_the_binomial_tail():
    # Steinke et al., Thm 3: correct guesses dominated by Binomial(r, e^eps / (1 + e^eps))
    q = math.exp(1.0) / (1 + math.exp(1.0))
    assert one_run_p_value(1000, 100, 80, 1.0, 0.0) == pytest.approx(binom.sf(79, 100, q))
    assert one_run_p_value(10, 4, 4, 0.0, 0.0) == pytest.approx(0.5**4)
    assert one_run_p_value(10, 4, 0, 3.0, 0.0) == 1.0


def test_p_value_delta_term_by_hand():
    # Thm 7 / their code: p = beta + 2 m delta max_i (P[Bin >= v-i] - P[Bin >= v]) / i
    m, r, v, e, d = 50, 6, 5, 0.5, 1e-3
    q = 1 / (1 + math.exp(-e))
    beta = binom.sf(v - 1, r, q)
    alpha = max((binom.sf(v - i - 1, r, q) - beta) / i for i in range(1, v + 1))
    assert one_run_p_value(m, r, v, e, d) == pytest.approx(beta + 2 * m * d * alpha)
    assert one_run_p_value(m, r, v, e, 0.5) == 1.0  # capped
    with pytest.raises(MetricError):
        one_run_p_value(5, 6, 1, 1.0, 0.0)


def test_one_run_epsilon_all_correct_has_a_closed_form():
    # delta = 0, v = r: q^r = alpha  ->  eps = logit(alpha^(1/r))
    for r in (5, 20, 100):
        q = 0.05 ** (1 / r)
        assert one_run_epsilon(1000, r, r, 0.0, 0.95) == pytest.approx(
            math.log(q / (1 - q)), abs=1e-5
        )


#: (m, r, v, delta) -> (eps of Steinke et al., mu of the f-DP test, eps of that mu at delta),
#: computed with jax-privacy 2.0.0 (jax_privacy.auditing: _epsilon_one_run, and
#: _epsilon_one_run_fdp with mu = 1/dp_accounting.get_sigma_gaussian(eps, delta)) at 95 %;
#: tests/test_audit_crosscheck.py recomputes them live when jax-privacy is installed
JAX_PRIVACY_VALUES = {
    (1000, 100, 100, 1e-5): (3.465376, 1.225533, 5.549028),
    (1000, 500, 450, 1e-5): (1.946012, 0.800151, 3.387665),
    (256, 128, 120, 1e-5): (2.089992, 0.922946, 3.990116),
    (10000, 1000, 900, 1e-6): (2.020646, 0.677193, 3.152096),
}


@pytest.mark.parametrize("case", sorted(JAX_PRIVACY_VALUES))
def test_one_run_bounds_match_jax_privacy_values(case):
    from testbed.scoring.metrics import gdp_epsilon

    m, r, v, delta = case
    eps, mu, eps_mu = JAX_PRIVACY_VALUES[case]
    assert one_run_epsilon(m, r, v, delta) == pytest.approx(eps, abs=1e-5)
    assert one_run_gdp_mu(m, r, v) == pytest.approx(mu, abs=1e-5)
    assert gdp_epsilon(one_run_gdp_mu(m, r, v), delta) == pytest.approx(eps_mu, abs=1e-4)


def test_gdp_test_without_privacy_loss_allowed_rejects_any_correct_majority():
    # mu = 0 (perfect privacy): the recursion rejects when the guesses beat chance enough
    assert one_run_gdp_rejects(1000, 100, 100, 0.0)
    assert not one_run_gdp_rejects(1000, 100, 50, 0.0)
    assert not one_run_gdp_rejects(1000, 0, 0, 0.0)
    assert one_run_gdp_mu(1000, 100, 50) == 0.0


def test_f_dp_version_is_at_least_as_tight_in_epsilon():
    # Mahloujifar et al.: the Gaussian trade-off test certifies at least the eps of the (eps,
    # delta) test on the same counts when the mechanism is Gaussian
    from testbed.scoring.metrics import gdp_epsilon

    for r, v in [(100, 95), (300, 270), (500, 400)]:
        e = one_run_epsilon(1000, r, v, 1e-5)
        assert gdp_epsilon(one_run_gdp_mu(1000, r, v), 1e-5) >= e - 1e-6


def test_guess_counts_with_abstention():
    s = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    inc = np.array([1, 1, 0, 1, 0, 0], bool)
    assert guess_counts(s, inc, 2) == (2, 2)
    assert guess_counts(s, inc, 3) == (3, 2)
    assert guess_counts(s, inc, 2, 2) == (4, 4)
    assert guess_counts(s, inc, 3, 3) == (6, 4)
    assert guess_counts(s, inc, 0, 1) == (1, 1)
    with pytest.raises(MetricError):
        guess_counts(s, inc, 4, 3)


def test_default_grid_stays_within_m():
    for m in (2, 7, 100, 1001):
        for kp, km in default_guess_grid(m):
            assert 1 <= kp and kp + km <= m


def test_cp_counts_equal_the_rate_form():
    assert cp_epsilon_lower_bound(60, 60, 0, 60, 1e-5) == epsilon_lower_bound(
        1.0, 0.0, 60, 60, 1e-5
    )
    with pytest.raises(MetricError):
        cp_epsilon_lower_bound(61, 60, 0, 60)


def test_gdp_from_scores_uses_a_bonferroni_per_threshold():
    s1, s0 = np.arange(100.0) + 1000, np.arange(100.0)
    out = gdp_mu_from_scores(s1, s0, 0.95)
    a = 0.05 / (2 * out["thresholds"])
    lo, hi = 1 - a ** (1 / 100), 1 - a ** (1 / 100)  # TPR 100/100, FPR 0/100 at t = 1000
    assert out["mu"] == pytest.approx(norm.ppf(a ** (1 / 100)) - norm.ppf(hi))
    assert lo == hi and out["threshold"] == 1000.0
    assert gdp_mu_from_scores(s0, s0)["mu"] == 0.0


def test_reconstruction_bound_values():
    assert reconstruction_bound(0.0, 0.3) == pytest.approx(0.3)
    assert reconstruction_bound(1.0, 0.5) == pytest.approx(norm.cdf(1.0))
    assert reconstruction_bound(2.0, 0.0) == 0.0
    assert reconstruction_bound(math.inf, 0.01) == 1.0 and reconstruction_bound(1.0, 1.0) == 1.0
    with pytest.raises(MetricError):
        reconstruction_bound(1.0, 1.5)


def test_reconstruction_audit_flags_success_above_the_bound():
    ok = reconstruction_audit(30, 100, 25, 100, mu=1.0)
    assert not ok["violated"] and ok["bound"] > ok["success_lower"]
    bad = reconstruction_audit(95, 100, 5, 100, mu=0.1)
    assert bad["violated"] and bad["success_lower"] > bad["bound"]
    # a measured kappa of 0 is taken at its upper bound, never as 0 (which would forbid any hit)
    assert reconstruction_audit(1, 100, 0, 100, mu=0.5)["kappa_upper"] > 0


# ----------------------------------------------------------------------------- properties
counts = st.integers(1, 400).flatmap(
    lambda m: st.tuples(st.just(m), st.integers(0, m)).flatmap(
        lambda mr: st.tuples(st.just(mr[0]), st.just(mr[1]), st.integers(0, mr[1]))
    )
)


@settings(max_examples=60, deadline=None)
@given(counts, st.sampled_from([0.0, 1e-5, 1e-3]))
def test_one_run_epsilon_is_monotone(mrv, delta):
    m, r, v = mrv
    e = one_run_epsilon(m, r, v, delta)
    assert e >= 0
    if v < r:  # one more correct guess among the same guesses: never a smaller bound
        assert one_run_epsilon(m, r, v + 1, delta) >= e - 1e-6
    assert one_run_epsilon(m, r, v, delta, 0.8) >= e - 1e-6  # less confidence, larger bound
    if delta < 1e-3:
        assert one_run_epsilon(m, r, v, 1e-3) <= e + 1e-6  # larger delta, smaller bound


@settings(max_examples=60, deadline=None)
@given(counts)
def test_one_run_bounds_are_zero_at_chance(mrv):
    m, r, _ = mrv
    v = r // 2  # half the guesses right: what a coin achieves
    assert one_run_epsilon(m, r, v, 1e-5) == 0.0
    assert one_run_gdp_mu(m, r, v) == 0.0


@settings(max_examples=40, deadline=None)
@given(counts)
def test_gdp_one_run_mu_is_monotone_in_correct_guesses(mrv):
    m, r, v = mrv
    mu = one_run_gdp_mu(m, r, v)
    assert mu >= 0
    if v < r:
        assert one_run_gdp_mu(m, r, v + 1) >= mu - 1e-6


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 5.0), st.floats(0.001, 0.999), st.floats(0.0, 1.0))
def test_reconstruction_bound_is_monotone(mu, kappa, extra):
    b = reconstruction_bound(mu, kappa)
    assert kappa - 1e-12 <= b <= 1.0
    assert reconstruction_bound(mu + extra, kappa) >= b - 1e-12
    assert reconstruction_bound(mu, min(0.999, kappa + extra / 10)) >= b - 1e-12


def test_one_run_bounds_pay_for_the_rules_tried():
    rng = np.random.default_rng(0)
    inc = rng.random(200) < 0.5
    s = np.where(inc, 1.0, -1.0) + rng.normal(0, 0.3, 200)
    one = one_run_bounds({"s": s}, inc, 1e-5, grid=[(50, 50)])
    many = one_run_bounds({"s": s, "t": s.copy()}, inc, 1e-5, grid=[(50, 50), (20, 0)])
    assert many.candidates == 4 and one.candidates == 1
    assert 0 < many.epsilon < one.epsilon  # same best rule, smaller alpha per test
    assert one.rule == ("s", 50, 50) and (one.guesses, one.correct) == (100, 100)
    assert one.mu > 0 and one.epsilon_gdp > 0
