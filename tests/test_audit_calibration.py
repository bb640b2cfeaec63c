"""Calibration: on a mechanism that releases nothing about the canaries, every audit bound is
> 0 in at most alpha = 1 - confidence of the runs — the bounds' own code on simulated null
scores (thousands of experiments), and the one-run driver end to end with the canaries never
inserted. The benchmark (``testbed bench --only audit``) runs hundreds of protocol-level nulls."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from testbed.scoring.audit_bounds import gdp_mu_from_scores, held_out_bound, one_run_bounds
from testbed.scoring.metrics import epsilon_lower_bound

ALPHA = 0.05


def _at_most_alpha(count: int, runs: int) -> bool:
    """``count`` positives of ``runs`` are consistent with a rate <= ALPHA (one-sided test at
    level 1e-3: a larger count means the bound is not calibrated)."""
    return binom.sf(count - 1, runs, ALPHA) > 1e-3


# a null experiment: ~35 s on 2 busy cores
@pytest.mark.slow
def test_one_run_bounds_are_calibrated_on_null_scores():
    rng = np.random.default_rng(0)
    runs, m, pos_eps, pos_mu = 1500, 100, 0, 0
    for _ in range(runs):
        inc = rng.random(m) < 0.5
        # two statistics, neither depends on the inclusion bits
        b = one_run_bounds({"a": rng.normal(size=m), "b": rng.exponential(size=m)}, inc, 1e-5)
        pos_eps += b.epsilon > 0
        pos_mu += b.mu > 0
    assert _at_most_alpha(pos_eps, runs) and _at_most_alpha(pos_mu, runs), (pos_eps, pos_mu)


def test_gdp_estimate_over_all_thresholds_is_calibrated_on_null_scores():
    rng = np.random.default_rng(1)
    runs = 1000
    pos = sum(
        gdp_mu_from_scores(rng.normal(size=60), rng.normal(size=60), 1 - ALPHA)["mu"] > 0
        for _ in range(runs)
    )
    assert _at_most_alpha(pos, runs), pos


def test_held_out_clopper_pearson_is_calibrated_on_null_scores():
    rng = np.random.default_rng(2)
    runs, n = 100, 20
    pos = 0
    for _ in range(runs):
        fit0, fit1, ev0, ev1 = ({"s": rng.normal(size=n)} for _ in range(4))
        _, _, b, _, _ = held_out_bound(
            fit0, fit1, ev0, ev1, lambda t, f: epsilon_lower_bound(t, f, n, n, 1e-5, 1 - ALPHA)
        )
        pos += b > 0
    assert _at_most_alpha(pos, runs), pos


def test_one_run_driver_is_calibrated_when_canaries_are_never_inserted():
    from test_audit_one_run import _world

    from testbed.run.audit_one_run import one_run_audit

    w = _world()  # no defense at all: with the canaries inserted the bound is > 1
    runs = 8
    rows = [
        one_run_audit(w, "alice", canaries=32, observers=[("server",)], null=True, run=r)[0]
        for r in range(runs)
    ]
    assert all(r.null and r.bound.m == 32 for r in rows)
    positives = sum(r.bound.epsilon > 0 or r.bound.mu > 0 for r in rows)
    assert _at_most_alpha(positives, runs), [r.row() for r in rows]
