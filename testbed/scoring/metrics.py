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
#: results.csv and the report use these names unchanged.
METRIC_KEYS: dict[str, tuple[str, bool | None]] = {
    # row identity
    "attack": ("registered attack name", None),
    "label": ("attack configuration label (explicit label:, or name + params digest)", None),
    "target": ("attacked party", None),
    "observer": ("who observed the messages", None),
    "isolation": ("the sandbox level the attack ran under (testbed.sandbox.confine)", None),
    "failed": ("the phase an attack failed in (a failure row: no scores)", None),
    "reason": ("one line saying why the attack failed", None),
    "kind": ("attack output kind: points, scores, words, histogram", None),
    "method": ("the attack's method note (AttackOutput.meta['method'])", None),
    "score": ("the membership score's name (AttackOutput.meta['score'])", None),
    "source": ("attacks-<tag>.json of a `testbed attack` re-run", None),
    # points
    "w2": ("W2(reconstruction, private data)", False),
    "w2_baseline": ("W2(prior-only baseline, private data)", None),
    "w2_ratio": ("w2 / w2_baseline, unclipped (lower = more leakage)", False),
    "leakage": ("1 - w2_ratio clipped to [0, 1]", True),
    "leakage_raw": ("1 - w2_ratio unclipped (< 0: worse than the baseline)", True),
    "leakage_clipped": ("1.0 when the clip to [0, 1] changed leakage", None),
    "coverage": ("share of private rows with a reconstructed point within coverage_r", True),
    "coverage_r": ("median leave-one-out NN distance inside the private data", None),
    "coverage_baseline": ("coverage of the prior-only baseline", None),
    "exact_recovery": ("share of private rows recovered within exact_recovery_tol", True),
    "exact_recovery_tol": ("1e-6 x median private row norm", None),
    # recovery up to a transformation (OT matching, then the best fit; testbed.scoring.transforms)
    "exact_recovery_similarity": ("exact_recovery after the best similarity transform", True),
    "coverage_similarity": ("coverage after the best similarity transform", True),
    "exact_recovery_affine": ("exact_recovery after the best affine map", True),
    "coverage_affine": ("coverage after the best affine map", True),
    # the same against population rows (rows of the same distribution no party holds)
    "population_method": ("where the population rows come from", None),
    "population_rows": ("population rows the figures below were computed on", None),
    "coverage_population": ("coverage of population subsets of the target's size", None),
    "coverage_population_hi": ("97.5 % quantile of coverage over population subsets", None),
    "exact_recovery_population": ("exact_recovery of population subsets", None),
    "exact_recovery_similarity_population": ("exact_recovery_similarity on population", None),
    "coverage_similarity_population": ("coverage_similarity on population", None),
    "exact_recovery_affine_population": ("exact_recovery_affine on population", None),
    "coverage_affine_population": ("coverage_affine on population", None),
    "w2_population": ("W2(reconstruction, population subset of the target's size)", None),
    "leakage_population": ("leakage scored against population rows instead", None),
    "record_p": ("permutation p-value: closer to the target's rows than to the population", None),
    "record_leak": (
        "1 when a leak of the target's rows is claimed (record level); absent when the record "
        "test did not run (no population rows, no exact recovery)",
        None,
    ),
    "record_leakage": (
        "largest excess of a record figure over the population's (0 unless record_leak)",
        True,
    ),
    # words
    "matching_rate": ("share of retrieved words in the target's document", True),
    "matching_rate_any": ("share of retrieved words in any party's document", True),
    "matching_rate_baseline": ("matching_rate of the prior-only baseline", None),
    "matching_rate_any_baseline": ("matching_rate_any of the prior-only baseline", None),
    "n_words": ("retrieved words", None),
    "precision_at_k": ("mean share of a shared point's top-k words in the document", True),
    "k": ("k of precision_at_k", None),
    # scores (membership)
    "auc": ("membership ROC-AUC", True),
    "tpr_at_1pct_fpr": ("largest TPR with FPR <= 1 % (floor 1/#non-members)", True),
    "tpr_at_0_1pct_fpr": ("largest TPR with FPR <= 0.1 % (floor 1/#non-members)", True),
    "alpha_used_1pct": ("FPR level used for tpr_at_1pct_fpr (after the floor)", None),
    "alpha_used_0_1pct": ("FPR level used for tpr_at_0_1pct_fpr (after the floor)", None),
    "advantage": ("max(TPR - FPR)", True),
    "n_members": ("member candidates", None),
    "n_nonmembers": ("non-member candidates", None),
    "baseline_auc": ("AUC of the prior-only baseline (its own candidate order)", None),
    "baseline_tpr_at_1pct_fpr": ("tpr_at_1pct_fpr of the prior-only baseline", None),
    "eps_lower": ("audited epsilon lower bound (held-out threshold, Clopper-Pearson)", True),
    "epsilon_lb": ("same as eps_lower (older name)", None),
    "eps_method": ("how eps_lower was computed", None),
    "claimed_epsilon": ("the ledger's epsilon for the target (delta 1e-5)", None),
    "epsilon_claimed": ("the ledger's epsilon for the target (delta 1e-5)", None),
    # histogram
    "tv": ("total variation to the target's label histogram", False),
    "tv_baseline": ("tv of the prior-only baseline", None),
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
        row["exact_recovery"] = exact_recovery_rate(output.points, truth.X)
        row["exact_recovery_tol"] = exact_recovery_tolerance(truth.X)
        if baseline is not None:
            row["coverage_baseline"] = coverage_at_r(baseline.points, truth.X, row["coverage_r"])[
                "coverage"
            ]
        row.update(transform_recovery(output.points, truth.X, row["coverage_r"]))
        row.update(_vs_population(output, baseline, world, row))
        return row
    if output.kind == "words":
        tokens = world.tokens
        if tokens is None or truth.source_index is None:
            raise MetricError("words output: the dataset carries no tokens to score against")
        doc = [tokens[i] for i in truth.source_index]
        ranked = output.meta.get("ranked")
        row["matching_rate"] = matching_rate(output.words, doc)
        # the paper's reading for a measure that mixes both parties (FedWAD's xi^K): a word
        # counts when it is in any party's private document
        every = {tokens[i] for p in world.parties.values() for i in p.source_index}
        row["matching_rate_any"] = matching_rate(output.words, every)
        row["n_words"] = len(output.words)
        if ranked:
            k = len(ranked[0])
            row["precision_at_k"] = precision_at_k(ranked, doc, k)
            row["k"] = k
        if baseline is not None and baseline.words is not None:
            row["matching_rate_baseline"] = matching_rate(baseline.words, doc)
            row["matching_rate_any_baseline"] = matching_rate(baseline.words, every)
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
        row.update({"eps_lower": audit["epsilon_lb"], "eps_method": audit["method"]})
        return row
    if output.kind == "histogram":
        if truth.y is None:
            raise MetricError("histogram output: the target has no labels")
        true_hist = np.bincount(
            np.asarray(truth.y, dtype=np.int64), minlength=output.histogram.size
        )
        row["tv"] = tv_distance(output.histogram, true_hist)
        if baseline is not None and baseline.histogram is not None:
            row["tv_baseline"] = tv_distance(baseline.histogram, true_hist)
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
        rates = [row.get(k) for k in ("exact_recovery", *EXACT_UP_TO)]
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
EXACT_UP_TO = ("exact_recovery_similarity", "exact_recovery_affine")

# private helpers some tests import from here
_PRIVATE = (_nn_distance, _roc, _rows_in)
