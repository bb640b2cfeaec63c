"""Attacks added for the frontier (issue 13): FedBary server inversion, fedwad_clustering
server inversion, membership from any reconstruction."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from attacks import ClusteringInversion, FedBaryInversion, ReconstructionMembership
from testbed.run.execute import run_and_evaluate
from testbed.run.roster import build_world
from testbed.scenario.loading import load_scenario
from testbed.scoring.metrics import coverage_at_r, exact_recovery_rate, membership_metrics

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _world(name: str, tmp_path, **protocol_params):
    sc = yaml.safe_load((SCENARIOS / name).read_text())
    sc["protocol"]["params"].update(protocol_params)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(sc))
    world = build_world(load_scenario(path))
    tr = run_and_evaluate(world).transcript
    own = {p: d.X for p, d in world.parties.items()}
    return world, tr, own


def test_fedbary_inversion_recovers_every_row_when_support_equals_client_size(tmp_path):
    # Prepare: S = 30 = every client's size, so the interpolants sit on the clients' rows
    world, tr, own = _world("contract_tiny_fedbary.yaml", tmp_path, support_size=30)
    view = tr.view("server", own_data=own, public=world.public)
    # Execute
    out = FedBaryInversion().run(view, world.public, np.random.default_rng(0))
    # Assert: every client's rows, exactly
    assert {o.target for o in out} == {"client_1", "client_2", "client_3"}
    for o in out:
        assert exact_recovery_rate(o.points, world.parties[o.target].X) == 1.0


def test_fedbary_inversion_quantises_with_a_small_support_and_is_server_only(tmp_path):
    world, tr, own = _world("contract_tiny_fedbary.yaml", tmp_path, support_size=10)
    view = tr.view("server", own_data=own, public=world.public)
    out = FedBaryInversion(FedBaryInversion.Config(rounds="all")).run(
        view, world.public, np.random.default_rng(0)
    )
    for o in out:
        X = world.parties[o.target].X
        # 10 local means per round: better than the prior sample, not the rows themselves
        assert (
            coverage_at_r(o.points, X)["coverage"]
            > coverage_at_r(world.public.prior, X)["coverage"] - 0.2
        )
        assert exact_recovery_rate(o.points, X) < 0.5
    client_view = tr.view("client_1", own_data=own, public=world.public)
    assert FedBaryInversion().run(client_view, world.public, np.random.default_rng(0)) == []
    # exact interpolation: the supports grow, the attack does not apply
    ex = replace(world.public, params={**world.public.params, "interpolation": "exact"})
    assert FedBaryInversion().run(view, ex, np.random.default_rng(0)) == []


def test_clustering_inversion_beats_the_prior(tmp_path):
    world, tr, own = _world("contract_tiny_fedwad_clustering.yaml", tmp_path)
    view = tr.view("server", own_data=own, public=world.public)
    out = ClusteringInversion().run(view, world.public, np.random.default_rng(0))
    assert len(out) == 4
    for o in out:
        X = world.parties[o.target].X
        assert o.meta["runs"] == 3  # one inversion per pair the client is in
        cov = coverage_at_r(o.points, X)["coverage"]
        assert cov > coverage_at_r(world.public.prior, X)["coverage"]


@pytest.mark.parametrize("support_size", [30])
def test_membership_from_the_fedbary_reconstruction(tmp_path, support_size):
    # Prepare: candidates = 10 rows of client_1 + 10 fresh rows of the same distribution
    world, tr, own = _world("contract_tiny_fedbary.yaml", tmp_path, support_size=support_size)
    X = world.parties["client_1"].X
    rng = np.random.default_rng(3)
    fresh = rng.normal(size=(10, X.shape[1])) * X.std(axis=0) + X.mean(axis=0)
    cand = np.vstack([X[:10], fresh])
    public = replace(world.public, extra={**world.public.extra, "candidates": {"client_1": cand}})
    view = tr.view("server", own_data=own, public=public)
    # Execute
    out = ReconstructionMembership().run(view, public, np.random.default_rng(0))
    # Assert: only the target with candidates is scored; members are separated
    assert [o.target for o in out] == ["client_1"]
    m = membership_metrics(out[0].scores, np.r_[np.ones(10, bool), np.zeros(10, bool)])
    assert m["auc"] == 1.0
