"""The reconstruction bound beside a μ-GDP claim: one check per reconstruction row of a party the
ledger protects with full-batch Gaussian releases; a success above Φ(Φ⁻¹(κ) + μ) is a violation."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import norm

from testbed.exchange.ledger import MechanismEvent, PrivacyLedger
from testbed.run.audit_recon import reconstruction_checks

PARTIES = {"alice": SimpleNamespace(n=100), "bob": SimpleNamespace(n=100)}


def _ledger(z: float) -> PrivacyLedger:
    led = PrivacyLedger()
    led.record(MechanismEvent("alice", "gaussian", z, count=4))  # mu = 2 / z
    led.record(MechanismEvent("bob", "laplace", 1.0, epsilon=1.0))  # not a mu-GDP claim
    return led


def _row(target, coverage, baseline, **kw):
    return {
        "attack": "a",
        "target": target,
        "observer": "server",
        "coverage": coverage,
        "coverage_baseline": baseline,
        "coverage_r": 0.5,
        **kw,
    }


def test_checks_only_rows_with_a_gdp_claim_and_a_baseline():
    rows = [
        _row("alice", 0.3, 0.2),
        _row("bob", 0.9, 0.1),
        {"target": "alice", "w2": 1.0},
        _row("carol", 0.5, 0.5),
    ]
    out = reconstruction_checks(rows, _ledger(4.0), PARTIES)
    assert [c["target"] for c in out] == ["alice"]
    c = out[0]
    assert c["mu"] == pytest.approx(0.5) and c["rows"] == 100 and c["radius"] == 0.5
    assert c["bound"] > c["kappa_upper"] >= 0.2
    assert not c["violated"]


def test_a_reconstruction_beyond_the_bound_is_a_violation():
    # mu = 0.2: from kappa ~ 0.05 no attacker may exceed ~0.1; 90 % of the rows recovered
    out = reconstruction_checks([_row("alice", 0.9, 0.05)], _ledger(10.0), PARTIES)[0]
    assert out["violated"] and out["success_lower"] > out["bound"]
    kappa_hi = out["kappa_upper"]
    assert out["bound"] == pytest.approx(norm.cdf(norm.ppf(kappa_hi) + 0.2))


def test_no_claim_no_check():
    led = PrivacyLedger()
    led.record(MechanismEvent("alice", "gaussian", 0.0))  # z = 0: nothing protects it
    assert reconstruction_checks([_row("alice", 1.0, 0.0)], led, PARTIES) == []
    assert np.isinf(led.gdp_mu("alice"))


def test_kappa_is_at_least_what_the_output_covers_of_population_rows():
    # A correct epsilon = 1 claim (mu = 0.246) on a two-cluster mixture: the output (samples
    # from the noisy moments) covers 41 % of the party's rows and as much of fresh population
    # rows; the prior-only baseline covers 21 %. With kappa from the baseline alone this was a
    # "violation" (bound 0.34) in 3 of 16 runs; paired with the population it is consistent.
    led = PrivacyLedger()
    led.record(MechanismEvent("alice", "gaussian", 4.0625, count=1))  # mu = 1 / z = 0.246
    pop = _row("alice", 0.4125, 0.21, coverage_population_hi=0.4325)
    out = reconstruction_checks([pop], led, {"alice": SimpleNamespace(n=400)})[0]
    assert out["kappa_upper"] == pytest.approx(0.4325) and out["kappa_population"] == 0.4325
    assert out["bound"] == pytest.approx(norm.cdf(norm.ppf(0.4325) + 1 / 4.0625))
    assert not out["violated"]
    # the same rows recovered outright (a record leak) still refute the claim
    leak = _row("alice", 0.95, 0.21, coverage_population_hi=0.4325)
    assert reconstruction_checks([leak], led, {"alice": SimpleNamespace(n=400)})[0]["violated"]
    # without population rows kappa is the baseline's, as before
    bare = reconstruction_checks(
        [_row("alice", 0.4125, 0.21)], led, {"alice": SimpleNamespace(n=400)}
    )
    assert bare[0]["kappa_population"] is None and bare[0]["kappa_upper"] < 0.3
