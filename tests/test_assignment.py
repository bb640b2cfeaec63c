"""The assignment plan kept as a permutation (:class:`testbed.ot.Assignment`) and the in-place cost
matrix: the same numbers, bit for bit, as the dense plan and as POT's ``ot.dist``."""

from __future__ import annotations

import numpy as np
import ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed import ot as tot
from testbed.measure import Measure


def _problem(seed: int, n: int, d: int, ties: bool = False):
    g = np.random.default_rng(seed)
    X = g.normal(size=(n, d))
    Y = g.normal(size=(n, d)) + 0.3
    if ties:  # repeated rows: several optimal permutations, signed zeros in the cost
        X[: n // 2] = X[0]
        Y[: n // 2] = Y[0]
    Y[-1, 0] = -0.0  # a signed zero the product must turn into +0, as the matrix product does
    return X, Y


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 30),
    m=st.integers(1, 30),
    d=st.integers(1, 9),
    same=st.booleans(),
    dtype=st.sampled_from([np.float64, np.float32, np.int64]),
)
def test_cost_matrix_is_pots_dist_bit_for_bit(seed, n, m, d, same, dtype):
    g = np.random.default_rng(seed)
    X = (g.normal(size=(n, d)) * 3).astype(dtype)
    Y = X if same else (g.normal(size=(m, d)) * 3).astype(dtype)
    Xf, Yf = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    want = np.maximum(ot.dist(Xf, Yf, metric="sqeuclidean"), 0.0)
    got = tot.cost_matrix(X, Y)
    np.testing.assert_array_equal(got, want)
    assert got.tobytes() == want.tobytes()  # signed zeros too
    mu = Measure(Xf)
    nu = mu if same else Measure(Yf)
    assert (
        tot.measure_cost(mu, nu).tobytes()
        == np.maximum(ot.dist(mu.support, nu.support, metric="sqeuclidean"), 0.0).tobytes()
    )


def _loop_cost(P: np.ndarray, M: np.ndarray) -> float:
    """The cost as assignment_plan summed it before the Assignment (a Python loop, rows from
    last to first, from 0.0)."""
    rows, cols = np.nonzero(P)
    cost = 0.0
    for i in range(len(rows) - 1, -1, -1):
        cost += float(P[rows[i], cols[i]]) * float(M[rows[i], cols[i]])
    return float(max(cost, 0.0))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 40),
    d=st.integers(1, 6),
    ties=st.booleans(),
    side=st.sampled_from(["first", "second", "smallest"]),
)
def test_assignment_gives_the_dense_plans_numbers(seed, n, d, ties, side):
    X, Y = _problem(seed, n, d, ties)
    mu, nu = Measure(X), Measure(Y)
    M = tot.measure_cost(mu, nu)
    A = tot.solve_assignment(mu.weights, M)
    P = A.dense()
    # a permutation carrying a's mass
    assert np.count_nonzero(P) == n
    np.testing.assert_array_equal(P.sum(axis=1), mu.weights)
    # the same numbers as the matrix, through every function that takes a plan
    assert A.cost(M) == _loop_cost(P, M)
    assert tot.plan_product(A, Y).tobytes() == tot.plan_product(P, Y).tobytes()
    assert tot.plan_product(A, Y).tobytes() == (P @ Y).tobytes()
    assert A.T.dense().tobytes() == P.T.tobytes()
    assert tot.plan_product(A.T, X).tobytes() == tot.plan_product(P.T, X).tobytes()
    for t in (0.0, 0.3, 1.0):
        a = tot.interpolate_barycentric(mu, nu, t, side=side, P=A)
        b = tot.interpolate_barycentric(mu, nu, t, side=side, P=P)
        assert a.support.tobytes() == b.support.tobytes()
        assert a.weights.tobytes() == b.weights.tobytes()
        e = tot.interpolate_exact(mu, nu, t, P=A)
        f = tot.interpolate_exact(mu, nu, t, P=P)
        assert e.support.tobytes() == f.support.tobytes()


@pytest.mark.parametrize("n", [2, 17, 120])
def test_assignment_and_dense_paths_agree_with_pot(n):
    """emd_plan(dense=False) returns the permutation, dense=True the matrix, ot.emd the same
    optimal plan and cost (unique optimum on continuous data)."""
    X, Y = _problem(n, n, 4)
    mu, nu = Measure(X), Measure(Y)
    M = tot.measure_cost(mu, nu)
    A, c_a = tot.emd_plan(mu.weights, nu.weights, M, assignment=True, dense=False)
    P, c_p = tot.emd_plan(mu.weights, nu.weights, M, assignment=True)
    E, c_e = tot.emd_plan(mu.weights, nu.weights, M)
    assert isinstance(A, tot.Assignment) and isinstance(P, np.ndarray)
    assert A.dense().tobytes() == P.tobytes() == E.tobytes()
    assert c_a == c_p == c_e
    assert tot.sq_wasserstein(mu, nu, assignment=True) == c_e
    # not a uniform square problem: the network simplex's matrix whatever dense says
    Q, _ = tot.emd_plan(mu.weights, np.full(n, 1.0 / n), M[:, :], assignment=False, dense=False)
    assert isinstance(Q, np.ndarray)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 25))
def test_any_permutation_with_any_mass_matches_its_matrix(seed, n):
    """The methods hold for any permutation and positive masses, not only the uniform ones a
    solve returns (a transposed plan carries the masses to the other side)."""
    g = np.random.default_rng(seed)
    A = tot.Assignment(g.uniform(0.1, 1.0, n), g.permutation(n))
    P = A.dense()
    Y, M = g.normal(size=(n, 3)), g.uniform(0, 5, size=(n, n))
    assert A.T.dense().tobytes() == P.T.tobytes()
    assert A.T.T.dense().tobytes() == P.tobytes()
    assert A.product(Y).tobytes() == tot.plan_product(P, Y).tobytes()
    assert A.T.product(Y).tobytes() == tot.plan_product(P.T, Y).tobytes()
    assert A.cost(M) == _loop_cost(P, M)


def test_cost_sums_like_the_loop_when_every_term_is_a_negative_zero():
    """0.0 + (-0.0) is +0.0: the sum starts from +0.0 as the loop did, so a plan on a zero cost
    matrix costs +0.0 (a cumsum started at its first term would give -0.0)."""
    A = tot.Assignment(np.full(3, 1 / 3), np.array([2, 0, 1]))
    M = np.full((3, 3), -0.0)
    got = A.cost(M)
    assert got == 0.0 and np.copysign(1.0, got) == 1.0
