"""Membership inference and auditing (DESIGN.md, "Metrics"): ROC-AUC, TPR at low FPR,
advantage, Clopper-Pearson and GDP bounds, the empirical epsilon lower bound (held-out threshold)
and membership over public candidate rows (issue 5)."""

from __future__ import annotations

import math

import numpy as np

from testbed.scoring.errors import MetricError

__all__ = [
    "HELDOUT_METHOD",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "epsilon_lower_bound_from_scores",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_mu_lower_bound",
    "heldout_epsilon_lb",
    "membership_labels",
    "membership_metrics",
    "score_membership",
    "tpr_at_fpr",
]


def _roc(scores, is_member):
    from sklearn.metrics import roc_curve  # sklearn: report and transcript import scoring

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
    from sklearn.metrics import roc_auc_score  # sklearn: report and transcript import scoring

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
    from scipy.stats import beta  # scipy: report and transcript import scoring

    return 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper–Pearson upper bound of a binomial proportion: P(p > bound) <= alpha."""
    from scipy.stats import beta  # scipy: report and transcript import scoring

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
    from scipy.stats import norm  # scipy: report and transcript import scoring

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
    from scipy.stats import norm  # scipy: report and transcript import scoring

    if mu <= 0:
        return 0.0
    # the second term in log space: e^ε overflows for the ε of a large μ (μ = 40: ε ≈ 800)
    second = math.exp(min(700.0, epsilon + float(norm.logcdf(-epsilon / mu - mu / 2))))
    return float(max(0.0, norm.cdf(-epsilon / mu + mu / 2) - second))


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest ε with δ(ε) <= ``delta`` for μ-GDP (0 when μ = 0)."""
    from scipy.optimize import brentq  # scipy: report and transcript import scoring

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
    for other, rows in pool.items():
        if other != target and np.array_equal(np.asarray(rows), np.asarray(candidates)):
            raise MetricError(
                f"target mismatch: scores for {target!r} are over {other!r}'s candidate pool"
            )
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
