"""The POT layer: geodesic identities, Theorem 1 of FedWAD, solver failure handling."""

from __future__ import annotations

import numpy as np
import ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed import ot as tot
from testbed.errors import OTSolverError
from testbed.measure import Measure
from tests.strategies import measures

FAST = settings(max_examples=40, deadline=None)


@FAST
@given(data=st.data(), t=st.floats(0.05, 0.95))
def test_exact_interpolation_is_on_the_geodesic(data, t):
    # Prepare: two measures of unequal sizes and non-uniform weights in the same dimension
    mu = data.draw(measures(min_n=2, max_n=10, d=2, uniform=False))
    nu = data.draw(measures(min_n=2, max_n=10, d=2, uniform=False))
    w = tot.wasserstein(mu, nu)
    # Execute
    eta = tot.interpolate_exact(mu, nu, t)
    # Assert: W(mu, eta_t) = t W(mu, nu) and W(eta_t, nu) = (1 - t) W(mu, nu)
    # atol: W = sqrt(cost) turns a 1e-16 round-off in the cost into ~1e-8
    np.testing.assert_allclose(tot.wasserstein(mu, eta), t * w, rtol=1e-7, atol=1e-6)
    np.testing.assert_allclose(tot.wasserstein(eta, nu), (1 - t) * w, rtol=1e-7, atol=1e-6)
    assert eta.n <= mu.n + nu.n - 1


@FAST
@given(data=st.data(), t=st.floats(0.05, 0.95), k=st.integers(2, 4))
def test_exact_interpolation_merges_atoms_that_coincide(data, t, k):
    """Duplicated rows move to the same points: those atoms are one (summed weight), the
    measure is the same, and iterating keeps the support bounded (it grew every round)."""
    base = data.draw(measures(min_n=1, max_n=6, d=2, uniform=True))
    nu = data.draw(measures(min_n=1, max_n=6, d=2, uniform=True))
    mu = Measure(np.tile(base.support, (k, 1)))  # every row k times
    eta = tot.interpolate_exact(mu, nu, t)
    assert len(np.unique(eta.support, axis=0)) == eta.n
    assert eta.n <= base.n + nu.n - 1
    w = tot.wasserstein(mu, nu)
    np.testing.assert_allclose(tot.wasserstein(mu, eta), t * w, rtol=1e-7, atol=1e-6)
    xi = Measure(nu.support[:1])  # FedWAD's accurate mode: iterate from one atom
    for _ in range(6):
        xi = tot.interpolate_exact(mu, tot.interpolate_exact(xi, nu, t), t)
        assert xi.n <= base.n * nu.n  # at most one atom per pair of distinct points


def test_merging_leaves_a_measure_without_coinciding_atoms_as_it_was():
    rng = np.random.default_rng(3)
    mu, nu = (
        Measure(rng.normal(size=(7, 3))),
        Measure(rng.normal(size=(5, 3)), rng.dirichlet([1] * 5)),
    )
    P, _ = tot.plan(mu, nu)
    rows, cols = np.nonzero(P > 1e-12 * P.max())
    eta = tot.interpolate_exact(mu, nu, 0.3, P=P)
    want = 0.7 * mu.support[rows] + 0.3 * nu.support[cols]
    assert np.array_equal(eta.support, want)  # bit for bit, same order
    np.testing.assert_array_equal(
        eta.weights, Measure(want, P[rows, cols] / P[rows, cols].sum()).weights
    )


@FAST
@given(n=st.integers(1, 15), seed=st.integers(0, 10**6), t=st.floats(0.0, 1.0))
def test_theorem1_barycentric_equals_exact_for_equal_uniform(n, seed, t):
    # Prepare: equal sizes, uniform weights
    rng = np.random.default_rng(seed)
    mu, nu = Measure(rng.normal(size=(n, 3))), Measure(rng.normal(size=(n, 3)) + 1)
    P, _ = tot.plan(mu, nu)
    # Execute
    exact = tot.interpolate_exact(mu, nu, t, P=P)
    approx = tot.interpolate_barycentric(mu, nu, t, P=P)
    # Assert: same atoms with the same masses (eq. 10 == eq. 5)
    order_e = np.lexsort(exact.support.T[::-1])
    order_a = np.lexsort(approx.support.T[::-1])
    np.testing.assert_allclose(exact.support[order_e], approx.support[order_a], atol=1e-10)
    np.testing.assert_allclose(exact.weights[order_e], approx.weights[order_a], atol=1e-12)


def test_barycentric_map_uses_general_weights():
    # Prepare: non-uniform source weights, where n*P*Y (public code) is wrong
    a = np.array([0.7, 0.3])
    b = np.array([0.5, 0.5])
    X = np.array([[0.0], [1.0]])
    Y = np.array([[0.0], [10.0]])
    P, _ = tot.emd_plan(a, b, tot.cost_matrix(X, Y))
    # Execute
    T = tot.barycentric_map(P, a, Y)
    # Assert: each row is the conditional mean of its targets
    expected = (P / a[:, None]) @ Y
    np.testing.assert_allclose(T, expected)
    assert not np.allclose(T, len(a) * P @ Y)


@FAST
@given(data=st.data(), t=st.floats(0.05, 0.95), side=st.sampled_from(["first", "second"]))
def test_barycentric_interpolation_keeps_the_chosen_side(data, t, side):
    mu = data.draw(measures(min_n=2, max_n=9, d=2, uniform=False))
    nu = data.draw(measures(min_n=2, max_n=9, d=2, uniform=False))
    out = tot.interpolate_barycentric(mu, nu, t, side=side)
    keep = mu if side == "first" else nu
    assert out.n == keep.n
    np.testing.assert_allclose(out.weights, keep.weights)
    # the mean moves along the straight line between the two means
    np.testing.assert_allclose(out.mean, (1 - t) * mu.mean + t * nu.mean, atol=1e-9)


def test_wasserstein_matches_pot_and_is_sqrt_of_cost(rng):
    X, Y = rng.normal(size=(40, 4)), rng.normal(size=(25, 4)) + 2
    expected = np.sqrt(ot.emd2(ot.unif(40), ot.unif(25), ot.dist(X, Y), numItermax=10**6))
    np.testing.assert_allclose(tot.wasserstein(Measure(X), Measure(Y)), expected, rtol=1e-12)


def test_non_optimal_plan_is_an_error(monkeypatch, rng):
    # Prepare: force POT's iteration cap far too low, as the public FedWAD code effectively does
    real_emd = ot.emd

    def capped(a, b, M, numItermax=100000, log=False, **kw):
        return real_emd(a, b, M, numItermax=5, log=log, **kw)

    monkeypatch.setattr(ot, "emd", capped)
    X, Y = rng.normal(size=(60, 2)), rng.normal(size=(60, 2))
    # Execute / Assert
    with pytest.raises(OTSolverError, match="numItermax"):
        tot.plan(Measure(X), Measure(Y))


def test_gaussian_closed_form_is_approached_by_samples():
    rng = np.random.default_rng(0)
    m1, m2 = np.zeros(2), np.array([3.0, 1.0])
    S = np.array([[1.0, 0.5], [0.5, 1.0]])
    X = rng.multivariate_normal(m1, S, 1500)
    Y = rng.multivariate_normal(m2, S, 1500)
    closed = tot.gaussian_w2(m1, S, m2, S)
    np.testing.assert_allclose(closed, np.linalg.norm(m2 - m1), rtol=1e-9)
    np.testing.assert_allclose(tot.wasserstein(Measure(X), Measure(Y)), closed, rtol=0.05)


def test_measure_validation():
    from testbed.errors import DataError

    with pytest.raises(DataError, match="NaN"):
        Measure([[0.0], [np.nan]])
    with pytest.raises(DataError, match="sum to 1"):
        Measure([[0.0], [1.0]], [0.5, 0.6])
    with pytest.raises(DataError, match="nonnegative"):
        Measure([[0.0], [1.0]], [1.5, -0.5])
    with pytest.raises(DataError, match="non-empty"):
        Measure(np.zeros((0, 2)))
    m = Measure([[0.0, 1.0]])
    with pytest.raises(ValueError):
        m.support[0, 0] = 3.0
