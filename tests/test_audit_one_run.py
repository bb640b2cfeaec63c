"""The one-run audit (m canaries, one protocol run): power without a defense, bounds never
above an honest claim, per observer and per round, a miscalibrated defense caught."""

from __future__ import annotations

import numpy as np
import pytest
from _dp_zoo import NoPushClip
from _toy_protocols import registered

from testbed.registry import DEFENSES
from testbed.run.audit_one_run import canary_directions, one_run_audit
from testbed.run.roster import build_world
from testbed.scenario.loading import parse_scenario

# alice: 10 rows in 64 dimensions, S = 74 atoms (one per row once the 64 canary slots are added:
# the OT plan is a permutation, every canary moves its own atom)
BASE = """\
name: audit_one_run
seed: 0
data:
  dataset:
    name: gaussians
    params: {d: 64, components: [{n: 10, mean: 0.0, std: 0.3}, {n: 20, mean: 1.0, std: 0.2}]}
  partition: {name: class_subsets, params: {classes: [[0], [1]]}}
  parties: [alice, bob]
protocol: {name: fedwad, params: {support_size: 74, iterations: 1, init_scale: 0.3, trace: false}}
defenses: DEFS
"""


def _world(defs: str = "[]"):
    return build_world(parse_scenario(BASE.replace("DEFS", defs), "one_run.yaml", "."))


def _defense(z, push_max=0.5, name="gaussian_measure_noise"):
    return (
        f"[{{name: {name}, params: {{clip_norm: 4.0, push_max: {push_max}, "
        f"noise_multiplier: {z}}}}}]"
    )


def test_directions_are_orthonormal_and_avoid_the_data():
    rng = np.random.default_rng(0)
    X = np.zeros((30, 5))
    X[:, :2] = rng.normal(size=(30, 2))  # the data live in the first two coordinates
    U = canary_directions(X, 3, rng)
    np.testing.assert_allclose(U @ U.T, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(U[:, :2], 0.0, atol=1e-12)
    more = canary_directions(X, 8, rng)
    assert more.shape == (8, 5)
    np.testing.assert_allclose(np.linalg.norm(more, axis=1), 1.0)


def test_one_run_has_power_without_a_defense_and_reports_each_observer():
    rows = one_run_audit(_world(), "alice", canaries=64, per_round=True)
    by = {(r.observer, r.rounds): r for r in rows}
    server = by[("server", "all")]
    assert server.claimed_epsilon == float("inf")
    # 40 guesses, all right, 28 rules tried: the bound is well above 1
    assert server.bound.epsilon > 1.0 and server.bound.mu > 0.5
    assert server.bound.correct == server.bound.guesses
    assert {"server", "bob", "eavesdropper"} <= {o for o, _ in by}
    # bob sees only what the server sends back (post-processing): weaker, never stronger
    assert by[("bob", "all")].bound.epsilon <= server.bound.epsilon
    assert all(r.bound.m == 64 and r.runs == 1 for r in rows)


def test_one_run_bound_stays_below_an_honest_claim():
    for r in one_run_audit(_world(_defense(0.01)), "alice", canaries=64):
        assert np.isfinite(r.claimed_epsilon) and r.claimed_mu is not None
        assert not r.violated, r.row()


def test_one_run_catches_a_defense_that_understates_its_sensitivity():
    # S = 74 >= the rows: not a barycentric push, so the shipped defense clips every atom to
    # norm C and charges 2 C sqrt(S). The zoo's twin that charges it as a push of share
    # push_max = 0.002 (and clips nothing) understates that 500x; the claim is loose by
    # sqrt(S) = 8.6 here (a canary moves one atom of 74), so it adds far too little noise
    with registered(NoPushClip, registry=DEFENSES):
        broken = _world(_defense(5, push_max=0.002, name="zoo_no_push_clip"))
    rows = one_run_audit(broken, "alice", canaries=64, observers=[("server",)])
    assert rows[0].violated and rows[0].bound.mu > rows[0].claimed_mu
    honest = one_run_audit(_world(_defense(5)), "alice", canaries=64, observers=[("server",)])
    assert not honest[0].violated and honest[0].claimed_mu == rows[0].claimed_mu


def test_one_run_rows_are_flat_and_name_their_method():
    r = one_run_audit(_world(), "alice", canaries=32, observers=[("server",)])[0]
    row = r.row()
    assert row["observer"] == "server" and row["canaries"] == 32 and row["runs"] == 1
    assert row["eps_lower"] > 0 and row["rule"].startswith(("max:", "sum:"))
    assert row["candidates"] > 1 and row["correct"] <= row["guesses"] <= 32
    assert "Steinke" in r.method and "Bonferroni" in r.method


def test_unknown_party_and_too_few_canaries_are_refused():
    from testbed.errors import TestbedError

    with pytest.raises(TestbedError, match="unknown party"):
        one_run_audit(_world(), "carol")
    with pytest.raises(TestbedError, match="at least 2"):
        one_run_audit(_world(), "alice", canaries=1)
