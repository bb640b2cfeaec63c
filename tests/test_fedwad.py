"""FedWAD (Algorithm 1) against the central exact W, Theorem 2, the guard, determinism."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.fedwad import FedWAD
from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.exchange.bus import Bus, PrivacyGuard
from testbed.measure import Measure
from testbed.run.execute import execute
from testbed.scenario.loading import load_scenario


def _toy(seed=0, n=200, m=200):
    rng = np.random.default_rng(seed)
    cov = np.array([[1.0, 0.5], [0.5, 1.0]])
    X = rng.multivariate_normal([0, 0], cov, n)
    Y = rng.multivariate_normal([4, 4], cov, m)
    return {"alice": PartyData("alice", X), "bob": PartyData("bob", Y)}


def _run(parties, seed=1, guard=True, **params):
    proto = FedWAD.from_params(params)
    g = PrivacyGuard({p: d.X for p, d in parties.items()}) if guard else None
    bus = Bus(guard=g, parties=parties)
    result = proto.run(parties, bus, np.random.default_rng(seed))
    bus.flush()  # the guard's last batch, as testbed run checks it at the end of the run
    return proto, result, bus


def test_reference_is_central_exact_w(rng):
    parties = _toy()
    proto = FedWAD()
    expected = tot.wasserstein(Measure(parties["alice"].X), Measure(parties["bob"].X))
    np.testing.assert_allclose(proto.reference(parties)["wasserstein"], expected, rtol=1e-12)


def test_toy_relative_error_below_one_percent():
    # the paper's 2-D toy: 200 vs 200 points, same covariance, t = 0.5
    parties = _toy()
    proto, res, _ = _run(parties, support_size=50, iterations=20, t=0.5)
    exact = proto.reference(parties)["wasserstein"]
    rel = abs(res.estimates["wasserstein"] - exact) / exact
    assert rel <= 1e-2, rel
    assert res.estimates["wasserstein"] >= exact * (
        1 - 1e-9
    )  # an upper bound (triangle inequality)


def test_toy_exact_interpolation_is_more_accurate():
    parties = _toy(n=80, m=80)
    proto, res, _ = _run(parties, interpolation="exact", support_size=10, iterations=6)
    exact = proto.reference(parties)["wasserstein"]
    assert abs(res.estimates["wasserstein"] - exact) / exact <= 1e-3


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(5, 25),
    m=st.integers(5, 25),
    t=st.sampled_from([0.3, 0.5, 0.7]),
)
def test_theorem2_bound_non_increasing_with_exact_interpolation(seed, n, m, t):
    # Theorem 2: A^(k) is non-increasing when every interpolating measure is exact (eq. 5)
    rng = np.random.default_rng(seed)
    parties = {
        "a": PartyData("a", rng.normal(size=(n, 2))),
        "b": PartyData("b", rng.normal(size=(m, 2)) + 2),
    }
    proto, res, _ = _run(
        parties, seed=seed, interpolation="exact", support_size=4, iterations=5, t=t
    )
    bound = np.asarray(res.history["bound"])
    exact = proto.reference(parties)["wasserstein"]
    assert np.all(np.diff(bound) <= 1e-7 * bound[0]), bound
    assert np.all(bound >= exact * (1 - 1e-7))


def test_barycentric_bound_need_not_be_monotone_but_estimate_is_an_upper_bound():
    # with eq. 10 the support is quantised, so Theorem 2's argument does not apply; what stays
    # true is the triangle inequality: every running estimate is >= W(mu, nu)
    parties = _toy(n=60, m=40)
    proto, res, _ = _run(parties, support_size=5, iterations=10)
    exact = proto.reference(parties)["wasserstein"]
    assert np.all(np.asarray(res.history["estimate"]) >= exact * (1 - 1e-9))


@pytest.mark.parametrize("interpolation", ["barycentric", "exact"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_guard_finds_no_private_row_in_any_transcript(interpolation, seed):
    parties = _toy(seed=seed, n=40, m=30)
    _, _, bus = _run(
        parties,
        seed=seed,
        interpolation=interpolation,
        support_size=6,
        iterations=4,
        distances="every_round",
    )
    guard = PrivacyGuard({p: d.X for p, d in parties.items()})
    assert len(bus.transcript) > 0
    for env in bus.transcript:
        assert guard.find(env.payload) is None


def test_guard_would_catch_a_leaking_variant():
    # t -> 0 makes xi_mu the client's own data in exact mode: the guard must refuse it
    from testbed.errors import PrivacyGuardError

    parties = _toy(n=10, m=10)
    with pytest.raises(PrivacyGuardError):
        _run(parties, interpolation="exact", support_size=3, iterations=1, t=1e-300)


def test_random_t_draws_vary_and_remain_upper_bounds():
    parties = _toy(n=50, m=50)
    proto, res, _ = _run(parties, t="random", iterations=8, support_size=20)
    assert res.estimates["wasserstein"] >= proto.reference(parties)["wasserstein"] * (1 - 1e-9)


def test_distances_every_round_are_sent_through_the_bus():
    parties = _toy(n=30, m=30)
    _, _, bus = _run(parties, iterations=3, support_size=5, distances="every_round")
    kinds = [e.kind for e in bus.transcript]
    assert kinds.count("fedwad.distance") == 2 * 3 + 2
    _, _, bus = _run(parties, iterations=3, support_size=5, distances="end")
    assert [e.kind for e in bus.transcript].count("fedwad.distance") == 2


def test_same_seed_gives_byte_identical_results(scenarios_dir, tmp_path):
    sc = load_scenario(scenarios_dir / "contract_tiny.yaml")
    a = execute(sc, tmp_path / "a")
    b = execute(sc, tmp_path / "b")
    assert (tmp_path / "a" / "results.json").read_bytes() == (
        tmp_path / "b" / "results.json"
    ).read_bytes()
    assert (tmp_path / "a" / "payloads.npz").read_bytes() == (
        tmp_path / "b" / "payloads.npz"
    ).read_bytes()
    assert a.transcript.digest() == b.transcript.digest()
    other = sc.model_copy(update={"seed": sc.seed + 1})
    c = execute(other, tmp_path / "c")
    assert c.transcript.digest() != a.transcript.digest()
    assert (
        json.loads((tmp_path / "c" / "results.json").read_text())["config_hash"]
        != a.results["config_hash"]
    )


def test_toy_scenario_end_to_end(scenarios_dir, tmp_path):
    out = execute(load_scenario(scenarios_dir / "fedwad_gaussians.yaml"), tmp_path)
    acc = out.results["accuracy"]["wasserstein"]
    assert acc["relative_error"] <= 1e-2
    assert out.results["protocol"]["mode"] == "paper/barycentric"
    assert out.results["transcript"]["messages"] == 4 * 20 + 4


def _high_dim_case(name):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X.astype(float)
    rng = np.random.default_rng(0)
    if name == "digits_0-4_vs_5-9":
        return X[y < 5], X[y >= 5]
    if name == "digits_random_halves":
        perm = rng.permutation(len(X))
        return X[perm[:898]], X[perm[898:]]
    if name == "gauss50_1000_vs_1000":
        return rng.normal(size=(1000, 50)), rng.normal(size=(1000, 50)) + 0.5
    return rng.normal(size=(1000, 50)), rng.normal(size=(333, 50)) * 1.2 + 0.5


#: the accurate mode's relative errors in the README's table (seed 0)
README_ACCURATE = {
    "digits_0-4_vs_5-9": 2.1e-5,
    "digits_random_halves": 6.7e-5,
    "gauss50_1000_vs_1000": 6.6e-5,
    "gauss50_1000_vs_333": 5.8e-5,
}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param("digits_0-4_vs_5-9", marks=pytest.mark.slow),  # ~55 s on 2 busy cores
        # 4 s on an idle core: the README table's claim, as the others (the accurate mode's
        # runs stay in make test: test_accurate_mode_round_one_message_..., test_fedwad_speed)
        pytest.param("gauss50_1000_vs_333", marks=pytest.mark.slow),
        pytest.param("digits_random_halves", marks=pytest.mark.slow),
        pytest.param("gauss50_1000_vs_1000", marks=pytest.mark.slow),
    ],
)
def test_accurate_mode_beats_the_high_dimension_floor(case):
    # Prepare: the cases where the paper's barycentric mode is off by +28 % .. +143 % (fact 3)
    A, B = _high_dim_case(case)
    parties = {"a": PartyData("a", A), "b": PartyData("b", B)}
    # Execute
    paper, res_paper, _ = _run(parties, trace=False, init_scale=5.0)
    accurate, res_acc, _ = _run(parties, mode="accurate", trace=False)
    exact = accurate.reference(parties)["wasserstein"]
    # Assert: the paper mode sits on its floor; the accurate mode reaches the precision the
    # README's table claims for this case (with a 25 % margin, so a regression to 1e-4 fails)
    assert (res_paper.estimates["wasserstein"] - exact) / exact > 0.25
    rel = abs(res_acc.estimates["wasserstein"] - exact) / exact
    assert rel <= 1.25 * README_ACCURATE[case], rel
    assert res_acc.estimates["wasserstein"] >= exact * (1 - 1e-9)
    assert res_acc.mode == "accurate/exact"
    assert any("accurate mode" in d for d in res_acc.deviations)


def test_accurate_mode_round_one_message_is_the_data_up_to_a_public_homothety():
    # the price of the accuracy: xi^(0) = delta_z and t public, so xi_mu^(1) = (1-t) mu + t z
    parties = _toy(n=50, m=40)
    _, _, bus = _run(parties, mode="accurate", init_mean=0.0, iterations=3, guard=True)
    first = next(e for e in bus.transcript if e.kind == "fedwad.xi_mu")
    recovered = first.payload.support / (1 - 0.5)  # invert the homothety about z = 0
    X = parties["alice"].X
    # every private row is recovered exactly (up to float round-off)
    d = np.linalg.norm(recovered[:, None, :] - X[None, :, :], axis=2).min(axis=0)
    assert np.all(d < 1e-9)
