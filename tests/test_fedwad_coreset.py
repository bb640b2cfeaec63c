"""Federated Wasserstein coresets (FedWAD App. D.2): gradient, central reference = POT, the
federated coreset against the exact-distance one, the 1-NN classifier, determinism and guard."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.fedwad import FedWADConfig
from protocols.fedwad_coreset import (
    FedWADCoreset,
    FedWADCoresetConfig,
    central_coreset,
    coreset_step,
    server_target,
)
from testbed import ot as tot
from testbed.data.datasets import Dataset, PartyData
from testbed.data.partitions import ClassSubsets, ClassSubsetsConfig
from testbed.exchange.bus import Bus, PrivacyGuard
from testbed.measure import Measure
from testbed.run.execute import run_and_evaluate
from testbed.run.roster import build_world
from testbed.scenario.loading import load_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _digits_parties(classes, seed=0):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    names = [f"c{i}" for i in range(len(classes) - 1)] + ["test"]
    split = ClassSubsets(ClassSubsetsConfig(classes=classes)).split(
        Dataset(X.astype(float), y), names, np.random.default_rng(seed)
    )
    return {n: PartyData(n, X[i].astype(float), y[i]) for n, i in split.items()}


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
def test_gradient_is_the_derivative_of_w2_squared(seed):
    # Prepare: generic atoms (unique optimal plan), uniform weights
    rng = np.random.default_rng(seed)
    C, Y = rng.normal(size=(3, 2)), rng.normal(size=(7, 2))
    nu = Measure(Y)
    P, _ = tot.plan(Measure(C), nu)
    grad = 2.0 * (C / 3 - P @ Y)
    # Execute: central finite differences of ot.emd2
    h, num = 1e-6, np.zeros_like(C)
    for i in range(3):
        for k in range(2):
            E = np.zeros_like(C)
            E[i, k] = h
            num[i, k] = (
                tot.sq_wasserstein(Measure(C + E), nu) - tot.sq_wasserstein(Measure(C - E), nu)
            ) / (2 * h)
    # Assert (envelope theorem; a plan change inside +-h would break it, hence the loose atol)
    np.testing.assert_allclose(grad, num, atol=1e-4 * (1 + np.abs(grad).max()))


def test_step_on_a_geodesic_point_equals_the_exact_step():
    # xi = exact interpolant of (C, nu) at s: the scaled gradient is the one of W2^2(C, nu)
    rng = np.random.default_rng(1)
    C, Y = rng.normal(size=(5, 3)), rng.normal(size=(5, 3)) + 2.0
    coreset, nu = Measure(C), Measure(Y)
    P_nu, _ = tot.plan(coreset, nu)
    for s in (0.3, 0.5, 0.8):
        xi = tot.interpolate_exact(coreset, nu, s)
        PY, scale, est = server_target(coreset, xi, tot.wasserstein(xi, nu))
        # Assert
        np.testing.assert_allclose(est, tot.wasserstein(coreset, nu), rtol=1e-9)
        np.testing.assert_allclose(
            coreset_step(C, [(PY, scale)], 0.7), coreset_step(C, [(P_nu @ Y, 1.0)], 0.7), atol=1e-9
        )


def test_central_reference_with_lr_one_is_pots_free_support_barycenter():
    # Prepare
    rng = np.random.default_rng(2)
    Y = np.vstack([rng.normal(size=(40, 2)), rng.normal(size=(40, 2)) + 5])
    C0 = rng.normal(size=(4, 2)) + 2.5
    # Execute
    C, hist = central_coreset(C0, Y, epochs=5, lr=1.0)
    X = ot.lp.free_support_barycenter([Y], [np.full(80, 1 / 80)], C0, numItermax=5, stopThr=0.0)
    # Assert
    np.testing.assert_allclose(C, X, atol=1e-10)
    assert hist[-1] <= hist[0] + 1e-12


def _proto(**kw) -> FedWADCoreset:
    base = dict(
        coreset_size=10,
        local_coreset_size=5,
        clients_per_epoch=3,
        epochs=20,
        lr=0.3,
        init_mean=5.0,
        fedwad=FedWADConfig(support_size=10, iterations=4, init_mean=5.0),
    )
    base.update(kw)
    return FedWADCoreset(FedWADCoresetConfig(**base))


CLASSES = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [1, 3], [5, 7], [9, 0], list(range(10))]


def test_federated_coreset_close_to_the_central_one():
    # Prepare: 8 digits clients with two classes each, a held-out test party; guard on
    parties = _digits_parties(CLASSES)
    proto = _proto()
    bus = Bus(guard=PrivacyGuard.for_parties(parties), parties=parties)
    # Execute
    res = proto.run(parties, bus, np.random.default_rng(0))
    ref = proto.reference(parties)
    ev = proto.evaluate(res, parties)
    # Assert: within the documented tolerance of the exact-distance coreset (same init, steps),
    # well below the initial coreset's distance, and a useful 1-NN classifier
    pooled = Measure(np.vstack([parties[f"c{i}"].X for i in range(8)]))
    w0 = tot.wasserstein(Measure(proto._init(64, 10)), pooled)
    assert ev["coreset_wasserstein"] <= 1.3 * ref["coreset_wasserstein"]
    assert ev["coreset_wasserstein"] < 0.75 * w0
    assert ref["free_support_wasserstein"] <= ref["coreset_wasserstein"] * 1.05
    assert res.estimates["nn_accuracy"] >= ref["nn_accuracy"] - 0.05
    assert res.estimates["nn_accuracy"] >= 0.85
    kinds = {e.kind for e in bus.transcript}
    assert {"fedwad_coreset.xi", "fedwad_coreset.xi_client", "fedwad_coreset.labels"} <= kinds


def test_tiny_scenario_runs_deterministically_with_scores():
    sc = load_scenario(SCENARIOS / "contract_tiny_fedwad_coreset.yaml")
    _out = run_and_evaluate(build_world(sc))
    a, tr_a = _out.results, _out.transcript
    _out = run_and_evaluate(build_world(sc))
    b, tr_b = _out.results, _out.transcript
    # Assert
    assert tr_a.digest() == tr_b.digest()
    assert a["evaluation"] == b["evaluation"]
    assert set(a["utility"]) >= {"coreset_quality", "nn_accuracy"}
    assert 0 < a["utility"]["coreset_quality"] <= 1.5
    assert "coreset_wasserstein" in a["accuracy"]


def test_missing_test_party_is_a_clear_error():
    from testbed.errors import DataError

    parties = _digits_parties([[0], [1], [0, 1]])
    parties.pop("test")
    with pytest.raises(DataError, match="test party"):
        _proto().run(parties, Bus(parties=parties), np.random.default_rng(0))
