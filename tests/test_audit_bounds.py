"""The ε audit's building blocks on hand-made inputs: the canary statistic over a transcript,
the canary's construction, the threshold search and the held-out evaluation, and when a claim
counts as violated. (The full game is tested in tests/test_audit.py.)"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from testbed.measure import Measure
from testbed.run.audit import AUDIT_METHOD, AuditResult, _canary, canary_score
from testbed.scoring.audit_bounds import best_threshold as _best
from testbed.scoring.audit_bounds import held_out_bound as _held_out

U = np.array([1.0, 0.0])


def _msg(sender, receiver, payload):
    return SimpleNamespace(sender=sender, receiver=receiver, payload=payload)


def test_canary_score_reads_only_the_party_s_rows_to_the_server():
    # every row of the data's width in any field is read, a d-vector ("v") included (it was
    # skipped before: a noisy mean went unread); arrays of another width ("w3") never are
    msgs = [
        _msg("alice", "server", Measure(np.array([[1.0, 5.0], [3.0, 0.0]]), [0.9, 0.1])),
        _msg("alice", "server", {"atoms": np.array([[2.0, 0.0]]), "weights": np.ones((1, 2)) * 9}),
        _msg("alice", "bob", {"atoms": np.array([[50.0, 0.0]])}),
        _msg("bob", "server", {"atoms": np.array([[60.0, 0.0]])}),
        _msg("alice", "server", {"v": np.array([70.0, 0.0]), "w3": np.ones((2, 3)) * 80}),
        _msg("alice", "server", {"late": np.array([[4.0, 1.0]])}),
    ]
    assert canary_score(msgs, "alice", U) == 70.0
    assert canary_score(msgs, "alice", U, "sum") == 80.0
    assert canary_score(msgs, "alice", np.array([0.0, 1.0]), "sum") == 6.0
    assert canary_score(msgs, "carol", U) == -math.inf
    assert canary_score([], "alice", U, "sum") == -math.inf


def test_canary_points_away_from_the_mean_and_replaces_the_farthest_row():
    X = np.array([[1.0, 0.0], [3.0, 0.0]])  # mean (2, 0): canary at (-2, 0)
    c, u, row = _canary(X, 2.0)
    np.testing.assert_allclose(u, [-1.0, 0.0])
    np.testing.assert_allclose(c, [-2.0, 0.0])
    assert row == 1
    c0, u0, row0 = _canary(np.array([[1.0, 0.0], [-1.0, 0.0]]), 2.0)  # mean 0: first axis
    np.testing.assert_array_equal(u0, [1.0, 0.0])
    np.testing.assert_array_equal(c0, [2.0, 0.0])
    assert row0 == 1
    _, u_small, _ = _canary(np.array([[1.0 + 1e-11, 0.0], [-1.0, 0.0]]), 1.0)  # |mean| 5e-12
    np.testing.assert_allclose(u_small, [-1.0, 0.0])
    _, u_tiny, _ = _canary(np.array([[1.0 + 1e-12, 0.0], [-1.0, 0.0]]), 1.0)  # |mean| 5e-13
    np.testing.assert_array_equal(u_tiny, [1.0, 0.0])


def test_best_threshold_is_the_first_maximiser():
    s0, s1 = np.array([0.0, 1.0]), np.array([1.0, 2.0])
    # TPR - FPR at thresholds 0, 1, 2: 0, 0.5, 0.5 (exact tie) -> the first, 1.0
    assert _best(s0, s1, lambda t, f: t - f) == (1.0, 0.5)
    s0, s1 = np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])
    # TPR + FPR: largest at the lowest threshold
    assert _best(s0, s1, lambda t, f: t + f) == (0.0, 2.0)
    # nothing beats -1: the threshold stays at the largest non-canary score
    assert _best(s0, s1, lambda t, f: -5.0) == (2.0, -1.0)
    # only the canary scores decide TPR and only the others FPR
    assert _best(np.array([0.0]), np.array([1.0, 2.0]), lambda t, f: t - 2 * f) == (1.0, 1.0)


def test_held_out_picks_the_statistic_on_the_fit_trials_and_scores_the_others():
    fit0 = {"max": np.array([0.0, 0.0, 0.0, 0.0]), "sum": np.array([0.0, 1.0, 2.0, 3.0])}
    fit1 = {"max": np.array([1.0, 1.0, 1.0, 1.0]), "sum": np.array([0.0, 1.0, 2.0, 3.0])}
    ev0 = {"max": np.array([0.0, 0.0, 1.0, 0.0]), "sum": np.zeros(4)}
    ev1 = {"max": np.array([1.0, 1.0, 1.0, 0.0]), "sum": np.ones(4)}

    def bound(t, f):
        return t - f

    stat, thr, b, tpr, fpr = _held_out(fit0, fit1, ev0, ev1, bound)
    assert (stat, thr) == ("max", 1.0)
    assert (tpr, fpr) == (0.75, 0.25) and b == 0.5
    # the same statistic wins whatever order the keys come in
    assert _held_out(dict(reversed(fit0.items())), fit1, ev0, ev1, bound)[0] == "max"


def _result(**kw):
    base = dict(
        party="a",
        trials=100,
        claimed_epsilon=1.0,
        delta=1e-5,
        audited_epsilon=0.5,
        tpr=0.5,
        fpr=0.1,
        threshold=0.0,
        canary_norm=1.0,
    )
    return AuditResult(**{**base, **kw})


def test_audit_result_violation_rules_and_defaults():
    r = _result()
    assert (r.mu_lower, r.claimed_mu, r.epsilon_gdp, r.statistic, r.confidence) == (
        0.0,
        None,
        0.0,
        "max",
        0.95,
    )
    assert r.method == AUDIT_METHOD and not r.violated and r.consistent
    assert not _result(audited_epsilon=1.0).violated  # equal to the claim: consistent
    assert _result(audited_epsilon=1.01).violated and not _result(audited_epsilon=1.01).consistent
    assert _result(mu_lower=0.6, claimed_mu=0.5).violated
    assert not _result(mu_lower=0.5, claimed_mu=0.5).violated
    assert not _result(mu_lower=5.0, claimed_mu=None).violated
    assert "second half" in AUDIT_METHOD and "Clopper-Pearson" in AUDIT_METHOD
