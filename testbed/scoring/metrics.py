"""Pinned metric definitions (DESIGN.md, "Metrics"). Accuracy metrics live here; leakage metrics
are added beside them and are the only code that sees ground truth."""

from __future__ import annotations

import math

import numpy as np

from testbed.errors import TestbedError


class MetricError(TestbedError):
    """A metric cannot be computed from what it was given (e.g. one class only for an AUC)."""


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


def relative_error(estimate: float, exact: float) -> float:
    """:math:`|\\hat W - W| / W` (``inf`` when W = 0 and the estimate is not)."""
    if exact == 0:
        return 0.0 if estimate == 0 else math.inf
    return abs(estimate - exact) / abs(exact)


def mean_ci(values, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and a Student-t ``level`` interval over seeds: ``(mean, low, high)``."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return (math.nan, math.nan, math.nan)
    m = float(v.mean())
    if v.size == 1:
        return (m, m, m)
    from scipy import stats

    half = float(stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return (m, m - half, m + half)


def detection_metrics(scores, mask) -> dict[str, float]:
    """Noisy-point detection quality of per-row ``scores`` (higher = more likely noisy) against
    the ground-truth boolean ``mask``: ROC-AUC (sklearn), precision and recall when flagging the
    top-k rows with k = the true number of noisy rows, and precision/recall of the sign rule
    (score > 0) that the FedBary/TriangleWad papers use."""
    from sklearn.metrics import roc_auc_score

    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(mask, dtype=bool).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"detection: {s.size} scores for {y.size} rows")
    k = int(y.sum())
    out: dict[str, float] = {"rows": float(y.size), "noisy": float(k)}
    if k == 0 or k == y.size:
        out["roc_auc"] = math.nan  # undefined with one class only
    else:
        out["roc_auc"] = float(roc_auc_score(y, s))
    if k > 0:
        top = np.argsort(-s, kind="stable")[:k]
        tp = float(y[top].sum())
        out["precision_at_rate"] = tp / k
        out["recall_at_rate"] = tp / k
    flagged = s > 0
    out["flagged_at_zero"] = float(flagged.sum())
    out["precision_at_zero"] = float(y[flagged].mean()) if flagged.any() else math.nan
    out["recall_at_zero"] = float(flagged[y].mean()) if k > 0 else math.nan
    return out


# ----------------------------------------------------------------------------- leakage
def w2_leakage(
    points, weights, truth, baseline_points=None, baseline_weights=None
) -> dict[str, float]:
    """Distributional leakage: ``W2(nu_hat, nu)``, its ratio to the prior-only baseline's
    ``W2(baseline, nu)`` (``w2_ratio``, lower = more leakage, unclipped), the normalised leakage
    ``leakage_raw = 1 - ratio`` (negative when the attack is worse than the baseline) and
    ``leakage`` = that clipped to [0, 1], with ``leakage_clipped`` = 1.0 when the clip changed it."""
    from testbed import ot as tot
    from testbed.measure import Measure

    nu = Measure(truth)
    w = tot.wasserstein(Measure(points, weights), nu)
    out = {"w2": w}
    if baseline_points is not None:
        wb = tot.wasserstein(Measure(baseline_points, baseline_weights), nu)
        ratio = w / wb if wb > 0 else math.inf
        raw = 1.0 - ratio
        clipped = float(np.clip(raw, 0.0, 1.0))
        out.update(
            {
                "w2_baseline": wb,
                "w2_ratio": ratio,
                "leakage_raw": raw,
                "leakage": clipped,
                "leakage_clipped": float(clipped != raw),
            }
        )
    return out


def median_loo_nn_distance(X) -> float:
    """Median leave-one-out nearest-neighbour distance inside ``X`` (the radius of coverage@r)."""
    from sklearn.neighbors import NearestNeighbors

    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] < 2:
        raise MetricError(f"median leave-one-out distance needs >= 2 rows, got {X.shape[0]}")
    dist, _ = NearestNeighbors(n_neighbors=2).fit(X).kneighbors(X)
    return float(np.median(dist[:, 1]))


def _nn_distance(truth, recon, k: int = 4) -> np.ndarray:
    """Distance from every row of ``truth`` to its nearest row of ``recon``.

    The neighbour search (sklearn) may use the expansion |x|² − 2x·y + |y|², whose rounding
    error (~1e-8 relative to |x|², i.e. ~1e-6 for rows of norm 60) depends on the BLAS and its
    thread count. The ``k`` nearest candidates it returns are therefore re-measured as
    ``‖x − y‖`` from the difference, which is exact to the rows' own rounding and the same for
    any number of threads."""
    from sklearn.neighbors import NearestNeighbors

    truth = np.asarray(truth, dtype=np.float64)
    recon = np.asarray(recon, dtype=np.float64)
    if recon.ndim != 2 or recon.shape[0] == 0:
        return np.full(truth.shape[0], math.inf)
    if recon.shape[1] != truth.shape[1]:
        raise MetricError(
            f"reconstruction has dimension {recon.shape[1]}, private data {truth.shape[1]}"
        )
    finite = np.all(np.isfinite(recon), axis=1)
    if not finite.any():
        return np.full(truth.shape[0], math.inf)
    R = recon[finite]
    kk = min(k, R.shape[0])
    _, idx = NearestNeighbors(n_neighbors=kk).fit(R).kneighbors(truth)
    diff = truth[:, None, :] - R[idx]
    return np.sqrt(np.einsum("ikd,ikd->ik", diff, diff)).min(axis=1)


def coverage_at_r(recon, truth, r: float | None = None) -> dict[str, float]:
    """coverage@r: share of private rows with a reconstructed point within ``r``.

    ``r`` defaults to the median leave-one-out nearest-neighbour distance inside ``truth``
    (DESIGN.md), so a reconstruction as good as "another private row" covers about half.
    """
    radius = median_loo_nn_distance(truth) if r is None else float(r)
    d = _nn_distance(truth, recon)
    return {"coverage": float(np.mean(d <= radius)), "coverage_r": radius}


#: exact recovery: a private row counts as recovered when a reconstructed point lies within
#: this fraction of the private data's median row norm (DESIGN.md, Metrics)
EXACT_RECOVERY_REL_TOL = 1e-6


def exact_recovery_tolerance(truth, rel_tol: float = EXACT_RECOVERY_REL_TOL) -> float:
    """``rel_tol`` × the median Euclidean row norm of ``truth`` (the data's scale); when every
    row is zero, ``rel_tol`` itself (an absolute floor, so the tolerance is never 0)."""
    med = float(np.median(np.linalg.norm(np.asarray(truth, dtype=np.float64), axis=1)))
    return rel_tol * (med if med > 0 else 1.0)


def exact_recovery_rate(recon, truth, rel_tol: float = EXACT_RECOVERY_REL_TOL) -> float:
    """Share of private rows with a reconstructed point within
    :func:`exact_recovery_tolerance` (``rel_tol`` × median private row norm), with distances
    computed from differences (independent of BLAS threads; see :func:`_nn_distance`)."""
    tol = exact_recovery_tolerance(truth, rel_tol)
    return float(np.mean(_nn_distance(truth, recon) <= tol))


def matching_rate(words, document) -> float:
    """Share of retrieved words (top-1, one per shared support point) present in the document."""
    words = list(words)
    if not words:
        return 0.0
    doc = set(document)
    return float(np.mean([w in doc for w in words]))


def precision_at_k(ranked, document, k: int) -> float:
    """Mean over shared points of the share of its top-``k`` retrieved words in the document.

    ``ranked`` is one ranked word list per shared point (best first); lists shorter than ``k``
    count their missing slots as misses.
    """
    if k < 1:
        raise MetricError(f"precision_at_k: k must be >= 1, got {k}")
    ranked = list(ranked)
    if not ranked:
        return 0.0
    doc = set(document)
    return float(np.mean([sum(w in doc for w in list(r)[:k]) / k for r in ranked]))


def tv_distance(p, q) -> float:
    """Total-variation distance :math:`\\frac12 \\sum_i |p_i - q_i|` between two histograms.

    Both are normalised to sum 1; the shorter one is padded with zeros."""
    p = np.asarray(p, dtype=np.float64).ravel()
    q = np.asarray(q, dtype=np.float64).ravel()
    for name, h in (("p", p), ("q", q)):
        if np.any(h < 0) or not np.all(np.isfinite(h)) or h.sum() <= 0:
            raise MetricError(f"tv_distance: {name} must be a nonnegative histogram with mass")
    n = max(p.size, q.size)
    p = np.pad(p, (0, n - p.size)) / p.sum()
    q = np.pad(q, (0, n - q.size)) / q.sum()
    return float(np.clip(0.5 * np.abs(p - q).sum(), 0.0, 1.0))


def _roc(scores, is_member):
    from sklearn.metrics import roc_curve

    s = np.asarray(scores, dtype=np.float64).ravel()
    m = np.asarray(is_member).astype(bool).ravel()
    if s.shape != m.shape:
        raise MetricError(f"membership: {s.size} scores for {m.size} labels")
    if not np.all(np.isfinite(s)):
        raise MetricError("membership: scores must be finite")
    n_pos, n_neg = int(m.sum()), int((~m).sum())
    if n_pos == 0 or n_neg == 0:
        raise MetricError(f"membership: need members and non-members, got {n_pos} and {n_neg}")
    fpr, tpr, thr = roc_curve(m, s, drop_intermediate=False)
    return fpr, tpr, thr, n_pos, n_neg


def tpr_at_fpr(fpr, tpr, alpha: float, n_neg: int) -> tuple[float, float]:
    """Largest TPR on the ROC with FPR <= alpha; below the resolution 1/n_neg the floor
    ``alpha = 1/n_neg`` is used instead (never NaN). Returns ``(tpr, alpha_used)``."""
    used = max(float(alpha), 1.0 / n_neg)
    ok = fpr <= used + 1e-12
    return float(np.max(tpr[ok])), used


def membership_metrics(scores, is_member) -> dict[str, float]:
    """Membership-inference metrics (DESIGN.md): ROC-AUC, TPR at 1 % and 0.1 % FPR, advantage.

    Higher score = "more likely a member". Ties are handled by sklearn's ``roc_curve`` (tied
    scores move together). TPR@α is the largest TPR with FPR ≤ α; when α < 1/#non-members the
    floor 1/#non-members is used and reported as ``alpha_used_*``. Advantage is max(TPR − FPR).
    """
    from sklearn.metrics import roc_auc_score

    fpr, tpr, _, n_pos, n_neg = _roc(scores, is_member)
    t1, a1 = tpr_at_fpr(fpr, tpr, 0.01, n_neg)
    t01, a01 = tpr_at_fpr(fpr, tpr, 0.001, n_neg)
    m = np.asarray(is_member).astype(bool).ravel()
    return {
        "auc": float(roc_auc_score(m, np.asarray(scores, dtype=np.float64).ravel())),
        "tpr_at_1pct_fpr": t1,
        "tpr_at_0_1pct_fpr": t01,
        "alpha_used_1pct": a1,
        "alpha_used_0_1pct": a01,
        "advantage": float(np.max(tpr - fpr)),
        "n_members": float(n_pos),
        "n_nonmembers": float(n_neg),
    }


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper–Pearson lower bound of a binomial proportion: P(p < bound) <= alpha."""
    from scipy.stats import beta

    return 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper–Pearson upper bound of a binomial proportion: P(p > bound) <= alpha."""
    from scipy.stats import beta

    return 1.0 if k == n else float(beta.ppf(1 - alpha, k + 1, n - k))


def _cp_bounds(k: int, n: int, confidence: float) -> tuple[float, float]:
    """One-sided lower and upper Clopper–Pearson bounds, each at ``1 - (1 - confidence)/2``
    (so both hold together with ``confidence``)."""
    a = (1.0 - confidence) / 2
    return clopper_pearson_lower(k, n, a), clopper_pearson_upper(k, n, a)


def gdp_mu_lower_bound(
    tpr: float, fpr: float, n_members: int, n_nonmembers: int, confidence: float = 0.95
) -> float:
    r"""Lower bound on μ of any μ-GDP mechanism (Dong, Roth & Su, "Gaussian differential
    privacy") that could produce this operating point: every test of a μ-GDP mechanism has
    TPR <= Φ(Φ⁻¹(FPR) + μ), so with one-sided Clopper–Pearson bounds (TPR low, FPR high, jointly
    at ``confidence``) :math:`\mu \ge \Phi^{-1}(\underline{TPR}) - \Phi^{-1}(\overline{FPR})`,
    clipped at 0. A Gaussian-mechanism claim with noise multiplier z per release is
    μ = 1/z-GDP (composition: √Σ 1/z²), so μ bound > claimed μ refutes the claimed noise."""
    from scipy.stats import norm

    if n_members < 1 or n_nonmembers < 1:
        raise MetricError("gdp_mu_lower_bound: need at least one member and one non-member")
    tp = int(round(tpr * n_members))
    fp = int(round(fpr * n_nonmembers))
    tpr_lo, _ = _cp_bounds(tp, n_members, confidence)
    _, fpr_hi = _cp_bounds(fp, n_nonmembers, confidence)
    if tpr_lo <= 0.0 or fpr_hi >= 1.0:
        return 0.0
    return float(max(0.0, norm.ppf(tpr_lo) - norm.ppf(fpr_hi)))


def gdp_delta(mu: float, epsilon: float) -> float:
    r"""δ(ε) of μ-GDP: :math:`\Phi(-\varepsilon/\mu + \mu/2) - e^{\varepsilon}\Phi(-\varepsilon/\mu - \mu/2)`."""
    from scipy.stats import norm

    if mu <= 0:
        return 0.0
    return float(
        norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2)
    )


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest ε with δ(ε) <= ``delta`` for μ-GDP (0 when μ = 0)."""
    from scipy.optimize import brentq

    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta:
        hi *= 2
    return float(brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-10))


def epsilon_lower_bound(
    tpr: float,
    fpr: float,
    n_members: int,
    n_nonmembers: int,
    delta: float = 0.0,
    confidence: float = 0.95,
) -> float:
    """Empirical ε lower bound from one attack operating point (Jagielski et al. 2020).

    An (ε, δ)-DP mechanism forces every test to satisfy TPR ≤ e^ε FPR + δ and
    1 − FPR ≤ e^ε (1 − TPR) + δ. With TPR and FPR replaced by their Clopper–Pearson bounds
    (TPR low, FPR high, at ``confidence``), the bound that holds with that confidence is

    .. math:: \\varepsilon \\ge \\max\\Big(\\log\\frac{\\underline{TPR}-\\delta}{\\overline{FPR}},
              \\log\\frac{1-\\delta-\\overline{FPR}}{1-\\underline{TPR}}\\Big)

    clipped at 0 (0 = no evidence of leakage). ``tpr`` and ``fpr`` are rates over
    ``n_members`` and ``n_nonmembers`` trials; they are rounded to counts.
    """
    if n_members < 1 or n_nonmembers < 1:
        raise MetricError("epsilon_lower_bound: need at least one member and one non-member")
    if not (0.0 <= tpr <= 1.0 and 0.0 <= fpr <= 1.0):
        raise MetricError(f"epsilon_lower_bound: rates must be in [0, 1], got {tpr}, {fpr}")
    tp = int(round(tpr * n_members))
    fp = int(round(fpr * n_nonmembers))
    tpr_lo, _ = _cp_bounds(tp, n_members, confidence)
    _, fpr_hi = _cp_bounds(fp, n_nonmembers, confidence)
    best = 0.0
    if tpr_lo - delta > 0 and fpr_hi > 0:
        best = max(best, math.log((tpr_lo - delta) / fpr_hi))
    if 1 - delta - fpr_hi > 0 and tpr_lo < 1:
        best = max(best, math.log((1 - delta - fpr_hi) / (1 - tpr_lo)))
    return float(best)


def epsilon_lower_bound_from_scores(
    scores, is_member, delta: float = 0.0, confidence: float = 0.95
) -> dict[str, float]:
    """ε lower bound maximised over every threshold of the ROC.

    Picking the best threshold on the same scores is optimistic (a selection effect); for an
    audit that must hold, choose the threshold on held-out scores and call
    :func:`epsilon_lower_bound` on fresh ones. Returns the bound and its operating point.
    """
    fpr, tpr, _, n_pos, n_neg = _roc(scores, is_member)
    best = {"epsilon_lb": 0.0, "tpr": 0.0, "fpr": 0.0}
    for f, t in zip(fpr, tpr):
        e = epsilon_lower_bound(float(t), float(f), n_pos, n_neg, delta, confidence)
        if e > best["epsilon_lb"]:
            best = {"epsilon_lb": e, "tpr": float(t), "fpr": float(f)}
    return best


def score_attack(output, baseline, truth) -> dict:
    """Score one :class:`~attacks.AttackOutput` against ``truth`` (a
    :class:`~testbed.scoring.truth.GroundTruth`, which only the scorer receives) and,
    next to it, the prior-only baseline's output of the same kind and target.

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
            )
        )
        row.update(coverage_at_r(output.points, truth.X))
        row["exact_recovery"] = exact_recovery_rate(output.points, truth.X)
        row["exact_recovery_tol"] = exact_recovery_tolerance(truth.X)
        if baseline is not None:
            row["coverage_baseline"] = coverage_at_r(baseline.points, truth.X, row["coverage_r"])[
                "coverage"
            ]
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


# ----------------------------------------------------------------------------- issue 5 block
# Membership over public candidate rows and label-histogram inference (sinkhorn_distillation).
def _rows_in(candidates, X, decimals: int = 9) -> np.ndarray:
    """Boolean mask: which candidate rows are rows of ``X`` (after rounding)."""
    keys = {np.round(np.asarray(r, np.float64), decimals).tobytes() for r in np.atleast_2d(X)}
    C = np.round(np.atleast_2d(np.asarray(candidates, np.float64)), decimals)
    return np.array([r.tobytes() in keys for r in C], dtype=bool)


#: how :func:`heldout_epsilon_lb` bounds ε (written next to every audited bound)
HELDOUT_METHOD = (
    "threshold chosen on the even-indexed trials, bound from the odd-indexed ones; one-sided "
    "Clopper-Pearson bounds (TPR lower, FPR upper, each at 1 - (1 - confidence)/2)"
)


def heldout_epsilon_lb(scores, is_member, delta: float = 0.0, confidence: float = 0.95) -> dict:
    """ε lower bound without selection bias: the threshold is chosen (best bound) on the even
    trials and the bound is evaluated with Clopper-Pearson on the odd ones (never the trials
    that chose it). Returns ``epsilon_lb``, the held-out ``tpr``/``fpr``, the ``threshold`` and
    the ``method`` (:data:`HELDOUT_METHOD`)."""
    s = np.asarray(scores, np.float64)
    m = np.asarray(is_member, bool)
    fit, ev = np.arange(s.size) % 2 == 0, np.arange(s.size) % 2 == 1
    out = {"epsilon_lb": 0.0, "tpr": 0.0, "fpr": 0.0, "threshold": math.inf}
    out["method"] = HELDOUT_METHOD
    if min(m[fit].sum(), (~m[fit]).sum(), m[ev].sum(), (~m[ev]).sum()) == 0:
        return out
    fpr, tpr, thr, _, _ = _roc(s[fit], m[fit])
    best_t, best = math.inf, -1.0
    for f, t, th in zip(fpr, tpr, thr):
        e = epsilon_lower_bound(float(t), float(f), int(m[fit].sum()), int((~m[fit]).sum()), delta)
        if e > best:
            best, best_t = e, th
    pred = s[ev] >= best_t
    t_ev = float(pred[m[ev]].mean())
    f_ev = float(pred[~m[ev]].mean())
    e = epsilon_lower_bound(t_ev, f_ev, int(m[ev].sum()), int((~m[ev]).sum()), delta, confidence)
    out.update({"epsilon_lb": e, "tpr": t_ev, "fpr": f_ev, "threshold": float(best_t)})
    return out


def membership_labels(candidates, target: str, truth) -> np.ndarray:
    """Member flags of ``candidates`` for ``target``: the ground truth's labels when the attack
    scored the candidates the testbed supplied (the scenario's ``membership:`` pool, or the
    protocol's own experiment such as distillation's audit rows, decided by dataset row
    indices); only for candidate rows the testbed did not supply (a plugin's own) are members
    found by comparing rows with the target's data."""
    pool = getattr(truth, "candidates", {}) or {}
    labels = truth.membership or {}
    if target in pool and target in labels:
        if np.array_equal(np.asarray(pool[target]), np.asarray(candidates)):
            return np.asarray(labels[target], bool)
    return _rows_in(candidates, truth.parties[target].X)


def score_membership(output, baseline, truth) -> dict:
    """Membership metrics of ``output.scores`` over ``output.meta['candidates']``; members are
    the pool's labels (or the candidates that are rows of the target's private data). The
    baseline is scored with the labels of its own candidate order."""
    is_member = membership_labels(output.meta["candidates"], output.target, truth)
    out = membership_metrics(output.scores, is_member)
    audit = heldout_epsilon_lb(output.scores, is_member, delta=1e-5)
    out["epsilon_lb"] = audit["epsilon_lb"]
    out["eps_lower"] = out["epsilon_lb"]  # the key the report's claimed-vs-audited table reads
    out["eps_method"] = audit["method"]
    out["claimed_epsilon"] = truth.claimed(output.target)
    out["score"] = output.meta.get("score")
    if baseline is not None and baseline.scores is not None:
        b_cand = (baseline.meta or {}).get("candidates", output.meta["candidates"])
        b = membership_metrics(baseline.scores, membership_labels(b_cand, output.target, truth))
        out.update({"baseline_auc": b["auc"], "baseline_tpr_at_1pct_fpr": b["tpr_at_1pct_fpr"]})
    return out
