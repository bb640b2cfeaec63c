"""Distributional attack on FedWAD, on the paper's 2-D toy (scenarios/fedwad_gaussians.yaml)."""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pytest

from attacks.fedwad_distributional import FedWADDistributional, geodesic_extrapolation
from testbed import ot as tot
from testbed.measure import Measure
from testbed.scenario.loading import load_scenario
from testbed.scoring.metrics import w2_leakage


@functools.lru_cache(maxsize=2)
def _toy(path):
    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world

    world = build_world(load_scenario(path))
    _out = run_and_evaluate(world)
    results, tr = _out.results, _out.transcript
    public = replace(world.public, extra={**world.public.extra, "released": results["estimates"]})
    return world, tr, public


def _attack(scenarios_dir, observer, **params):
    world, tr, public = _toy(str(scenarios_dir / "fedwad_gaussians.yaml"))
    view = tr.view(observer, own_data={p: d.X for p, d in world.parties.items()}, public=public)
    attack = FedWADDistributional.from_params(params)
    outs = attack.run(view, public, np.random.default_rng(0))
    bases = attack.baseline(view, public, np.random.default_rng(1))
    W = tot.wasserstein(Measure(world.parties["alice"].X), Measure(world.parties["bob"].X))
    rows = {}
    for o in outs:
        truth = world.parties[o.target].X
        base = next(b for b in bases if b.target == o.target)
        m = w2_leakage(o.points, o.weights, truth, base.points, base.weights)
        rows[o.target] = {"attack": m["w2"] / W, "baseline": m["w2_baseline"] / W, **m}
    return rows


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"method": "geodesic"}, id="geodesic"),
        pytest.param(
            {"method": "optimisation", "restarts": 5}, id="optimisation", marks=pytest.mark.slow
        ),
    ],
)
def test_curious_client_recovers_nu(scenarios_dir, params):
    # Execute: alice attacks bob from xi^K, her own data and the released estimate
    rows = _attack(scenarios_dir, "alice", **params)
    # Assert: W(nu_hat, nu)/W(mu, nu) <= 0.1 while the prior-only guess stays at 1
    r = rows["bob"]
    assert r["attack"] <= 0.1, r
    np.testing.assert_allclose(r["baseline"], 1.0, rtol=1e-9)
    assert r["leakage"] >= 0.9


def test_server_inverts_last_interpolants(scenarios_dir):
    rows = _attack(scenarios_dir, "server")
    assert set(rows) == {"alice", "bob"}
    for r in rows.values():
        assert r["attack"] <= 0.1, r
        assert r["w2_ratio"] < 0.15  # against the public-prior baseline


def test_geodesic_extrapolation_exact_on_a_translation():
    # Prepare: nu = mu + v, xi = mu + v/2 (the exact midpoint), W_hat = |v|
    rng = np.random.default_rng(4)
    X = rng.normal(size=(30, 2))
    v = np.array([3.0, -1.0])
    mu, xi = Measure(X), Measure(X + v / 2)
    # Execute
    nu_hat = geodesic_extrapolation(mu, xi, float(np.linalg.norm(v)))
    # Assert
    np.testing.assert_allclose(nu_hat, X + v, atol=1e-9)


def test_attack_is_empty_without_the_released_estimate(scenarios_dir):
    world, tr, public = _toy(str(scenarios_dir / "fedwad_gaussians.yaml"))
    hidden = replace(public, extra={k: v for k, v in public.extra.items() if k != "released"})
    view = tr.view("alice", own_data={"alice": world.parties["alice"].X}, public=hidden)
    assert FedWADDistributional().run(view, hidden, np.random.default_rng(0)) == []


def test_scored_rows_reach_results_json(scenarios_dir, tmp_path):
    # Prepare: the tiny scenario with alice curious and the attack listed
    import json

    import yaml

    from testbed.run.execute import execute
    from testbed.scenario.schema import Scenario

    raw = yaml.safe_load((scenarios_dir / "contract_tiny.yaml").read_text())
    raw["threat_model"] = {"observer": "alice"}
    raw["attacks"] = [{"name": "fedwad_distributional"}]
    # Execute
    out = execute(Scenario.model_validate(raw), tmp_path / "run")
    rows = json.loads((tmp_path / "run" / "results.json").read_text())["attacks"]
    # Assert: one scored row about bob with every pinned point metric
    assert [(r["attack"], r["target"], r["observer"]) for r in rows] == [
        ("fedwad_distributional", "bob", "alice")
    ]
    for key in ("w2", "w2_ratio", "leakage", "coverage", "coverage_r", "exact_recovery"):
        assert key in rows[0]
    assert 0.0 <= rows[0]["leakage"] <= 1.0
    assert out.results["attacks"] == rows
