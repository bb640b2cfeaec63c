"""Privacy-ledger accounting checked against opacus and against its own definitions: the RDP
order grid, calibration, composition of mixed events and claims, the μ-GDP claim, the
noise-setting validation and the summary. Written against the survivors of mutation testing
(docs/guide/development.md, "Mutation testing")."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from pydantic import ValidationError

from testbed.exchange.ledger import (
    RDP_ORDERS,
    GaussianNoiseChoice,
    MechanismEvent,
    PrivacyLedger,
    calibrate_noise_multiplier,
    calibrated_multiplier,
)


def _opacus_eps(history, delta, accountant="rdp"):
    """opacus's own epsilon, the oracle the ledger is checked against. Called bare, opacus warns
    where the ledger keeps quiet (tested below): an optimum at an extreme order, and PRV's
    log(1 - q) = -inf for full-batch releases. Neither changes the value, so the oracle is read
    with those two warnings off."""
    from opacus.accountants import PRVAccountant, RDPAccountant

    acc = RDPAccountant() if accountant == "rdp" else PRVAccountant()
    acc.history = list(history)
    with warnings.catch_warnings(), np.errstate(divide="ignore"):
        warnings.filterwarnings("ignore", message="Optimal order is the")
        if accountant == "rdp":
            return acc.get_epsilon(delta, alphas=RDP_ORDERS)
        return acc.get_epsilon(delta)


def test_rdp_orders_extend_opacus_defaults_on_both_sides():
    from opacus.accountants.rdp import RDPAccountant

    assert set(RDPAccountant.DEFAULT_ALPHAS) <= set(RDP_ORDERS)
    assert RDP_ORDERS == sorted(set(RDP_ORDERS))  # increasing, no repeats
    fine = [o for o in RDP_ORDERS if o < 1.1]
    np.testing.assert_allclose(fine, [1 + x / 100 for x in range(1, 10)])
    assert RDP_ORDERS[-10:] == [80, 100, 128, 160, 200, 256, 384, 512, 768, 1024]
    assert len(RDP_ORDERS) == 9 + 99 + 52 + 10


def test_extreme_optimal_orders_raise_no_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # opacus's "Optimal order is the ..." note is filtered
        for z in (1000.0, 0.002):  # optimum at the largest / smallest order
            L = PrivacyLedger()
            L.record(MechanismEvent("a", "gaussian", z))
            assert math.isfinite(L.epsilon("a", 1e-5))
        calibrate_noise_multiplier(0.004, 1e-5, 1)


def test_heavily_noised_single_release_needs_the_small_orders():
    # one release at z = 50 has its optimum below order 1.1: the extended grid gives a smaller
    # (still valid) epsilon than opacus's default grid
    from opacus.accountants import RDPAccountant

    L = PrivacyLedger(accountant="rdp")
    L.record(MechanismEvent("a", "gaussian", 50.0))
    default = RDPAccountant()
    default.history = [(50.0, 1.0, 1)]
    with warnings.catch_warnings():  # its optimum is the default grid's edge, which it says
        warnings.filterwarnings("ignore", message="Optimal order is the")
        assert L.epsilon("a", 1e-5) < default.get_epsilon(1e-5) - 1e-4
    np.testing.assert_allclose(L.epsilon("a", 1e-5), _opacus_eps([(50.0, 1.0, 1)], 1e-5))


@pytest.mark.parametrize("target,releases", [(1.0, 1), (4.0, 10), (0.1, 1), (0.3, 2)])
def test_calibrated_noise_meets_the_target_within_opacus_tolerance(target, releases):
    # calibrated with the ledger's own orders (small targets need orders below 1.1): the
    # ledger's epsilon of the result is within opacus's tolerance 0.005 below the target
    z = calibrate_noise_multiplier(target, 1e-5, releases, accountant="rdp")
    eps = _opacus_eps([(z, 1.0, releases)], 1e-5)
    assert target - 0.005 <= eps <= target
    assert calibrated_multiplier(target, 1e-5, releases, "rdp") == z
    # more releases at the same budget need more noise
    assert calibrate_noise_multiplier(target, 1e-5, releases + 5, accountant="rdp") > z


def test_calibration_with_the_prv_accountant():
    z = calibrate_noise_multiplier(2.0, 1e-5, 3, accountant="prv")
    eps = _opacus_eps([(z, 1.0, 3)], 1e-5, "prv")
    assert 2.0 - 0.005 <= eps <= 2.0


def test_the_prv_accountant_prints_nothing():
    """opacus's PRV takes log(1 - q) = -inf for full-batch releases on purpose; the ledger reads
    it under np.errstate, so a user sees no "divide by zero" RuntimeWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z = calibrate_noise_multiplier(2.0, 1e-5, 3, accountant="prv")
        L = PrivacyLedger(accountant="prv")
        L.record(MechanismEvent("a", "gaussian", z, count=3))
        assert 0 < L.epsilon("a", 1e-5) <= 2.0


def test_gaussian_noise_choice_defaults_and_validation():
    c = GaussianNoiseChoice()
    assert c.noise_multiplier == 1.0 and c.target_epsilon is None and c.target_delta == 1e-5
    t = GaussianNoiseChoice(target_epsilon=2.0)
    assert t.noise_multiplier is None and t.target_epsilon == 2.0
    assert GaussianNoiseChoice(noise_multiplier=0.0).noise_multiplier == 0.0
    for bad in (
        {"noise_multiplier": -0.1},
        {"target_epsilon": 0.0},
        {"target_epsilon": 1e300},  # opacus's search for it never ended
        {"noise_multiplier": 1e300},  # inf in the cost matrices, then a misleading POT error
        {"target_delta": 0.0},
        {"target_delta": 1.0},
        {"noise_multiplier": 1.0, "target_epsilon": 1.0},
        {"noise_multiplier": None},
    ):
        with pytest.raises(ValidationError):
            GaussianNoiseChoice(**bad)
    assert GaussianNoiseChoice(target_delta=0.5).noise_multiplier == 1.0


def test_mechanism_event_defaults():
    e = MechanismEvent("a", "gaussian", 2.0)
    assert (e.sample_rate, e.count, e.epsilon, e.note) == (1.0, 1, None, "")
    assert math.isnan(e.sensitivity) and math.isnan(e.sigma)
    assert PrivacyLedger().accountant == "pld"


def test_epsilon_composes_gaussian_pure_and_claimed_parts():
    L = PrivacyLedger(accountant="rdp")
    L.record(MechanismEvent("a", "gaussian", 1.5, count=3))
    L.record(MechanismEvent("a", "gaussian", 4.0, sample_rate=0.1, count=20))
    L.record(MechanismEvent("a", "laplace", 0.0, epsilon=0.2, count=2))
    L.record(MechanismEvent("b", "gaussian", 0.5))
    L.claim("a", 0.7, 1e-5)
    rdp = _opacus_eps([(1.5, 1.0, 3), (4.0, 0.1, 20)], 1e-5)
    np.testing.assert_allclose(L.epsilon("a", 1e-5), rdp + 0.4 + 0.7, rtol=1e-12)
    np.testing.assert_allclose(L.epsilon("b", 1e-5), _opacus_eps([(0.5, 1.0, 1)], 1e-5))
    assert L.epsilon("nobody", 1e-5) == math.inf
    # a smaller delta costs more epsilon
    assert L.epsilon("b", 1e-7) > L.epsilon("b", 1e-5)


def test_a_noiseless_gaussian_event_means_no_protection_even_beside_pure_ones():
    L = PrivacyLedger()
    L.record(MechanismEvent("a", "laplace", 0.0, epsilon=0.5))
    L.record(MechanismEvent("a", "gaussian", 0.0))
    assert L.epsilon("a", 1e-5) == math.inf
    assert L.gdp_mu("a") is None  # a pure event is not Gaussian
    L2 = PrivacyLedger()
    L2.record(MechanismEvent("a", "gaussian", 1e-3))
    assert math.isfinite(L2.epsilon("a", 1e-5)) and L2.epsilon("a", 1e-5) > 100


def test_prv_accountant_is_opacus_prv():
    L = PrivacyLedger(accountant="prv")
    L.record(MechanismEvent("a", "gaussian", 1.0, count=4))
    np.testing.assert_allclose(
        L.epsilon("a", 1e-5), _opacus_eps([(1.0, 1.0, 4)], 1e-5, "prv"), rtol=1e-9
    )
    assert L.summary(1e-5)["a"]["accountant"] == "prv"


def test_gdp_mu_only_for_full_batch_gaussian_events():
    L = PrivacyLedger()
    L.record(MechanismEvent("g", "gaussian", 0.5, count=2))
    L.record(MechanismEvent("g", "gaussian", 2.0))
    assert L.gdp_mu("g") == pytest.approx(math.sqrt(2 / 0.25 + 1 / 4))
    L.record(MechanismEvent("s", "dpsgd", 1.0))  # not the Gaussian mechanism itself
    assert L.gdp_mu("s") is None
    L.record(MechanismEvent("n", "gaussian", -1.0))
    assert L.gdp_mu("n") == math.inf and L.epsilon("n", 1e-5) == math.inf


def test_claims_are_floats_and_summary_per_party():
    L = PrivacyLedger()
    L.claim("c", 3, 1e-6)
    assert L.claims["c"] == (3.0, 1e-6) and isinstance(L.claims["c"][0], float)
    L.record(MechanismEvent("a", "gaussian", 2.0, count=3))
    L.record(MechanismEvent("a", "gaussian", 1.0, count=2))
    L.record(MechanismEvent("a", "gaussian", 2.0))
    L.record(MechanismEvent("b", "gaussian", 1.0))
    s = L.summary(1e-6)
    assert list(s) == ["a", "b", "c"]
    assert s["a"] == {
        "epsilon": L.epsilon("a", 1e-6),
        "delta": 1e-6,
        "events": 6,
        "accountant": "pld",
        "noise_multipliers": [1.0, 2.0],
    }
    assert s["c"]["events"] == 0 and s["c"]["epsilon"] == 3.0
    assert [e["party"] for e in L.to_json()] == ["a", "a", "a", "b"]
    assert L.to_json()[0]["count"] == 3


def test_a_claim_at_its_own_delta_is_reported_at_that_delta():
    # DP-SGD's opacus accountant claims (2.0, 1e-3); the report said (2.0 + Laplace, 1e-5), an
    # epsilon understated at the delta printed beside it
    led = PrivacyLedger()
    led.claim("c0", 2.0, 1e-3)
    led.claim("c1", 2.0, 1e-3)
    led.record(MechanismEvent("c1", "laplace", 1.0, epsilon=0.5, count=2))
    led.record(MechanismEvent("c2", "gaussian", 2.0, count=3))
    s = led.summary(1e-5)
    assert s["c0"]["epsilon"] == 2.0 and s["c0"]["delta"] == 1e-3
    assert s["c1"]["epsilon"] == pytest.approx(3.0) and s["c1"]["delta"] == pytest.approx(
        1e-3 + 1e-5
    )
    assert s["c2"]["delta"] == 1e-5
