"""Unit tests of the accounting and bound functions (ledger, Clopper-Pearson, GDP): each value
checked against a ground truth computed another way."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta, norm

from testbed.exchange.ledger import MechanismEvent, PrivacyLedger
from testbed.scoring.metrics import (
    MetricError,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
    gdp_delta,
    gdp_epsilon,
    gdp_mu_lower_bound,
    heldout_epsilon_lb,
    mean_ci,
    relative_error,
    tpr_at_fpr,
)


def test_clopper_pearson_one_sided_bounds_match_beta_quantiles():
    assert clopper_pearson_lower(0, 10, 0.05) == 0.0
    assert clopper_pearson_upper(10, 10, 0.05) == 1.0
    np.testing.assert_allclose(clopper_pearson_lower(7, 10, 0.05), beta.ppf(0.05, 7, 4))
    np.testing.assert_allclose(clopper_pearson_upper(3, 10, 0.05), beta.ppf(0.95, 4, 7))
    # zero successes: the upper bound is 1 - alpha^(1/n)
    np.testing.assert_allclose(clopper_pearson_upper(0, 50, 0.025), 1 - 0.025 ** (1 / 50))
    np.testing.assert_allclose(clopper_pearson_lower(50, 50, 0.025), 0.025 ** (1 / 50))


def test_epsilon_lower_bound_perfect_separation_value():
    n = 60
    lo = 0.025 ** (1 / n)  # TPR lower bound at 60/60 (one-sided, 97.5 %)
    hi = 1 - lo  # FPR upper bound at 0/60
    np.testing.assert_allclose(epsilon_lower_bound(1.0, 0.0, n, n), math.log(lo / hi))
    assert epsilon_lower_bound(0.5, 0.5, n, n) == 0.0
    # delta lowers the bound
    assert epsilon_lower_bound(1.0, 0.0, n, n, delta=0.1) < epsilon_lower_bound(1.0, 0.0, n, n)
    with pytest.raises(MetricError):
        epsilon_lower_bound(1.2, 0.0, n, n)
    with pytest.raises(MetricError):
        epsilon_lower_bound(1.0, 0.0, 0, n)


def test_gdp_mu_lower_bound_matches_the_gaussian_tradeoff():
    n = 400
    t, f = 0.84, 0.16
    lo = beta.ppf(0.025, round(t * n), n - round(t * n) + 1)
    hi = beta.ppf(0.975, round(f * n) + 1, n - round(f * n))
    np.testing.assert_allclose(gdp_mu_lower_bound(t, f, n, n), norm.ppf(lo) - norm.ppf(hi))
    assert gdp_mu_lower_bound(0.5, 0.5, n, n) == 0.0
    assert gdp_mu_lower_bound(0.0, 0.0, n, n) == 0.0
    assert gdp_mu_lower_bound(1.0, 1.0, n, n) == 0.0
    with pytest.raises(MetricError):
        gdp_mu_lower_bound(0.9, 0.1, 0, n)


def test_gdp_delta_and_epsilon_are_inverse_and_known_values():
    # mu = 1 GDP: delta(eps = 0) = 2 Phi(1/2) - 1
    np.testing.assert_allclose(gdp_delta(1.0, 0.0), 2 * norm.cdf(0.5) - 1)
    assert gdp_delta(0.0, 1.0) == 0.0 and gdp_epsilon(0.0, 1e-5) == 0.0
    for mu in (0.5, 1.0, 2.0):
        e = gdp_epsilon(mu, 1e-5)
        np.testing.assert_allclose(gdp_delta(mu, e), 1e-5, rtol=1e-6)
        assert gdp_delta(mu, e * 0.99) > 1e-5
    assert gdp_epsilon(2.0, 1e-5) > gdp_epsilon(1.0, 1e-5) > 0
    assert gdp_epsilon(0.01, 0.5) == 0.0  # delta(0) < 0.5 already


def test_ledger_gdp_mu_composes_gaussian_events():
    L = PrivacyLedger()
    assert L.gdp_mu("a") == math.inf
    L.record(MechanismEvent("a", "gaussian", 2.0))
    L.record(MechanismEvent("a", "gaussian", 1.0, count=3))
    np.testing.assert_allclose(L.gdp_mu("a"), math.sqrt(1 / 4 + 3))
    L.record(MechanismEvent("b", "gaussian", 1.0, sample_rate=0.5))
    assert L.gdp_mu("b") is None
    L.record(MechanismEvent("c", "laplace", 1.0, epsilon=0.5))
    assert L.gdp_mu("c") is None
    L.record(MechanismEvent("d", "gaussian", 0.0))
    assert L.gdp_mu("d") == math.inf
    L.claim("e", 1.0, 1e-5)
    assert L.gdp_mu("e") is None


def test_ledger_epsilon_against_opacus_and_pure_events():
    from opacus.accountants import RDPAccountant

    from testbed.exchange.ledger import RDP_ORDERS

    L = PrivacyLedger(accountant="rdp")
    assert L.epsilon("a", 1e-5) == math.inf
    L.record(MechanismEvent("a", "gaussian", 1.0, count=2))
    acc = RDPAccountant()
    acc.history = [(1.0, 1.0, 2)]
    np.testing.assert_allclose(L.epsilon("a", 1e-5), acc.get_epsilon(1e-5, alphas=RDP_ORDERS))
    # composition grows epsilon; a pure event adds its epsilon x count
    L.record(MechanismEvent("p", "laplace", 0.0, epsilon=0.25, count=4))
    assert L.epsilon("p", 1e-5) == pytest.approx(1.0)
    L.claim("q", 2.5, 1e-5)
    assert L.epsilon("q", 1e-5) == 2.5
    L.record(MechanismEvent("z", "gaussian", 0.0))
    assert L.epsilon("z", 1e-5) == math.inf
    s = L.summary(1e-5)
    assert s["a"]["events"] == 2 and s["a"]["noise_multipliers"] == [1.0]
    assert L.parties() == ["a", "p", "q", "z"]
    assert L.to_json()[0]["noise_multiplier"] == 1.0


def test_heldout_epsilon_uses_only_the_odd_trials_for_its_bound():
    # even trials separate perfectly (they choose the threshold); odd ones are pure noise
    rng = np.random.default_rng(0)
    n = 200
    m = np.arange(n) % 4 < 2  # members at 0,1 mod 4: both halves have both classes
    s = rng.normal(size=n)
    s[::2] = np.where(m[::2], 10.0, -10.0)
    out = heldout_epsilon_lb(s, m)
    assert out["epsilon_lb"] < 1.0  # optimistic in-sample would be ~3
    assert "odd" in out["method"] and "Clopper-Pearson" in out["method"]
    one_class = heldout_epsilon_lb(np.zeros(4), np.array([True, True, True, True]))
    assert one_class["epsilon_lb"] == 0.0


def test_small_helpers():
    assert relative_error(0.0, 0.0) == 0.0 and relative_error(1.0, 0.0) == math.inf
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert relative_error(-1.1, -1.0) == pytest.approx(0.1)
    m, lo, hi = mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and lo < 2.0 < hi
    assert mean_ci([5.0]) == (5.0, 5.0, 5.0)
    assert all(math.isnan(x) for x in mean_ci([]))
    fpr = np.array([0.0, 0.005, 0.02, 1.0])
    tpr = np.array([0.1, 0.4, 0.7, 1.0])
    assert tpr_at_fpr(fpr, tpr, 0.01, 1000) == (0.4, 0.01)
    assert tpr_at_fpr(fpr, tpr, 0.001, 100) == (0.4, 0.01)  # floor 1/100
