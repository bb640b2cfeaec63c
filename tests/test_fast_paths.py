"""Every fast path against the plain path: identical results."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from bench.data import make_clients, make_pair
from protocols.fedbary import FedBary
from protocols.fedwad import FedWAD
from testbed.data.datasets import PartyData
from testbed.exchange.bus import Bus
from testbed.measure import Measure


@dataclass(frozen=True)
class _PlainParty(PartyData):
    """The plain path: a new, validated Measure on every access."""

    @property
    def measure(self) -> Measure:  # type: ignore[override]
        return Measure(self.X)


def _plain(parties):
    return {k: _PlainParty(v.name, v.X, v.y) for k, v in parties.items()}


class _SequentialBus(Bus):
    """The plain path for ``local_map``: one ``local`` call after another, written out."""

    def local_map(self, calls):
        out = []
        for c in calls:
            out.append(self.local(c[0], c[1], *c[2:]))
        return out


def test_party_measure_is_built_once_and_equals_a_fresh_one():
    party = make_pair(20, 3)["alice"]
    m = party.measure
    assert party.measure is m
    fresh = Measure(party.X)
    np.testing.assert_array_equal(m.support, fresh.support)
    np.testing.assert_array_equal(m.weights, fresh.weights)
    assert not m.support.flags.writeable


def test_fedwad_with_cached_measures_equals_the_plain_path():
    for mode, params in [
        ("paper", {"support_size": 8, "iterations": 5}),
        ("accurate", {"mode": "accurate"}),
    ]:
        parties = make_pair(60, 4, seed=3)
        proto = FedWAD.from_params(params)
        fast_bus, plain_bus = Bus(parties=parties), Bus(parties=_plain(parties))
        fast = proto.run(parties, fast_bus, np.random.default_rng(1))
        plain = proto.run(_plain(parties), plain_bus, np.random.default_rng(1))
        assert fast.estimates == plain.estimates, mode
        assert fast.history == plain.history, mode
        assert fast_bus.transcript.digest() == plain_bus.transcript.digest(), mode


def test_fedbary_local_map_equals_sequential_local_calls():
    parties = make_clients(4, 15, 3, seed=0)
    proto = FedBary.from_params({"iterations": 3})
    a_bus, b_bus = Bus(parties=parties), _SequentialBus(parties=parties)
    a = proto.run(parties, a_bus, np.random.default_rng(0))
    b = proto.run(parties, b_bus, np.random.default_rng(0))
    assert a.estimates == b.estimates
    assert a_bus.transcript.digest() == b_bus.transcript.digest()


def test_fedwad_local_map_equals_sequential_local_calls():
    parties = make_pair(50, 3, seed=4)
    for params in ({"support_size": 6, "iterations": 4}, {"mode": "accurate"}):
        proto = FedWAD.from_params(params)
        a_bus, b_bus = Bus(parties=parties), _SequentialBus(parties=parties)
        a = proto.run(parties, a_bus, np.random.default_rng(2))
        b = proto.run(parties, b_bus, np.random.default_rng(2))
        assert a.estimates == b.estimates and a.history == b.history
        assert a_bus.transcript.digest() == b_bus.transcript.digest()


def test_single_threaded_blas_gives_the_same_fedwad_result():
    # the CLI's default (one BLAS thread) against two threads
    from threadpoolctl import threadpool_limits

    parties = make_pair(300, 64, seed=2)
    proto = FedWAD.from_params({"support_size": 10, "iterations": 5, "trace": False})
    with threadpool_limits(limits=1, user_api="blas"):
        one = proto.run(parties, Bus(parties=parties), np.random.default_rng(0))
    with threadpool_limits(limits=2, user_api="blas"):
        two = proto.run(parties, Bus(parties=parties), np.random.default_rng(0))
    np.testing.assert_allclose(
        one.estimates["wasserstein"], two.estimates["wasserstein"], rtol=1e-12
    )


def test_assignment_plan_equals_ot_emd_bit_for_bit_on_uniform_square_problems():
    import ot

    from testbed import ot as tot

    g = np.random.default_rng(11)
    for _ in range(60):
        n, d = int(g.integers(2, 200)), int(g.integers(1, 70))
        M = tot.cost_matrix(g.normal(size=(n, d)), g.normal(size=(n, d)) + 0.3)
        a = ot.unif(n)
        want, log = ot.emd(a, a, M, numItermax=10_000_000, log=True)
        got, cost = tot.emd_plan(a, a, M, assignment=True)
        assert np.array_equal(got, want)
        assert cost == max(log["cost"], 0.0)
        X, Y = g.normal(size=(n, d)), g.normal(size=(n, d))
        mu, nu = Measure(X), Measure(Y)
        assert tot.sq_wasserstein(mu, nu, assignment=True) == tot.sq_wasserstein(mu, nu)


def test_assignment_path_is_only_taken_for_uniform_square_problems(monkeypatch):
    import ot

    from testbed import ot as tot

    calls = []
    real = tot.solve_assignment
    monkeypatch.setattr(tot, "solve_assignment", lambda a, M: calls.append(1) or real(a, M))
    g = np.random.default_rng(0)
    M = tot.cost_matrix(g.normal(size=(6, 2)), g.normal(size=(6, 2)))
    w = np.array([0.1, 0.1, 0.2, 0.2, 0.2, 0.2])
    tot.emd_plan(ot.unif(6), w, M, assignment=True)  # not uniform
    tot.emd_plan(ot.unif(5), ot.unif(6), M[:5], assignment=True)  # not square
    tot.emd_plan(ot.unif(6), ot.unif(6), M)  # not asked
    assert calls == []
    tot.emd_plan(ot.unif(6), ot.unif(6), M, assignment=True)
    assert calls == [1]


def test_fedbary_assignment_solver_agrees_with_network_simplex():
    from protocols.fedbary import FedBaryConfig

    parties = make_clients(6, 60, 8, 1)
    out = []
    for flag in (False, True):
        bus = Bus(parties=parties)
        cfg = FedBaryConfig(assignment_solver=flag, iterations=3)
        out.append(FedBary(cfg).run(parties, bus, np.random.default_rng(2)))
    # exact optima both; interpolated measures' 1/n differ by ulps, so agreement is to rounding
    assert out[0].estimates.keys() == out[1].estimates.keys()
    for k, v in out[0].estimates.items():
        assert out[1].estimates[k] == pytest.approx(v, rel=1e-9)
    np.testing.assert_allclose(out[1].history["bound"], out[0].history["bound"], rtol=1e-9)


def test_assignment_plan_with_weights_a_few_ulps_apart_is_optimal():
    import ot

    from testbed import ot as tot

    g = np.random.default_rng(5)
    n = 120
    M = tot.cost_matrix(g.normal(size=(n, 6)), g.normal(size=(n, 6)))
    a, b = np.full(n, 1.0 / n), np.full(n, np.nextafter(1.0 / n, 1.0))
    P, cost = tot.emd_plan(a, b, M, assignment=True)
    assert np.count_nonzero(P) == n and np.all(P.sum(axis=1) == a)
    assert cost == pytest.approx(ot.emd2(ot.unif(n), ot.unif(n), M), rel=1e-12)


def test_fedbary_solves_assignments_by_default_and_says_which_solver_ran():
    from protocols.fedbary import FedBaryConfig

    assert FedBaryConfig().assignment_solver is True
    parties = make_clients(3, 20, 2, 0)
    res = FedBary(FedBaryConfig(iterations=2)).run(
        parties, Bus(parties=parties), np.random.default_rng(0)
    )
    solvers = res.outputs["solvers"]
    assert {solvers[c] for c in parties} == {"linear_sum_assignment"}
    assert solvers["server"] == "linear_sum_assignment"
    assert solvers["detection"].startswith("ot.emd")
    off = FedBary(FedBaryConfig(iterations=2, assignment_solver=False)).run(
        parties, Bus(parties=parties), np.random.default_rng(0)
    )
    assert set(off.outputs["solvers"].values()) == {"ot.emd", "ot.emd (dual potentials)"}
    # a client whose size differs from the support size has n x S plans: the network simplex
    parties["client_0"] = PartyData("client_0", parties["client_0"].X[:15])
    mixed = FedBary(FedBaryConfig(iterations=2, support_size=20)).run(
        parties, Bus(parties=parties), np.random.default_rng(0)
    )
    assert mixed.outputs["solvers"]["client_0"] == "ot.emd"
    assert mixed.outputs["solvers"]["client_1"] == "linear_sum_assignment"


def test_barycentric_map_of_a_permutation_plan_equals_the_dense_product_bit_for_bit():
    import ot

    from testbed import ot as tot

    g = np.random.default_rng(3)
    taken = 0
    for trial in range(40):
        n, d = int(g.integers(2, 150)), int(g.integers(1, 40))
        X, Y = g.normal(size=(n, d)), g.normal(size=(n, d))
        if trial % 3 == 0:
            Y[g.random(Y.shape) < 0.3] = 0.0  # exact zeros, as in pixel data
        a = ot.unif(n)
        M = tot.cost_matrix(X, Y)
        for P in (ot.emd(a, a, M), tot.assignment_plan(a, M)[0]):
            want = (P @ Y) / a[:, None]
            got = tot.barycentric_map(P, a, Y)
            assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))
            taken += 1
    assert taken == 80
    # a plan that splits a row's mass takes the dense product (same result, other path)
    P = np.array([[0.25, 0.25], [0.0, 0.5]])
    Y = np.array([[1.0, 2.0], [3.0, 5.0]])
    a = P.sum(axis=1)
    np.testing.assert_array_equal(tot.barycentric_map(P, a, Y), (P @ Y) / a[:, None])
    np.testing.assert_array_equal(tot.barycentric_map(P, a, Y), [[2.0, 3.5], [3.0, 5.0]])
