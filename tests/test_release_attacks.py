"""The attacks for any protocol (issue 51): ``release_points`` reads every point-shaped number a
party released, ``release_membership`` scores membership candidates against public reference
draws; a new protocol's scorecard measures something with them, and ``testbed run`` prints the
membership TPR at 0.1 % FPR."""

from __future__ import annotations

import numpy as np
import pytest

from attacks.release import ReleasePoints, reference_scores, release_points
from testbed.cli.main import main
from testbed.exchange.bus import SERVER, PublicInfo, View
from testbed.exchange.envelope import Envelope
from testbed.measure import Measure
from testbed.plugins.scorecard import scorecard
from testbed.registry import ATTACKS, PROTOCOLS
from testbed.scoring.verdict import DISTRIBUTIONAL, MEMBERSHIP, RECORD
from tests._outside import outside_package
from tests._toy_protocols import NoisyRows, PrivateMean, registered

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _env(seq, sender, kind, payload, **meta):
    return Envelope.make(
        seq=seq, round=0, sender=sender, receiver=SERVER, kind=kind, payload=payload, meta=meta
    )


def _view(envs, parties=("alice", "bob"), dim=3, prior=None):
    public = PublicInfo(protocol="p", parties=parties, dim=dim, prior=prior)
    return View("server", (), tuple(envs), {}, public), public


def test_release_points_reads_every_point_shaped_number_and_skips_measure_weights():
    # Prepare: a mean (vector of d), a 3-D block, a Measure of d atoms, a meta list, a cost
    mean = np.array([1.0, 2.0, 3.0])
    block = np.arange(12.0).reshape(2, 2, 3)
    m = Measure(np.full((3, 3), 5.0))  # 3 atoms: its weights are a vector of length d
    envs = [
        _env(0, "bob", "p.mean", mean),
        _env(1, "bob", "p.block", {"a": block, "n": 4.0}),
        _env(2, "bob", "p.sketch", m, anchor=[[7.0, 7.0, 7.0]]),
        _env(3, "alice", "p.mean", np.zeros(3)),
        _env(4, "bob", "p.cost", np.ones((2, 5))),  # trailing dimension 5: no point
    ]
    view, _ = _view(envs)
    # Execute
    P = release_points(view, "bob", 3)
    # Assert: 1 + 4 + 3 + 1 points, bob's only, no weight vector among them
    assert P.shape == (9, 3)
    np.testing.assert_allclose(P[0], mean)
    np.testing.assert_allclose(P[1:5], block.reshape(-1, 3))
    np.testing.assert_allclose(P[5:8], np.full((3, 3), 5.0))
    np.testing.assert_allclose(P[8], [7.0, 7.0, 7.0])
    assert release_points(view, "carol", 3) is None


def test_a_released_mean_gets_the_prior_spread_around_it():
    prior = np.random.default_rng(0).normal(size=(50, 3))
    view, public = _view([_env(0, "bob", "p.mean", np.array([4.0, 4.0, 4.0]))], prior=prior)
    out = ReleasePoints(ReleasePoints.Config()).run(view, public, np.random.default_rng(0))
    (o,) = [o for o in out if o.target == "bob"]
    assert o.points.shape == (50, 3) and o.meta["prior_spread"] is True
    np.testing.assert_allclose(o.points.mean(axis=0), [4.0, 4.0, 4.0])
    np.testing.assert_allclose(o.points - o.points.mean(0), prior - prior.mean(0))
    bare = ReleasePoints(ReleasePoints.Config(spread=False)).run(view, public, None)
    assert [b.points.shape for b in bare if b.target == "bob"] == [(1, 3)]


def test_reference_scores_rank_released_rows_above_fresh_draws():
    g = np.random.default_rng(1)
    members, others = g.normal(size=(20, 2)), g.normal(size=(20, 2))
    release = members + g.normal(0, 0.01, size=members.shape)
    s = reference_scores(np.vstack([members, others]), release, g.normal(size=(300, 2)))
    assert s[:20].min() > s[20:].max()


@pytest.fixture(scope="module")
def toy_cards(tmp_path_factory):
    """The scorecards of two toy protocols: one sends each party's mean, one its noisy rows."""
    out = tmp_path_factory.mktemp("cards")
    with registered(PrivateMean, NoisyRows):
        yield {n: scorecard(n, out / n) for n in ("toy_private_mean", "toy_noisy_rows")}


def _rows(card, attack, threat="server"):
    return {r["target"]: r for r in card.attacks if r["attack"] == attack and r["threat"] == threat}


# two toy scorecards (7 s): test_scorecard's leaky and private toys stay in make test
@pytest.mark.slow
def test_a_protocol_that_sends_means_gets_a_measured_leak_figure(toy_cards):
    card = toy_cards["toy_private_mean"]
    assert "release_points" in card.applicable and "release_membership" in card.applicable
    assert not _rows(card, "sent_rows")  # the row attack has nothing to read
    rows = _rows(card, "release_points")
    assert set(rows) == {"alice", "bob"}
    for r in rows.values():  # a mean shows the data's distribution, not its rows
        assert r["verdict"] == DISTRIBUTIONAL and r["metrics"]["leakage"] > 0.1
    assert all(r["value"] is not None for r in _rows(card, "release_membership").values())


# two toy scorecards (7 s): test_scorecard's leaky and private toys stay in make test
@pytest.mark.slow
def test_a_protocol_that_sends_noisy_rows_gets_a_record_leak(toy_cards):
    card = toy_cards["toy_noisy_rows"]
    rows = _rows(card, "release_points")
    assert {r["verdict"] for r in rows.values()} == {RECORD}
    assert all(r["metrics"]["coverage"] == 1.0 for r in rows.values())
    mem = _rows(card, "release_membership")
    assert {r["verdict"] for r in mem.values()} == {MEMBERSHIP}
    assert all(r["metrics"]["tpr_at_0_1pct_fpr"] == 1.0 for r in mem.values())
    assert any(x.startswith("server:") and "release_points" in x for x in card.leaks())


def test_the_scaffolded_protocol_scorecard_measures_with_the_generic_attacks(tmp_path):
    # Prepare: `testbed new-protocol` and nothing else
    name = "probe_generic_card"
    root = tmp_path / name
    assert main(["new-protocol", name, str(root)]) == 0
    with outside_package(root, f"{name}.protocol", "ProbeGenericCard", PROTOCOLS):
        # Execute
        card = scorecard(name, tmp_path / "sc")
    # Assert: both generic attacks ran and gave a figure for the server
    for attack in ("release_points", "release_membership"):
        rows = _rows(card, attack)
        assert set(rows) == {"alice", "bob"}, attack
        assert all(isinstance(r["value"], float) for r in rows.values()), attack


# 3.5 s (a membership run): the summary's TPR line is make test-slow's; membership scoring
# stays in make test (test_a_membership_auc_within_chance_of_its_candidate_counts_is_no_leak)
@pytest.mark.slow
def test_run_summary_prints_membership_tpr_at_low_fpr(tmp_path, capsys):
    text = (ROOT / "scenarios" / "contract_tiny_membership.yaml").read_text()
    f = tmp_path / "m.yaml"
    f.write_text(text.replace("- name: support_membership", "- name: release_membership"))
    assert main(["run", str(f), "--out", str(tmp_path / "r"), "-q"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "release_membership" in ln]
    assert lines and all("TPR@0.1%FPR=" in ln for ln in lines)
    # 20 non-members: the figure is read at FPR 1/20 and says so
    assert all("(at FPR 0.05: 20 non-members)" in ln for ln in lines)


def test_the_generic_attacks_are_builtins_for_any_protocol():
    for name in ("release_points", "release_membership"):
        assert ATTACKS.get(name).protocols == ("*",)


def test_a_membership_auc_within_chance_of_its_candidate_counts_is_no_leak():
    """An attack for any protocol scores data-blind releases too: with 10 + 10 candidates an AUC
    of 0.69 is within chance (p = 0.075), with 100 + 100 it is not."""
    from testbed.scoring.verdict import NO_LEAK, verdict

    few = verdict({"auc": 0.69, "baseline_auc": 0.5, "n_members": 10, "n_nonmembers": 10})
    assert few.kind == NO_LEAK and "p = 0.0755 (not significant at 5 %)" in few.text
    many = verdict({"auc": 0.69, "baseline_auc": 0.5, "n_members": 100, "n_nonmembers": 100})
    assert many.kind == MEMBERSHIP and "p = " in many.text
    assert verdict({"auc": 0.69, "baseline_auc": 0.5}).kind == MEMBERSHIP  # counts unknown


# a sweep: ~35 s on 2 busy cores; the run summary's column stays in make test
@pytest.mark.slow
def test_sweep_summary_has_a_tpr_column_where_a_membership_attack_ran(tmp_path, capsys):
    text = (ROOT / "scenarios" / "contract_tiny_membership.yaml").read_text()
    f = tmp_path / "m.yaml"
    sweep = "sweep:\n  protocol.params.iterations: [2, 4]\n"
    f.write_text(text.replace("- name: support_membership", "- name: release_membership") + sweep)
    assert main(["run", str(f), "--out", str(tmp_path / "r"), "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = next(ln for ln in out if ln.startswith("protocol "))
    assert "TPR@0.1%FPR" in header.split("  ")
    assert any(ln.startswith("TPR@0.1%FPR: worst attack and target") for ln in out)
    assert any("at FPR 1/#non-members when below 1000" in ln for ln in out)
