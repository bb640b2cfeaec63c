"""Pinned metric definitions (DESIGN.md, "Metrics"): the keys the scorer writes
(:data:`METRIC_KEYS`) and :func:`score_attack`, which dispatches one attack output to the metric
modules by kind. The metrics themselves live by responsibility, and are re-exported here:
:mod:`~testbed.scoring.accuracy`, :mod:`~testbed.scoring.distributional`,
:mod:`~testbed.scoring.records`, :mod:`~testbed.scoring.membership`,
:mod:`~testbed.scoring.text`, :mod:`~testbed.scoring.labels`. This is the only code that sees
ground truth."""

from __future__ import annotations

import numpy as np

from testbed.scoring.accuracy import detection_metrics, mean_ci, relative_error
from testbed.scoring.distributional import population_leakage, w2_leakage
from testbed.scoring.errors import MetricError
from testbed.scoring.labels import tv_distance
from testbed.scoring.membership import (
    HELDOUT_METHOD,
    _roc,
    _rows_in,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
    epsilon_lower_bound_from_scores,
    gdp_delta,
    gdp_epsilon,
    gdp_mu_lower_bound,
    heldout_epsilon_lb,
    membership_labels,
    membership_metrics,
    score_membership,
    tpr_at_fpr,
)
from testbed.scoring.names import ATTACK, Metric, RowField
from testbed.scoring.records import (
    EXACT_RECOVERY_REL_TOL,
    _nn_distance,
    coverage_at_r,
    exact_recovery_rate,
    exact_recovery_tolerance,
    median_loo_nn_distance,
    population_comparison,
    transform_recovery,
)
from testbed.scoring.text import matching_rate, precision_at_k

__all__ = [
    "LEAKAGE_METRICS",
    "METRIC_KEYS",
    "MetricError",
    "coverage_at_r",
    "detection_metrics",
    "epsilon_lower_bound",
    "epsilon_lower_bound_from_scores",
    "exact_recovery_rate",
    "exact_recovery_tolerance",
    "EXACT_RECOVERY_REL_TOL",
    "HELDOUT_METHOD",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_mu_lower_bound",
    "heldout_epsilon_lb",
    "matching_rate",
    "mean_ci",
    "membership_labels",
    "membership_metrics",
    "median_loo_nn_distance",
    "precision_at_k",
    "relative_error",
    "score_attack",
    "score_membership",
    "tpr_at_fpr",
    "tv_distance",
    "w2_leakage",
]

#: Every key the scorer (:func:`score_attack`) and the attack stage write into an attack row of
#: results.json, with its meaning and its direction: True = larger means more leakage, False =
#: smaller means more leakage, None = not a leakage measure (context: sizes, radii, labels).
#: Made from :mod:`testbed.scoring.names` (the names are written there only); results.csv and
#: the report use them unchanged.
METRIC_KEYS: dict[str, tuple[str, bool | None]] = {
    **{f.value: (f.meaning, None) for f in RowField},
    **{m.value: (m.meaning, m.higher) for m in Metric if m.row == ATTACK},
}

#: leakage metrics -> True when a larger value means more leakage (what the report plots)
LEAKAGE_METRICS: dict[str, bool] = {k: d for k, (_, d) in METRIC_KEYS.items() if d is not None}


def score_attack(output, baseline, truth, baseline_w2: float | None = None) -> dict:
    """Score one :class:`~attacks.AttackOutput` against ``truth`` (a
    :class:`~testbed.scoring.truth.GroundTruth`, which only the scorer receives) and,
    next to it, the prior-only baseline's output of the same kind and target.
    ``baseline_w2``: the baseline's W2 to the target's rows when the caller has computed it
    already (choosing a coalition's best baseline), so it is not computed twice.

    points: W2, ratio to the baseline, normalised leakage, coverage@r, exact recovery (1e-6);
    words: matching rate and precision@k against the target's document tokens
    (``truth.tokens``, one per dataset row);
    scores: membership metrics and an ε lower bound against ``truth.membership[target]``;
    histogram: total variation to the target's label histogram.
    """
    world = truth
    truth = world.parties[output.target]
    row: dict = {"kind": output.kind}
    method = output.meta.get("method") if output.meta else None
    if method is not None:
        row["method"] = method
    if output.kind == "points":
        row.update(
            w2_leakage(
                output.points,
                output.weights,
                truth.X,
                None if baseline is None else baseline.points,
                None if baseline is None else baseline.weights,
                baseline_w2=baseline_w2,
            )
        )
        row.update(coverage_at_r(output.points, truth.X))
        row[Metric.EXACT_RECOVERY] = exact_recovery_rate(output.points, truth.X)
        row[Metric.EXACT_RECOVERY_TOL] = exact_recovery_tolerance(truth.X)
        if baseline is not None:
            row[Metric.COVERAGE_BASELINE] = coverage_at_r(
                baseline.points, truth.X, row[Metric.COVERAGE_R]
            )[Metric.COVERAGE]
        row.update(transform_recovery(output.points, truth.X, row[Metric.COVERAGE_R]))
        row.update(_vs_population(output, baseline, world, row))
        return row
    if output.kind == "words":
        tokens = world.tokens
        if tokens is None or truth.source_index is None:
            raise MetricError("words output: the dataset carries no tokens to score against")
        doc = [tokens[i] for i in truth.source_index]
        ranked = output.meta.get("ranked")
        row[Metric.MATCHING_RATE] = matching_rate(output.words, doc)
        # the paper's reading for a measure that mixes both parties (FedWAD's xi^K): a word
        # counts when it is in any party's private document
        every = {tokens[i] for p in world.parties.values() for i in p.source_index}
        row[Metric.MATCHING_RATE_ANY] = matching_rate(output.words, every)
        row[Metric.N_WORDS] = len(output.words)
        if ranked:
            k = len(ranked[0])
            row[Metric.PRECISION_AT_K] = precision_at_k(ranked, doc, k)
            row[Metric.K] = k
        if baseline is not None and baseline.words is not None:
            row[Metric.MATCHING_RATE_BASELINE] = matching_rate(baseline.words, doc)
            row[Metric.MATCHING_RATE_ANY_BASELINE] = matching_rate(baseline.words, every)
        return row
    if output.kind == "scores" and "candidates" in (output.meta or {}):
        # issue 5: public candidate rows; members = candidates that are rows of the target
        row.update(score_membership(output, baseline, world))
        return row
    if output.kind == "scores" and output.target in (world.candidates or {}):
        raise MetricError(
            f"scores for {output.target!r} carry no meta['candidates'] (the candidate rows "
            "scored, in order): the scorer cannot tell whose pool they rank; set it"
        )
    if output.kind == "scores":
        member = world.membership.get(output.target)
        if member is None:
            raise MetricError(f"scores output: no membership ground truth for {output.target!r}")
        row.update(membership_metrics(output.scores, member))
        # threshold chosen on held-out candidates (never the scored ones): an honest bound
        audit = heldout_epsilon_lb(output.scores, member, delta=world.delta)
        row.update(
            {Metric.EPS_LOWER: audit[Metric.EPSILON_LB], RowField.EPS_METHOD: audit["method"]}
        )
        return row
    if output.kind == "histogram":
        if truth.y is None:
            raise MetricError("histogram output: the target has no labels")
        true_hist = np.bincount(
            np.asarray(truth.y, dtype=np.int64), minlength=output.histogram.size
        )
        row[Metric.TV] = tv_distance(output.histogram, true_hist)
        if baseline is not None and baseline.histogram is not None:
            row[Metric.TV_BASELINE] = tv_distance(baseline.histogram, true_hist)
        return row
    raise MetricError(f"no scorer for attack output kind {output.kind!r}")


def _vs_population(output, baseline, world, row: dict) -> dict:
    """The points row's figures against the target's population rows (record-level leakage vs
    the population, DESIGN.md); without population rows, only the exact-recovery rule: a record
    leak is claimed when a row is recovered exactly (raw or up to a transform). Without
    population rows and without an exact recovery the record test did not run: the row has no
    ``record_leak`` / ``record_leakage`` (not measured, never 0;
    :func:`testbed.scoring.vocabulary.record_test`)."""
    pop = (world.population or {}).get(output.target)
    out: dict = {"population_method": world.population_method}
    if pop is None or len(pop) < 2:
        rates = [row.get(k) for k in (Metric.EXACT_RECOVERY, *EXACT_UP_TO)]
        best = max((v for v in rates if v is not None), default=0.0)
        if best > 0:
            out.update(record_leak=1.0, record_leakage=float(best))
        return out
    rng = np.random.default_rng(0)
    out.update(population_comparison(output.points, world.parties[output.target].X, pop, row, rng))
    out.update(
        population_leakage(
            output.points,
            output.weights,
            pop,
            len(world.parties[output.target].X),
            None if baseline is None else baseline.points,
            None if baseline is None else baseline.weights,
            rng,
        )
    )
    return out


#: the exact-recovery rates up to a transform (keys of a points row)
EXACT_UP_TO = (Metric.EXACT_RECOVERY_SIMILARITY, Metric.EXACT_RECOVERY_AFFINE)

# private helpers some tests import from here
_PRIVATE = (_nn_distance, _roc, _rows_in)
