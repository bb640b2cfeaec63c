"""FedBary's central reference (issue 23): the testbed's exact W(P_i, Q) with Q = POT's central
free-support barycenter, its client solves on the run's workers and by assignment where the plan
is one. POT is the checked reference: the fast path must give POT's numbers, with POT's own
warnings (numItermax) raised as errors, and the same numbers on one worker and on two."""

from __future__ import annotations

import warnings

import numpy as np
import ot
import pytest

from protocols._barycenter import REFERENCE_STEP, pooled_start
from protocols.fedbary import (
    FedBary,
    FedBaryConfig,
    barycenter_steps,
    central_barycenter,
    central_barycenter_on,
    contributions,
)
from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.exchange.bus import Bus
from testbed.exchange.engines import open_reference_bus, reference_engine
from testbed.exchange.engines.pool import PoolBus
from testbed.measure import Measure


def _parties(seed: int, clients: int = 6, n: int = 40, d: int = 3) -> dict[str, PartyData]:
    g = np.random.default_rng(seed)
    return {
        f"c{i}": PartyData(f"c{i}", g.normal(0.3 * i, 1.0 + 0.1 * i, size=(n, d)))
        for i in range(clients)
    }


def _pot_reference(parties, S: int) -> dict[str, float]:
    """The reference as POT alone computes it: ot.lp.free_support_barycenter, then ot.emd2."""
    clients = list(parties)
    pooled = np.vstack([parties[c].X for c in clients])
    init = pooled[np.random.default_rng(0).choice(pooled.shape[0], S, replace=False)]
    # POT's stopThr from the testbed's rule: a step moving Q by at most REFERENCE_STEP of the
    # pooled rows' RMS radius in W2 ends the fixed point
    radius = np.sqrt(np.mean(np.sum((pooled - pooled.mean(axis=0)) ** 2, axis=1)))
    stop = S * (REFERENCE_STEP * radius) ** 2
    Q = central_barycenter([Measure(parties[c].X) for c in clients], init, stop_thr=stop)
    dist = {}
    for c in clients:
        P = Measure(parties[c].X)
        M = ot.dist(P.support, Q.support)
        dist[c] = float(np.sqrt(ot.emd2(P.weights, Q.weights, M, numItermax=10_000_000)))
    out = {f"distance_{c}": v for c, v in dist.items()}
    out.update({f"contribution_{c}": v for c, v in contributions(dist).items()})
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("assignment", [True, False])
def test_central_barycenter_on_workers_equals_pot_bit_for_bit(seed, assignment):
    parties = _parties(seed)
    measures = [Measure(p.X) for p in parties.values()]
    X0 = np.random.default_rng(seed).normal(size=(40, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # POT's "numItermax reached" would be a wrong reference
        pot = central_barycenter(measures, X0)
        with PoolBus(parties=parties, workers=2) as bus:
            pooled = central_barycenter_on(bus, list(parties), X0, assignment=assignment)
        plain = central_barycenter_on(
            Bus(parties=parties), list(parties), X0, assignment=assignment
        )
    assert np.array_equal(pooled.support, pot.support)
    assert np.array_equal(plain.support, pot.support)


@pytest.mark.parametrize("n", [7, 300])
def test_barycenter_steps_pass_pots_weights_unrenormalised(n):
    # Measure renormalises weights, which moves 1/300 by an ulp: the steps must use POT's b
    g = np.random.default_rng(3)
    measures = [Measure(g.normal(i, 1.0, size=(n, 2))) for i in range(3)]
    X0 = g.normal(size=(n, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pot = central_barycenter(measures, X0, iterations=3)
    for assignment in (False, True):
        ours = barycenter_steps(measures, X0, 3, assignment=assignment)
        assert np.array_equal(ours.support, pot.support)


def test_pooled_start_picks_the_stacked_rows_without_stacking():
    parties = {
        f"c{i}": PartyData(f"c{i}", np.arange(i * 30.0, i * 30.0 + 30).reshape(-1, 3) ** 1.5)
        for i in range(5)
    }
    pooled = np.vstack([p.X for p in parties.values()])
    init, radius = pooled_start(parties, list(parties), 12)
    expected = pooled[np.random.default_rng(0).choice(pooled.shape[0], 12, replace=False)]
    assert np.array_equal(init, expected)
    rms = np.sqrt(np.mean(np.sum((pooled - pooled.mean(axis=0)) ** 2, axis=1)))
    np.testing.assert_allclose(radius, rms, rtol=1e-12)


def test_reference_stops_once_a_step_moves_the_barycenter_little():
    # many clients: POT's stopThr 1e-7 waits for every client's assignment to settle; the
    # reference stops once a step moves Q by at most REFERENCE_STEP of the data's radius
    parties = _parties(0, clients=30, n=40, d=3)
    X0, _ = pooled_start(parties, list(parties), 40)  # the reference's own start
    steps = []
    proto = FedBary(FedBaryConfig())
    import protocols._barycenter as bary

    real = bary.fixed_point_steps

    def counting(X, count, most, products, stop_thr=1e-7):
        def counted(X, b, it):
            steps.append(it)
            return products(X, b, it)

        return real(X, count, most, counted, stop_thr)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bary, "fixed_point_steps", counting)
        proto.reference(parties)
        ours = len(steps)
        steps.clear()
        central_barycenter_on(Bus(parties=parties), list(parties), X0, assignment=True)
    assert 0 < ours < len(steps)


@pytest.mark.parametrize("seed", [0, 1])
def test_reference_equals_pot_alone(seed):
    parties = _parties(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = _pot_reference(parties, 40)
        for fast in (True, False):
            got = FedBary(FedBaryConfig(assignment_solver=fast)).reference(parties)
            assert got.keys() == expected.keys()
            # assignment cost summed in the simplex's order: equal to ot.emd2 bit for bit when
            # the optimum is unique (docs/findings/benchmarks.md); continuous data has a unique optimum
            assert got == expected


def test_reference_with_validation_solves_on_workers_like_one_process():
    parties = _parties(4, clients=5)
    parties["val"] = PartyData("val", np.random.default_rng(9).normal(size=(55, 3)))
    proto = FedBary(FedBaryConfig(validation="val"))
    one = proto.reference(parties)
    with reference_engine("inprocess", {"workers": 2}):
        two = proto.reference(parties)
    V = Measure(parties["val"].X)
    assert one == two
    assert one["distance_c0"] == tot.wasserstein(Measure(parties["c0"].X), V)


def test_reference_runs_on_the_scenarios_workers_and_gives_the_same_numbers(monkeypatch):
    import contextlib

    import testbed.exchange.engines as engines

    parties = _parties(5, clients=4, n=30)
    seen = []
    real = engines.open_reference_bus

    @contextlib.contextmanager
    def spy(ps):
        with real(ps) as bus:
            seen.append(type(bus).__name__)
            yield bus

    monkeypatch.setattr(engines, "open_reference_bus", spy)
    proto = FedBary(FedBaryConfig())
    with reference_engine("inprocess", {"workers": 1}):
        one = proto.reference(parties)
    with reference_engine("inprocess", {"workers": 2}):
        two = proto.reference(parties)
    assert seen == ["Bus", "PoolBus"]
    assert one == two


def test_reference_bus_for_a_ray_scenario_is_in_process():
    parties = _parties(6, clients=2, n=5)
    with reference_engine("ray", {"actors": 1}):
        with open_reference_bus(parties) as bus:
            assert type(bus) is Bus
            assert bus.transcript.digest() == Bus().transcript.digest()  # nothing sent on it


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_assignment_on_reduced_costs_equals_pot_on_far_apart_supports(seed):
    # reduced_costs subtracts row and column minima before scipy's solver; the optimum, the plan
    # and the cost summed from M must stay POT's (numItermax warnings are errors)
    g = np.random.default_rng(seed)
    n = 120
    X = g.normal(size=(n, 16)) * g.uniform(0.5, 3.0, size=(n, 1))  # rows at very different scales
    Y = g.normal(2.0, 1.0, size=(n, 16))
    M = tot.cost_matrix(X, Y)
    a = ot.unif(n)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        want = ot.emd(a, a, M, numItermax=10_000_000)
        cost = ot.emd2(a, a, M, numItermax=10_000_000)
    got, got_cost = tot.assignment_plan(a, M)
    assert np.array_equal(got, want)
    assert got_cost == cost
    R = tot.reduced_costs(M)
    assert R.min() == 0.0 and np.all(R.min(axis=0) == 0.0)


def test_run_on_two_workers_gives_the_one_worker_results_including_the_reference():
    # engine_pool.yaml: FedBary on two worker processes; the reference (central barycenter of
    # the pooled clients) is solved on the run's workers too. Every result, the reference and
    # the accuracy against it included, must be the one-worker run's.
    import json
    from pathlib import Path

    from testbed.run.evaluate import _REFERENCE_CACHE
    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world
    from testbed.scenario.loading import load_scenario

    path = Path(__file__).resolve().parents[1] / "scenarios" / "engine_pool.yaml"
    sc = load_scenario(path)
    assert sc.engine_params == {"workers": 2}
    out = {}
    for workers in (2, 1):
        _REFERENCE_CACHE.clear()  # solve the reference again on this engine
        world = build_world(sc.model_copy(update={"engine_params": {"workers": workers}}))
        res = run_and_evaluate(world).results
        out[workers] = json.dumps(res, sort_keys=True, default=repr)
    assert "distance_client_1" in out[1] and '"exact"' in out[1]
    assert out[2] == out[1]


def test_barycenter_step_takes_the_servers_products_instead_of_its_plans():
    # FedBary's server returns plan x gamma support (S x d) from a worker, not the S x S plan:
    # the step must give the same barycenter as with the plans, and use what it is given
    g = np.random.default_rng(21)
    measures = [Measure(g.normal(i, 1.0, size=(30, 3))) for i in range(4)]
    X0 = g.normal(size=(30, 3))
    plans = [tot.plan(Measure(X0), m, assignment=True)[0] for m in measures]
    products = [tot.plan_product(P, m.support) for P, m in zip(plans, measures)]
    for steps in (1, 3):
        with_plans = barycenter_steps(measures, X0, steps, first_plans=plans, assignment=True)
        with_products = barycenter_steps(
            measures, X0, steps, assignment=True, first_products=products
        )
        assert np.array_equal(with_plans.support, with_products.support)
    one_step = barycenter_steps(measures, X0, 1, first_products=products)
    wrong = barycenter_steps(measures, X0, 1, first_products=[p + 1.0 for p in products])
    assert not np.allclose(wrong.support, one_step.support)
