"""FedWAD's speed work changes no number: the lean POT calls give POT's plans and costs bit for
bit, the two clients' calls of a round give the same transcript on one thread or two, and the
public algorithm timed against FedWAD starts where FedWAD starts (equal error)."""

from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.cases import fedwad_public_algorithm
from bench.data import make_pair
from bench.sections import _first_xi
from protocols.fedwad import FedWAD, fedwad_round_interp
from testbed import ot as tot
from testbed.errors import OTSolverError
from testbed.exchange.bus import Bus, auto_local_threads, default_local_threads, parallel_safe
from testbed.measure import Measure


def _problems():
    rng = np.random.default_rng(7)
    for n, m, d in [(1, 1, 2), (1, 5, 3), (7, 7, 2), (40, 9, 5), (300, 10, 8), (25, 60, 3)]:
        X, Y = rng.normal(size=(n, d)), rng.normal(1.0, 2.0, size=(m, d))
        yield Measure(X), Measure(Y)  # uniform
        a, b = rng.random(n) + 0.01, rng.random(m) + 0.01
        yield Measure(X, a / a.sum()), Measure(Y, b / b.sum())  # weighted
        if n > 2 and m > 2:  # zero weights (POT's active-subset path)
            a[0], b[-1] = 0.0, 0.0
            yield Measure(X, a / a.sum()), Measure(Y, b / b.sum())


def _pot_plain(fn, a, b, M):
    """POT as called before the speed work: default options, log on."""
    return fn(a, b, M, numItermax=tot.NUM_ITERMAX, log=True)


def test_plans_and_costs_are_pots_bit_for_bit():
    for mu, nu in _problems():
        M = tot.cost_matrix(mu.support, nu.support)
        P, cost = tot.plan(mu, nu, M)
        P0, log0 = _pot_plain(ot.emd, mu.weights, nu.weights, M)
        np.testing.assert_array_equal(P, P0)
        assert cost == max(float(log0["cost"]), 0.0)
        c0, _ = _pot_plain(ot.emd2, mu.weights, nu.weights, M)
        assert tot.sq_wasserstein(mu, nu, M) == max(float(c0), 0.0)


def test_unequal_masses_are_an_error_naming_both():
    M = np.ones((2, 3))
    with pytest.raises(OTSolverError, match="masses differ"):
        tot.emd_plan(np.array([0.5, 0.5]), np.array([0.3, 0.3, 0.3]), M)
    # within POT's own tolerance (decimal=6) the solve goes on, b rescaled to a's mass
    P, _ = tot.emd_plan(np.array([0.5, 0.5]), np.array([0.5, 0.5, 1e-7]), M)
    assert P.shape == (2, 3)


def _reference_solve(fn, a, b, M, what):
    """The solver wrapper before the speed work (POT's defaults), to compare transcripts."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        out, log = fn(a, b, M, numItermax=tot.NUM_ITERMAX, log=True)
    tot._check_log(log, what)
    return out, log


CONFIGS = [
    {"support_size": 6, "iterations": 5},
    {"support_size": 4, "iterations": 4, "t": "random", "distances": "every_round"},
    {"support_size": 5, "iterations": 3, "interpolation": "exact"},
    {"mode": "accurate", "iterations": 4},
]


@pytest.mark.parametrize("params", CONFIGS)
def test_fedwad_transcript_is_the_same_on_one_thread_two_threads_and_plain_pot(params, monkeypatch):
    parties = make_pair(90, 4, seed=2)
    proto = FedWAD.from_params(params)

    def run(threads):
        bus = Bus(parties=parties, local_threads=threads)
        res = proto.run(parties, bus, np.random.default_rng(5))
        return bus.transcript.digest(), res.estimates, res.history

    one, two = run(1), run(2)
    monkeypatch.setattr(tot, "_solve", _reference_solve)
    plain = run(1)
    assert one == two == plain


@parallel_safe
def _where(party, x):
    time.sleep(0.005)  # long enough for the pool thread to take the next call
    return threading.get_ident(), party.name, x * 2


def _unmarked(party, x):
    return threading.get_ident(), party.name, x * 2


@parallel_safe
def _fail_on(party, bad):
    if party.name in bad:
        raise ValueError(f"failed at {party.name}")
    return party.name


def test_marked_calls_run_on_two_threads_in_call_order():
    parties = make_pair(5, 2)
    bus = Bus(parties=parties, local_threads=2)
    calls = [("alice", _where, 1), ("bob", _where, 2), ("alice", _where, 3), ("bob", _where, 4)]
    seen = set()
    for _ in range(20):  # a pool thread takes at least one call in some batch
        out = bus.local_map(calls)
        assert [(p, v) for _, p, v in out] == [("alice", 2), ("bob", 4), ("alice", 6), ("bob", 8)]
        seen |= {ident for ident, _, _ in out}
    assert threading.get_ident() in seen and len(seen) == 2


def test_unmarked_or_mixed_batches_and_one_thread_run_here():
    parties = make_pair(5, 2)
    me = threading.get_ident()
    two = Bus(parties=parties, local_threads=2)
    for calls in (
        [("alice", _unmarked, 1), ("bob", _unmarked, 2)],
        [("alice", _where, 1), ("bob", _unmarked, 2)],
    ):
        assert {i for i, _, _ in two.local_map(calls)} == {me}
    one = Bus(parties=parties, local_threads=1)
    assert {i for i, _, _ in one.local_map([("alice", _where, 1), ("bob", _where, 2)])} == {me}


def test_the_first_failure_in_call_order_is_raised():
    parties = make_pair(5, 2)
    bus = Bus(parties=parties, local_threads=2)
    with pytest.raises(ValueError, match="failed at alice"):
        bus.local_map([("alice", _fail_on, ("alice", "bob")), ("bob", _fail_on, ("alice", "bob"))])
    with pytest.raises(ValueError, match="failed at bob"):
        bus.local_map([("alice", _fail_on, ("bob",)), ("bob", _fail_on, ("bob",))])
    assert bus.local_map([("alice", _fail_on, ()), ("bob", _fail_on, ())]) == ["alice", "bob"]


def test_thread_count_from_the_environment(monkeypatch):
    monkeypatch.setenv("OT_TESTBED_LOCAL_THREADS", "3")
    assert default_local_threads() == 3 and Bus(parties={}).local_threads == 3
    monkeypatch.setenv("OT_TESTBED_LOCAL_THREADS", "two")
    with pytest.raises(Exception, match="OT_TESTBED_LOCAL_THREADS must be an integer"):
        default_local_threads()
    monkeypatch.delenv("OT_TESTBED_LOCAL_THREADS")
    monkeypatch.setenv("OT_TESTBED_SWEEP_WORKER", "1")
    assert default_local_threads() == 1
    monkeypatch.delenv("OT_TESTBED_SWEEP_WORKER")
    assert default_local_threads() is None
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 3}, raising=False)
    assert auto_local_threads() == 3 and Bus(parties={}).local_threads == 3
    assert Bus(parties={}, local_threads=0).local_threads == 1


def test_public_algorithm_starts_at_our_xi0_and_reaches_our_estimate():
    parties = make_pair(120, 5, seed=4)
    proto = FedWAD.from_params({"support_size": 10, "iterations": 20, "trace": False})
    bus = Bus(parties=parties)
    ours = proto.run(parties, bus, np.random.default_rng(0)).estimates["wasserstein"]
    xi0 = _first_xi(bus.transcript)
    assert xi0.shape == (10, 5)
    X, Y = parties["alice"].X, parties["bob"].X
    public = fedwad_public_algorithm(X, Y, 10, 20, 0.5, xi0=xi0)
    assert public == pytest.approx(ours, rel=1e-9)
    assert _first_xi(Bus(parties=parties).transcript) is None


def test_bench_times_the_public_algorithm_against_ours_at_equal_error():
    from bench.cases import BenchOptions
    from bench.sections import bench_pairs
    from bench.waits import pair_summary

    opts = BenchOptions(ns=(60,), ds=(3,), cases=["fedwad_paper", "fedwad_public"], budget=0.0)
    rows, _ = bench_pairs(BenchOptions(**{**opts.__dict__, "memory": False}))
    by = {r["case"]: r for r in rows}
    paper, public = by["fedwad_paper"], by["fedwad_public"]
    assert public["estimate"] == pytest.approx(paper["estimate"], rel=1e-9)
    assert public["head_to_head"]["repeats"] >= 5
    h = public["head_to_head"]
    assert public["paper_over_public"] == h["paper_seconds"] / h["public_seconds"]
    # CPU seconds beside wall seconds, each side's fastest and median of the same runs
    assert public["paper_over_public_cpu"] == h["paper_cpu_seconds"] / h["public_cpu_seconds"]
    for side in ("paper", "public"):
        assert 0 < h[f"{side}_seconds"] <= h[f"{side}_median_seconds"]
        assert 0 < h[f"{side}_cpu_seconds"] <= h[f"{side}_median_cpu_seconds"]
    summary = pair_summary(rows, n=60, d=3)
    assert summary["fedwad_paper_over_public"] == public["paper_over_public"]
    assert summary["fedwad_paper_over_public_cpu"] == public["paper_over_public_cpu"]


def test_fedwad_target_is_half_the_public_time_with_cpu_beside_it():
    from bench.cases import BenchOptions
    from bench.target_checks import bench_targets

    def rows(ratio, cpu):
        paper = {"case": "fedwad_paper", "n": 60, "d": 3, "seconds": 1.0}
        public = {"case": "fedwad_public", "n": 60, "d": 3, "seconds": 2.0}
        public.update(paper_over_public=ratio, paper_over_public_cpu=cpu)
        return [paper, public]

    opts = BenchOptions(cases=["fedwad_paper", "fedwad_public"])
    met = bench_targets(opts, rows(0.5, 0.9), [])
    (t,) = [t for t in met if t["target"] == "fedwad_vs_public"]
    assert t["met"] and t["limit"] == 0.5 and "<= 0.5x" in t["text"]
    assert t["detail"] == "ours/public, wall (CPU) by (n, d): (60, 3): 0.50 (CPU 0.90)"
    (t,) = [
        t for t in bench_targets(opts, rows(0.51, 0.9), []) if t["target"] == "fedwad_vs_public"
    ]
    assert not t["met"] and t["factor"] == pytest.approx(1.02)


def test_measure_cost_is_pots_cost_matrix_bit_for_bit():
    rng = np.random.default_rng(11)
    for n, m, d in [(1, 1, 1), (5, 3, 2), (300, 10, 64), (120, 10, 784), (7, 40, 3)]:
        mu = Measure(rng.normal(size=(n, d)) * rng.uniform(0.1, 50))
        nu = Measure(rng.normal(2.0, 3.0, size=(m, d)))
        for a, b in [(mu, nu), (nu, mu), (mu, mu)]:
            expected = np.maximum(ot.dist(a.support, b.support, metric="sqeuclidean"), 0.0)
            for _ in range(2):  # the second time from the cached norms
                got = tot.measure_cost(a, b)
                np.testing.assert_array_equal(got, expected)
                np.testing.assert_array_equal(got, tot.cost_matrix(a.support, b.support))
    assert np.all(np.diag(tot.measure_cost(mu, mu)) == 0.0)


def test_warm_start_study_checks_every_candidate_against_the_cold_solve(monkeypatch):
    from bench import warm_start

    r = warm_start.warm_start_study(n=40, d=3, S=4, K=3, repeats=1)
    assert set(r["seconds"]) == set(warm_start.CANDIDATES)
    assert r["over_cold"]["cold"] == 1.0 and r["solves"] == 6 and len(r["rows_moved"]) == 4
    assert r["plans_differ"] == dict.fromkeys(warm_start.CANDIDATES, 0)
    # a candidate that solves another problem is caught by the cost check
    calls = warm_start._calls

    def wrong(problems, i):
        out = calls(problems, i)
        _, M, a, b = problems[i][:4]
        out["transposed"] = lambda: ot.emd(b, a, 2 * np.ascontiguousarray(M.T), log=True)
        return out

    monkeypatch.setattr(warm_start, "_calls", wrong)
    with pytest.raises(AssertionError, match="transposed: cost"):
        warm_start.warm_start_study(n=40, d=3, S=4, K=3, repeats=1)


class _ShiftingBus(Bus):
    """A bus whose delivery moves every iterate the server sends (as a defense on the server's
    messages would): the clients then solve against another measure than the server's xi."""

    def send(self, sender, receiver, kind, payload, round=0, meta=None):
        if kind in ("fedwad.xi", "fedwad.xi_final"):
            payload = Measure(payload.support + 1e-3, payload.weights)
        return super().send(sender, receiver, kind, payload, round, meta)


def _solves(monkeypatch) -> list:
    """Every exact solve's cost-matrix shape, recorded from here on."""
    shapes = []
    solve = tot._solve

    def counted(fn, a, b, M, what):
        shapes.append(M.shape)
        return solve(fn, a, b, M, what)

    monkeypatch.setattr(tot, "_solve", counted)
    return shapes


def _traced_estimates(parties, transcript, interpolation, t):
    """W(mu, xi^(k)) + W(nu, xi^(k)) for every round k, each client's term computed as the trace
    always did (own measure first), xi^(k) rebuilt from the clients' messages of round k."""
    got = {}
    for env in transcript:
        if env.kind in ("fedwad.xi_mu", "fedwad.xi_nu"):
            got.setdefault(env.round, {})[env.kind] = env.payload
    mu, nu = parties["alice"].measure, parties["bob"].measure
    out = []
    for k in sorted(got):
        xi, _, _ = fedwad_round_interp(
            got[k]["fedwad.xi_mu"], got[k]["fedwad.xi_nu"], t, interpolation
        )
        out.append(tot.wasserstein(mu, xi) + tot.wasserstein(nu, xi))
    return out


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(3, 40),
    S=st.integers(1, 8),
    K=st.integers(1, 6),
    d=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    mode=st.sampled_from(["barycentric", "exact", "accurate"]),
    tie_break=st.booleans(),
    shifted=st.booleans(),
)
def test_trace_estimate_is_the_one_solved_again_bit_for_bit(
    n, S, K, d, seed, mode, tie_break, shifted
):
    parties = make_pair(n, d, seed=seed)
    params = {"support_size": S, "iterations": K, "t": 0.5, "plan_tie_break": tie_break}
    params.update({"mode": "accurate"} if mode == "accurate" else {"interpolation": mode})
    bus = (_ShiftingBus if shifted else Bus)(parties=parties)
    res = FedWAD.from_params(params).run(parties, bus, np.random.default_rng(seed))
    interpolation = "barycentric" if mode == "barycentric" else "exact"
    expected = _traced_estimates(parties, bus.transcript, interpolation, 0.5)
    assert res.history["estimate"] == expected  # exact: the same solves, the same sums


def test_trace_reuses_the_clients_solves_unless_their_xi_was_changed(monkeypatch):
    parties = make_pair(50, 3, seed=1)
    proto = FedWAD.from_params({"support_size": 4, "iterations": 5})
    shapes = _solves(monkeypatch)
    proto.run(parties, Bus(parties=parties), np.random.default_rng(0))
    # per round: two client steps and two trace terms W(own, xi_own); two final distances
    assert sum(50 in s for s in shapes) == 4 * 5 + 2
    shapes.clear()
    proto.run(parties, _ShiftingBus(parties=parties), np.random.default_rng(0))
    assert sum(50 in s for s in shapes) == 6 * 5 + 2  # W(own, xi) solved again: xi was moved
