"""Inverting TriangleWad-style interpolants eta = (1-t) x + t b toward a Gaussian gamma
(eta built here with testbed.ot; the TriangleWad protocol itself lives on another branch)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attacks.measure_inversion import (
    MeasureInversion,
    estimate_t,
    invert_barycentric_push,
    public_gamma,
)
from testbed import ot as tot
from testbed.exchange.bus import Bus, PublicInfo
from testbed.measure import Measure
from testbed.scoring.metrics import exact_recovery_rate, w2_leakage


@functools.lru_cache(maxsize=1)
def _digits():
    from sklearn.datasets import load_digits

    return load_digits().data.astype(np.float64)


def _eta(X, k, t=0.5, scale=1.0, seed=0):
    gamma = Measure(np.random.default_rng(seed).normal(0.0, scale, size=(k, X.shape[1])))
    return tot.interpolate_barycentric(Measure(X), gamma, t, side="first"), gamma


def recovery_curve(X, ks, t=0.5):
    """Exact-recovery rate (1e-6) of the inversion for each gamma size k (known t)."""
    out = {}
    for k in ks:
        eta, gamma = _eta(X, k, t)
        out[k] = exact_recovery_rate(invert_barycentric_push(eta, gamma, t), X)
    return out


@pytest.mark.parametrize("k", [1, 2, 5, 10])
def test_inversion_recovers_digits_exactly_for_small_k(k):
    # Prepare: the whole digits set (1797 rows) as one party's data
    X = _digits()
    # Execute
    rate = recovery_curve(X, [k])[k]
    # Assert: only the <= k-1 rows whose mass the plan splits can be missed
    assert rate >= 0.99
    assert rate >= 1 - (k - 1) / X.shape[0] - 1e-12


def test_inversion_degrades_as_k_grows():
    # Prepare: the first 901 rows of load_digits() (all ten classes), k from 1 to the data size
    X = _digits()[:901]
    # Execute
    curve = recovery_curve(X, [1, 10, 100, 450])
    # Assert: exact for k = 1, then fewer rows as k grows (more split masses)
    assert curve[1] == 1.0
    assert curve[10] > curve[100] > curve[450]
    assert curve[450] < 0.8


@given(st.integers(0, 10_000), st.floats(0.05, 0.9), st.integers(1, 6))
@settings(max_examples=25, deadline=None)
def test_inversion_exact_when_sizes_are_multiples(seed, t, k):
    # m a multiple of k: the plan is a pure assignment, no mass is split -> every row recovered
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(4 * k, 3)) * 3
    eta, gamma = _eta(X, k, t, seed=seed + 1)
    np.testing.assert_allclose(invert_barycentric_push(eta, gamma, t), X, atol=1e-6)


def test_hidden_t_is_estimated_from_the_public_prior():
    # Prepare: gaussian data whose moments the public prior knows
    rng = np.random.default_rng(2)
    X = rng.normal(3.0, 2.0, size=(300, 4))
    eta, gamma = _eta(X, 20, t=0.4, scale=1.0)
    # Execute
    t_hat = estimate_t(eta, gamma, np.full(4, 3.0), 4.0 * np.eye(4))
    rec = invert_barycentric_push(eta, gamma, t_hat)
    naive = w2_leakage(rec, None, X, eta.support, None)
    # Assert: t close, distribution recovered far better than eta itself
    assert abs(t_hat - 0.4) < 0.05
    assert naive["w2_ratio"] < 0.2


def test_plugin_reads_eta_and_public_gamma():
    # Prepare: a transcript following the message contract (eta from alice to bob)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    params = {"t": 0.3, "gamma_size": 8, "gamma_seed": 5, "gamma_mean": 0.0, "gamma_scale": 2.0}
    gamma = public_gamma(params, 3)
    eta = tot.interpolate_barycentric(Measure(X), gamma, 0.3, side="first")
    bus = Bus()
    bus.send("alice", "bob", "triangle_wad.eta", eta)
    public = PublicInfo(protocol="triangle_wad", params=params, parties=("alice", "bob"), dim=3)
    # Execute
    seen_by_bob = MeasureInversion().run(bus.transcript.view("bob"), public, rng)
    seen_by_server = MeasureInversion().run(bus.transcript.view("server"), public, rng)
    # Assert
    assert [o.target for o in seen_by_bob] == ["alice"] and seen_by_server == []
    assert seen_by_bob[0].meta["t_source"] == "public"
    np.testing.assert_allclose(exact_recovery_rate(seen_by_bob[0].points, X), 1.0)


def test_plugin_takes_the_announced_seed_with_the_public_mean_and_std():
    # Prepare: gamma_seed null, so gamma's seed is announced (seed and shape, integers); the
    # mean and std are the public config's, not the generator's defaults 0 and 1
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 2))
    params = {"t": 0.4, "support_size": 1, "gamma_seed": None, "gamma_mean": 3.0, "gamma_std": 0.5}
    gamma = public_gamma({**params, "gamma_seed": 11}, 2)
    eta = tot.interpolate_barycentric(Measure(X), gamma, 0.4, side="first")
    bus = Bus()
    announced = {"seed": 11, "support_size": 1, "dim": 2}
    bus.send("alice", "bob", "triangle_wad.gamma_params", announced)  # the unknown-t buyer
    bus.send("alice", "bob", "triangle_wad.eta", eta)
    public = PublicInfo(protocol="triangle_wad", params=params, parties=("alice", "bob"), dim=2)
    # Execute
    out = MeasureInversion().run(bus.transcript.view("bob"), public, rng)
    # Assert: with k = 1 the inversion is exact only with the right gamma
    assert [o.target for o in out] == ["alice"]
    np.testing.assert_allclose(exact_recovery_rate(out[0].points, X), 1.0)
