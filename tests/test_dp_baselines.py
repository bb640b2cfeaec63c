"""Formally private baselines (DP sliced Wasserstein, DP OT through a noisy JL projection):
the noise-free limit against POT on the same projection, convergence to the central reference as
epsilon grows (tolerances documented in docs/findings/frontier.md), the sensitivity bound, and the ledger
against opacus's accountant computed directly."""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.dp_baselines import (
    DPJLOT,
    DPJLOTConfig,
    DPSlicedWasserstein,
    DPSlicedWassersteinConfig,
    clip_rows,
    projection_matrix,
    projection_sensitivity,
)
from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.exchange.bus import Bus, PrivacyGuard
from testbed.exchange.ledger import PrivacyLedger
from testbed.measure import Measure


def _parties(seed: int, n: int = 60, d: int = 4, k: int = 3):
    rng = np.random.default_rng(seed)
    return {
        f"p{i}": PartyData(f"p{i}", rng.normal(size=(n, d)) * (1 + 0.3 * i) + i) for i in range(k)
    }


def _run(proto, parties, seed=0):
    ledger = PrivacyLedger()
    bus = Bus(guard=PrivacyGuard.for_parties(parties), ledger=ledger, parties=parties)
    return proto.run(parties, bus, np.random.default_rng(seed)), bus, ledger


def _announced(bus) -> np.ndarray:
    env = next(e for e in bus.transcript if e.kind.endswith(".directions"))
    p = env.payload
    return projection_matrix(p["kind"], int(p["dim"]), int(p["projections"]), int(p["seed"]))


def test_sw_noise_free_equals_pot_on_the_same_directions():
    # Prepare
    parties = _parties(0)
    proto = DPSlicedWasserstein(
        DPSlicedWassersteinConfig(noise_multiplier=0.0, clip_norm=100.0, projections=30)
    )
    # Execute
    res, bus, _ = _run(proto, parties)
    U = _announced(bus)
    # Assert: the federated read-out is POT's sliced distance with the announced directions
    X = [parties[n].X for n in ("p0", "p1", "p2")]
    want = ot.sliced_wasserstein_distance(X[0], X[1], projections=U, p=2)
    np.testing.assert_allclose(res.estimates["sliced_wasserstein"], want, rtol=1e-10)
    want_12 = ot.sliced_wasserstein_distance(X[1], X[2], projections=U, p=2)
    np.testing.assert_allclose(res.estimates["distance_matrix"][1, 2], want_12, rtol=1e-10)


def test_jl_noise_free_equals_exact_ot_of_the_projected_rows():
    parties = _parties(1, k=2)
    proto = DPJLOT(DPJLOTConfig(noise_multiplier=0.0, clip_norm=100.0, projections=8))
    res, bus, _ = _run(proto, parties)
    M = _announced(bus)
    want = tot.wasserstein(Measure(parties["p0"].X @ M), Measure(parties["p1"].X @ M))
    np.testing.assert_allclose(res.estimates["wasserstein"], want, rtol=1e-10)
    assert "distance_matrix" not in res.estimates  # two parties: one distance


@pytest.mark.parametrize(
    ("cls", "cfg", "key", "tol"),
    [
        # Monte Carlo over 2000 directions vs the 1000-direction reference: within 5 %
        (DPSlicedWasserstein, DPSlicedWassersteinConfig, "sliced_wasserstein", 0.05),
        # JL distortion with k = 400: within 10 % of the exact W2
        (DPJLOT, DPJLOTConfig, "wasserstein", 0.10),
    ],
)
def test_accuracy_tends_to_the_central_reference_as_epsilon_grows(cls, cfg, key, tol):
    # Prepare: clip bound above every row norm (clipping changes nothing), many directions
    parties = _parties(2, k=2)
    k = 2000 if cls is DPSlicedWasserstein else 400
    errors = []
    for eps in (1e2, 1e4, 1e6):
        proto = cls(cfg(target_epsilon=eps, clip_norm=20.0, projections=k))
        res, _, _ = _run(proto, parties)
        ref = proto.reference(parties)[key]
        errors.append(abs(res.estimates[key] - ref) / ref)
    noise_free = cls(cfg(noise_multiplier=0.0, clip_norm=20.0, projections=k))
    res0, _, _ = _run(noise_free, parties)
    ref = noise_free.reference(parties)[key]
    err0 = abs(res0.estimates[key] - ref) / ref
    # Assert: error shrinks with epsilon and ends within the documented tolerance
    assert errors[0] > errors[2]
    assert errors[2] < tol and err0 < tol


def test_ledger_matches_the_exact_gaussian_and_calibration_meets_the_target():
    from testbed.scoring.membership import gdp_epsilon

    parties = _parties(3)
    z = 1.3
    proto = DPJLOT(DPJLOTConfig(noise_multiplier=z, clip_norm=5.0))
    res, _, ledger = _run(proto, parties)
    # one Gaussian event per party, calibrated to 2C||M||_op
    assert [e.party for e in ledger.events] == ["p0", "p1", "p2"]
    ev = ledger.events[0]
    np.testing.assert_allclose(ev.sigma, z * ev.sensitivity, rtol=1e-12)
    # the ledger's default accountant (PLD) is exact for one Gaussian release: mu = 1/z GDP
    np.testing.assert_allclose(ledger.epsilon("p0", 1e-5), gdp_epsilon(1 / z, 1e-5), rtol=1e-6)
    # calibration from a target: the claim is at most the target and within 1 % of it
    proto = DPSlicedWasserstein(DPSlicedWassersteinConfig(target_epsilon=2.0, clip_norm=5.0))
    _, _, ledger = _run(proto, parties)
    eps = ledger.epsilon("p1", 1e-5)
    assert 0.99 * 2.0 <= eps <= 2.0
    # noise-free: no privacy claim
    _, _, ledger = _run(DPJLOT(DPJLOTConfig(noise_multiplier=0.0)), parties)
    assert math.isinf(ledger.epsilon("p0", 1e-5))


def test_released_noise_has_the_recorded_sigma():
    # Prepare: many rows so the empirical std is tight
    rng = np.random.default_rng(5)
    parties = {n: PartyData(n, rng.normal(size=(3000, 5))) for n in ("a", "b")}
    proto = DPSlicedWasserstein(
        DPSlicedWassersteinConfig(noise_multiplier=0.5, clip_norm=2.0, projections=10)
    )
    _, bus, ledger = _run(proto, parties)
    U = _announced(bus)
    env = next(e for e in bus.transcript if e.kind.endswith(".projections") and e.sender == "a")
    resid = np.asarray(env.payload) - clip_rows(parties["a"].X, 2.0) @ U
    # Assert: residual std equals the ledger's sigma within sampling error (30000 draws)
    np.testing.assert_allclose(resid.std(), ledger.events[0].sigma, rtol=0.03)
    np.testing.assert_allclose(ledger.events[0].sensitivity, projection_sensitivity(U, 2.0))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    d=st.integers(1, 12),
    k=st.integers(1, 30),
    C=st.floats(0.1, 10.0),
    kind=st.sampled_from(["sphere", "jl"]),
)
def test_sensitivity_bounds_every_replacement(seed, d, k, C, kind):
    # Prepare: two neighbouring datasets (one row replaced by anything, even far outside C)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(7, d)) * 5
    Xp = X.copy()
    Xp[rng.integers(7)] = rng.normal(size=d) * 50
    U = projection_matrix(kind, d, k, seed)
    # Execute
    moved = np.linalg.norm(clip_rows(X, C) @ U - clip_rows(Xp, C) @ U)
    # Assert
    assert moved <= projection_sensitivity(U, C) * (1 + 1e-12)


def test_config_needs_exactly_one_noise_setting():
    with pytest.raises(ValueError, match="exactly one"):
        DPJLOTConfig(noise_multiplier=1.0, target_epsilon=1.0)
    assert DPJLOTConfig().noise_multiplier == 1.0


# ----------------------------------------------------------------------------- attack
def _attack_run(proto: str, params: dict, seed: int = 0):
    import yaml

    from testbed.run.execute import execute
    from testbed.scenario.loading import load_scenario

    sc = {
        "name": f"dp_attack_{proto}",
        "seed": seed,
        "data": {
            "dataset": {
                "name": "gaussians",
                "params": {"d": 4, "components": [{"n": 80, "mean": 0.0}, {"n": 60, "mean": 1.5}]},
            },
            "partition": {"name": "class_subsets", "params": {"classes": [[0], [1]]}},
            "parties": ["alice", "bob"],
        },
        "protocol": {"name": proto, "params": params},
        "threat_model": {"observer": "server"},
        "attacks": [{"name": "projection_inversion"}],
        "output": {"save_transcript": False},
    }
    return sc, yaml, load_scenario, execute


@pytest.mark.parametrize("proto", ["dp_sliced_wasserstein", "dp_jl_ot"])
def test_projection_inversion_recovers_every_row_without_noise(proto, tmp_path):
    # Prepare: k >= d directions, no noise, clip bound above every row
    sc, yaml, load_scenario, execute = _attack_run(
        proto, {"projections": 8, "clip_norm": 100.0, "noise_multiplier": 0.0}
    )
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    # Execute
    rows = execute(load_scenario(path), tmp_path / "out").results["attacks"]
    # Assert: the server rebuilds both parties' rows exactly
    assert {r["target"] for r in rows} == {"alice", "bob"}
    for r in rows:
        assert r["exact_recovery"] == 1.0


def test_projection_inversion_weakens_with_noise(tmp_path):
    import yaml

    from testbed.run.execute import execute
    from testbed.scenario.loading import load_scenario

    cov = []
    for eps in (1e4, 1.0):
        sc, *_ = _attack_run(
            "dp_sliced_wasserstein", {"projections": 8, "clip_norm": 8.0, "target_epsilon": eps}
        )
        path = tmp_path / f"s{eps}.yaml"
        path.write_text(yaml.safe_dump(sc))
        rows = execute(load_scenario(path), tmp_path / f"o{eps}").results["attacks"]
        cov.append(np.mean([r["coverage"] for r in rows]))
    # Assert: near-noise-free releases are covered, epsilon = 1 falls to the prior's level
    assert cov[0] > 0.9
    assert cov[1] < 0.6


# ----------------------------------------------------------------------------- DP moments
def test_bures_matches_pot_and_the_noise_free_limit_is_the_gaussian_bound():
    from protocols.dp_moments import DPGaussianMoments, bures_w2

    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(4, 4)), rng.normal(size=(4, 4))
    S1, S2 = A @ A.T + np.eye(4), B @ B.T + 0.5 * np.eye(4)
    m1, m2 = rng.normal(size=4), rng.normal(size=4)
    np.testing.assert_allclose(bures_w2(m1, S1, m2, S2), tot.gaussian_w2(m1, S1, m2, S2), rtol=1e-8)
    parties = _parties(4, n=600)
    proto = DPGaussianMoments(DPGaussianMoments.Config(noise_multiplier=0.0, clip_norm=100.0))
    res, _, ledger = _run(proto, parties)
    ref = proto.reference(parties)
    np.testing.assert_allclose(res.estimates["wasserstein"], ref["gaussian_bound"], rtol=1e-9)
    # Gaussian data: the Gaussian bound is close to the exact W2 of the samples (within 10 %)
    assert abs(ref["gaussian_bound"] - ref["wasserstein"]) / ref["wasserstein"] < 0.10
    assert math.isinf(ledger.epsilon("p0", 1e-5))


# a study over epsilons: ~45 s on 2 busy cores
@pytest.mark.slow
def test_moments_error_shrinks_with_epsilon_and_ledger_sensitivity():
    from protocols.dp_moments import DPGaussianMoments

    parties = _parties(5, n=2000)
    errs = []
    for eps in (1.0, 100.0):
        proto = DPGaussianMoments(DPGaussianMoments.Config(target_epsilon=eps, clip_norm=8.0))
        res, _, ledger = _run(proto, parties)
        ref = proto.reference(parties)["gaussian_bound"]
        errs.append(abs(res.estimates["wasserstein"] - ref) / ref)
        ev = ledger.events[0]
        np.testing.assert_allclose(ev.sensitivity, 2 * np.sqrt(2) * 8.0 / 2000)
        assert ledger.epsilon("p0", 1e-5) <= eps
    assert errs[1] < errs[0] and errs[1] < 0.05


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.integers(1, 8), n=st.integers(2, 30), C=st.floats(0.1, 10))
def test_moments_sensitivity_bounds_every_replacement(seed, d, n, C):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * 5
    Xp = X.copy()
    Xp[rng.integers(n)] = rng.normal(size=d) * 50

    def vec(Z):
        Z = clip_rows(Z, C)
        S = Z.T @ Z / n
        return np.r_[Z.mean(axis=0), S[np.triu_indices(d)] / C]

    assert np.linalg.norm(vec(X) - vec(Xp)) <= 2 * np.sqrt(2) * C / n * (1 + 1e-9)
