"""Every name a results file uses for a number or a row field, written once: the scorer, the
results writer, the results schema (:mod:`testbed.scoring.results_schema`), the report and the
CLI take them from here (``tests/test_metric_names.py`` fails on a metric name written as a
string literal in ``testbed/report/`` or ``testbed/cli/``).

:class:`Metric` is a number: a measure of an attack row, of the accuracy of an estimate, of task
utility or of privacy; each member carries its meaning and its direction (``higher``: True = a
larger value means more leakage, False = smaller means more leakage, None = not a leakage
measure) and the row it appears in (``row``). :class:`RowField` names the text fields that
identify an attack row. Both are ``str`` enums: a member is its name wherever a string is
(``Metric.LEAKAGE == "leakage"``, dict keys, JSON), so results files read the same.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ATTACK", "Metric", "RowField"]

#: the row kinds a metric appears in (``Metric.row``)
ATTACK, ACCURACY, UTILITY, RUN = "attack", "accuracy", "utility", "run"


class RowField(StrEnum):
    """The text fields of an attack row (identity, failure, notes), with their meaning."""

    def __new__(cls, name: str, meaning: str):
        obj = str.__new__(cls, name)
        obj._value_ = name
        obj.meaning = meaning
        return obj

    ATTACK = ("attack", "registered attack name")
    LABEL = ("label", "attack configuration label (explicit label:, or name + params digest)")
    TARGET = ("target", "attacked party")
    OBSERVER = ("observer", "who observed the messages")
    ISOLATION = ("isolation", "the sandbox level the attack ran under (testbed.sandbox.confine)")
    FAILED = ("failed", "the phase an attack failed in (a failure row: no scores)")
    REASON = ("reason", "one line saying why the attack failed")
    KIND = ("kind", "attack output kind: points, scores, words, histogram")
    METHOD = ("method", "the attack's method note (AttackOutput.meta['method'])")
    SCORE = ("score", "the membership score's name (AttackOutput.meta['score'])")
    SOURCE = ("source", "attacks-<tag>.json of a `testbed attack` re-run")
    POPULATION_METHOD = ("population_method", "where the population rows come from")
    EPS_METHOD = ("eps_method", "how eps_lower was computed")


class Metric(StrEnum):
    """A number a results file holds, with its meaning, direction and row kind."""

    def __new__(cls, name: str, meaning: str, higher: bool | None, row: str = ATTACK):
        obj = str.__new__(cls, name)
        obj._value_ = name
        obj.meaning = meaning
        obj.higher = higher
        obj.row = row
        return obj

    # --- attack rows (results.json ``attacks``): points
    W2 = ("w2", "W2(reconstruction, private data)", False)
    W2_BASELINE = ("w2_baseline", "W2(prior-only baseline, private data)", None)
    W2_RATIO = ("w2_ratio", "w2 / w2_baseline, unclipped (lower = more leakage)", False)
    LEAKAGE = ("leakage", "1 - w2_ratio clipped to [0, 1]", True)
    LEAKAGE_RAW = ("leakage_raw", "1 - w2_ratio unclipped (< 0: worse than the baseline)", True)
    LEAKAGE_CLIPPED = ("leakage_clipped", "1.0 when the clip to [0, 1] changed leakage", None)
    COVERAGE = (
        "coverage",
        "share of private rows with a reconstructed point within coverage_r",
        True,
    )
    COVERAGE_R = ("coverage_r", "median leave-one-out NN distance inside the private data", None)
    COVERAGE_BASELINE = ("coverage_baseline", "coverage of the prior-only baseline", None)
    EXACT_RECOVERY = (
        "exact_recovery",
        "share of private rows recovered within exact_recovery_tol",
        True,
    )
    EXACT_RECOVERY_TOL = ("exact_recovery_tol", "1e-6 x median private row norm", None)
    # recovery up to a transformation (OT matching, then the best fit)
    EXACT_RECOVERY_SIMILARITY = (
        "exact_recovery_similarity",
        "exact_recovery after the best similarity transform",
        True,
    )
    COVERAGE_SIMILARITY = (
        "coverage_similarity",
        "coverage after the best similarity transform",
        True,
    )
    EXACT_RECOVERY_AFFINE = (
        "exact_recovery_affine",
        "exact_recovery after the best affine map",
        True,
    )
    COVERAGE_AFFINE = ("coverage_affine", "coverage after the best affine map", True)
    # the same against population rows (rows of the same distribution no party holds)
    POPULATION_ROWS = (
        "population_rows",
        "population rows the figures below were computed on",
        None,
    )
    COVERAGE_POPULATION = (
        "coverage_population",
        "coverage of population subsets of the target's size",
        None,
    )
    COVERAGE_POPULATION_HI = (
        "coverage_population_hi",
        "97.5 % quantile of coverage over population subsets",
        None,
    )
    EXACT_RECOVERY_POPULATION = (
        "exact_recovery_population",
        "exact_recovery of population subsets",
        None,
    )
    EXACT_RECOVERY_SIMILARITY_POPULATION = (
        "exact_recovery_similarity_population",
        "exact_recovery_similarity on population",
        None,
    )
    COVERAGE_SIMILARITY_POPULATION = (
        "coverage_similarity_population",
        "coverage_similarity on population",
        None,
    )
    EXACT_RECOVERY_AFFINE_POPULATION = (
        "exact_recovery_affine_population",
        "exact_recovery_affine on population",
        None,
    )
    COVERAGE_AFFINE_POPULATION = (
        "coverage_affine_population",
        "coverage_affine on population",
        None,
    )
    W2_POPULATION = (
        "w2_population",
        "W2(reconstruction, population subset of the target's size)",
        None,
    )
    LEAKAGE_POPULATION = (
        "leakage_population",
        "leakage scored against population rows instead",
        None,
    )
    RECORD_P = (
        "record_p",
        "permutation p-value: closer to the target's rows than to the population",
        None,
    )
    RECORD_LEAK = (
        "record_leak",
        "1 when a leak of the target's rows is claimed (record level); absent when the record test did not run (no population rows, no exact recovery)",
        None,
    )
    RECORD_LEAKAGE = (
        "record_leakage",
        "largest excess of a record figure over the population's (0 unless record_leak)",
        True,
    )
    # words
    MATCHING_RATE = ("matching_rate", "share of retrieved words in the target's document", True)
    MATCHING_RATE_ANY = (
        "matching_rate_any",
        "share of retrieved words in any party's document",
        True,
    )
    MATCHING_RATE_BASELINE = (
        "matching_rate_baseline",
        "matching_rate of the prior-only baseline",
        None,
    )
    MATCHING_RATE_ANY_BASELINE = (
        "matching_rate_any_baseline",
        "matching_rate_any of the prior-only baseline",
        None,
    )
    N_WORDS = ("n_words", "retrieved words", None)
    PRECISION_AT_K = (
        "precision_at_k",
        "mean share of a shared point's top-k words in the document",
        True,
    )
    K = ("k", "k of precision_at_k", None)
    # scores (membership)
    AUC = ("auc", "membership ROC-AUC", True)
    TPR_AT_1PCT_FPR = (
        "tpr_at_1pct_fpr",
        "largest TPR with FPR <= 1 % (floor 1/#non-members)",
        True,
    )
    TPR_AT_0_1PCT_FPR = (
        "tpr_at_0_1pct_fpr",
        "largest TPR with FPR <= 0.1 % (floor 1/#non-members)",
        True,
    )
    ALPHA_USED_1PCT = (
        "alpha_used_1pct",
        "FPR level used for tpr_at_1pct_fpr (after the floor)",
        None,
    )
    ALPHA_USED_0_1PCT = (
        "alpha_used_0_1pct",
        "FPR level used for tpr_at_0_1pct_fpr (after the floor)",
        None,
    )
    ADVANTAGE = ("advantage", "max(TPR - FPR)", True)
    N_MEMBERS = ("n_members", "member candidates", None)
    N_NONMEMBERS = ("n_nonmembers", "non-member candidates", None)
    BASELINE_AUC = (
        "baseline_auc",
        "AUC of the prior-only baseline (its own candidate order)",
        None,
    )
    BASELINE_TPR_AT_1PCT_FPR = (
        "baseline_tpr_at_1pct_fpr",
        "tpr_at_1pct_fpr of the prior-only baseline",
        None,
    )
    EPS_LOWER = (
        "eps_lower",
        "audited epsilon lower bound (held-out threshold, Clopper-Pearson)",
        True,
    )
    EPSILON_LB = ("epsilon_lb", "same as eps_lower (older name)", None)
    CLAIMED_EPSILON = ("claimed_epsilon", "the ledger's epsilon for the target (delta 1e-5)", None)
    EPSILON_CLAIMED = ("epsilon_claimed", "the ledger's epsilon for the target (delta 1e-5)", None)
    # histogram
    TV = ("tv", "total variation to the target's label histogram", False)
    TV_BASELINE = ("tv_baseline", "tv of the prior-only baseline", None)
    # --- the accuracy of one estimate (results.json ``accuracy``, ``accuracy_headline``)
    ESTIMATE = ("estimate", "the protocol's estimate", None, ACCURACY)
    EXACT = ("exact", "the central reference (exact POT)", None, ACCURACY)
    RELATIVE_ERROR = ("relative_error", "|estimate - exact| / |exact|", None, ACCURACY)
    SIGNED_RELATIVE_ERROR = (
        "signed_relative_error",
        "(estimate - exact) / exact (of the sums for arrays): the direction of a bias",
        None,
        ACCURACY,
    )
    # --- task utility (results.json ``utility``)
    DISTANCE_ACCURACY = ("distance_accuracy", "1 - the headline relative error", None, UTILITY)
    # --- the run (results.json)
    PRIVACY_EPSILON = (
        "privacy_epsilon",
        "the worst claimed epsilon over the parties that sent anything (inf: no claim)",
        None,
        RUN,
    )
