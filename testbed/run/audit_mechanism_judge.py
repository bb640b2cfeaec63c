"""The mechanism audit's verdict: every check of :mod:`testbed.run.audit_mechanism` on the
releases its trials recorded (pure: no protocol runs here)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from scipy import stats

from testbed.exchange.ledger import MechanismEvent
from testbed.scoring.mechanism_checks import correlation_pvalue, noise_scale_test
from testbed.scoring.membership import gdp_epsilon

__all__ = ["CHECKS", "STATISTICAL", "MechanismAudit", "Release", "judge"]

#: every check, by the name its findings carry
CHECKS = {
    "noise": "the noise at each charged field is at least the charged σ",
    "independence": "the noise is fresh across trials, rounds and atoms",
    "charged": "every field that moves with the private row is charged",
    "unnoised": "every charged field carries noise",
    "sensitivity": "no charged field moves by more than its charged sensitivity",
    "structure": "which messages and fields are sent does not move with the private row",
    "epsilon": "the μ-GDP of the measured shifts and noise stays within the claim",
}
#: the checks that are statistical tests (the others are exact)
STATISTICAL = frozenset({"noise", "independence"})


@dataclass(frozen=True)
class Release:
    """One message the audited party sent in one run: its numeric fields before the defenses
    (``pre``) and as delivered (``post``), and the ledger events the defenses made for it."""

    kind: str
    round: int
    pre: dict
    post: dict
    events: tuple[MechanismEvent, ...]


@dataclass(frozen=True)
class MechanismAudit:
    """One party's mechanism audit. ``verdict``: "VIOLATION" (``findings`` say what failed),
    "holds" (every check ran and could have failed: ``checks`` state what each would have
    caught) or "not audited" (``reason``). ``audited_epsilon``: ε at ``delta`` of the μ-GDP that
    the measured shifts and the noise's upper confidence bounds make, composed over the releases
    of the worst trial (a lower bound on the mechanism's ε when its noise is the independent
    Gaussian noise the other checks test); ``ceiling_epsilon``: the same at the charged σ, the
    most these neighbouring datasets can show of a correct claim."""

    party: str
    verdict: str
    reason: str
    claimed_epsilon: float = math.inf
    delta: float = 1e-5
    audited_epsilon: float = 0.0
    ceiling_epsilon: float = 0.0
    mu_hat: float = 0.0
    trials: int = 0
    findings: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()  # the names (of CHECKS) of the checks that failed


def _charges(rel: Release, f: str) -> list[MechanismEvent]:
    return [e for e in rel.events if e.field in (f, "")]


def _where(rel: Release, f: str) -> str:
    return f"field {f} of {rel.kind} (round {rel.round})"


class _Tally:
    """What the trials showed, gathered release by release."""

    def __init__(self):
        self.noise = defaultdict(list)  # (kind, field, sigma) -> [post - pre]
        self.corr = {k: [0.0, 0.0] for k in ("trials", "rounds", "atoms")}  # Σab, Σ(ab)²
        self.findings: dict[str, tuple[int, str]] = {}  # text -> (count, check)
        self.shift_terms: list[list[tuple[tuple, float]]] = []  # per compared run
        self.moved = 0
        self.worst_ratio = 0.0

    def find(self, check: str, text: str) -> None:
        """A failed check (one of :data:`CHECKS`) and what it saw."""
        n, _ = self.findings.get(text, (0, check))
        self.findings[text] = (n + 1, check)

    def pair_up(self, key: str, a: np.ndarray, b: np.ndarray) -> None:
        p = a.ravel() * b.ravel()
        self.corr[key][0] += float(p.sum())
        self.corr[key][1] += float((p * p).sum())

    def release(self, rel: Release) -> dict:
        """Noise samples of one release; returns its noise arrays by field."""
        out = {}
        for f, post in rel.post.items():
            pre = rel.pre.get(f)
            evs = _charges(rel, f)
            if pre is None or pre.shape != post.shape or not evs:
                continue
            n = post - pre
            out[f] = n
            self.noise[(rel.kind, f, float(f"{evs[0].sigma:.12g}"))].append(n.ravel())
            if n.ndim == 2 and n.shape[0] >= 2:
                self.pair_up("atoms", n[:-1], n[1:])
        return out

    def run(self, rels: list[Release]) -> list[dict]:
        noises = [self.release(r) for r in rels]
        last: dict[tuple, np.ndarray] = {}
        for rel, ns in zip(rels, noises, strict=True):
            for f, n in ns.items():
                prev = last.get((rel.kind, f))
                if prev is not None and prev.shape == n.shape and n.size > 1:
                    self.pair_up("rounds", prev, n)
                last[(rel.kind, f)] = n
        return noises

    def compare(self, rels0: list[Release], rels1: list[Release]) -> None:
        """The coupled neighbour: every field's shift, charged or not."""
        terms: list[tuple[tuple, float]] = []
        if len(rels0) != len(rels1):
            self.find(
                "structure", "the number of messages the party sends moves with the private row"
            )
        for r0, r1 in zip(rels0, rels1, strict=False):
            if r0.kind != r1.kind:
                self.find("structure", f"the kind of message #{r0.kind} moves with the private row")
                break
            for f in sorted(set(r0.post) | set(r1.post)):
                a, b = r0.post.get(f), r1.post.get(f)
                if a is None or b is None or a.shape != b.shape:
                    self.find(
                        "structure",
                        f"{_where(r0, f)}: its presence or shape moves with the private row",
                    )
                    continue
                s2 = float(np.sum((b - a) ** 2))
                if s2 == 0.0:
                    continue
                evs = _charges(r0, f)
                if not evs:
                    self.find(
                        "charged",
                        f"{_where(r0, f)} moves with the private row and no noise is charged "
                        "for it (an unaccounted release: ε = ∞)",
                    )
                    continue
                self.moved += 1
                pre = r0.pre.get(f)
                if pre is not None and pre.shape == a.shape and np.array_equal(pre, a):
                    self.find(
                        "unnoised",
                        f"{_where(r0, f)} moves with the private row and is charged, but was "
                        "released without noise (ε = ∞)",
                    )
                    terms.append(((r0.kind, f, 0.0), math.inf))
                    continue
                e = evs[0]
                ratio = math.sqrt(s2) / e.sensitivity if e.sensitivity > 0 else math.inf
                self.worst_ratio = max(self.worst_ratio, ratio)
                if len(evs) == 1 and math.sqrt(s2) > e.sensitivity * (1 + 1e-9) + 1e-12:
                    self.find(
                        "sensitivity",
                        f"{_where(r0, f)} moved by {math.sqrt(s2):.4g} between neighbouring "
                        f"datasets, more than its charged sensitivity {e.sensitivity:.4g} "
                        "(is the clipping enforced?)",
                    )
                terms.append(((r0.kind, f, float(f"{e.sigma:.12g}")), s2))
        self.shift_terms.append(terms)


def _count(text: str, n: int) -> str:
    return text if n == 1 else f"{text} (in {n} releases)"


def _gather(runs) -> _Tally:
    """Every release of every run, tallied: noise, coupled shifts, noise of the same release in
    consecutive trials."""
    tally = _Tally()
    for per_trial in runs.values():
        prev: list[dict] | None = None
        for rels0, ones in per_trial:
            noises = tally.run(rels0)
            for rels1 in ones:  # its noise is rels0's (coupled): compared, never counted twice
                tally.compare(rels0, rels1)
            if prev is not None:  # the same release in two trials: fresh noise each time
                for n0, n1 in zip(prev, noises, strict=False):
                    for f in n0.keys() & n1.keys():
                        if n0[f].shape == n1[f].shape and n0[f].size > 1:
                            tally.pair_up("trials", n0[f], n1[f])
            prev = noises
    return tally


_WHAT = {
    "trials": "trials with the same public inputs (noise reproducible from public values?)",
    "rounds": "rounds (a noise draw reused?)",
    "atoms": "atoms of one release (one noise vector shared?)",
}


def _tests(tally: _Tally, level: float) -> tuple[dict, dict]:
    """The statistical checks at ``level`` each: noise scale per charged field, independence."""
    scales = {}
    for (kind, f, sigma), diffs in sorted(tally.noise.items()):
        s = noise_scale_test(np.concatenate(diffs), sigma, level)
        scales[(kind, f, sigma)] = s
        if s.short(level):
            tally.find(
                "noise",
                f"field {f} of {kind}: noise σ̂ = {s.measured:.4g} below the charged σ = "
                f"{sigma:.4g} (p = {s.p_value:.2g}, {s.samples} samples)",
            )
    zs = {}
    for key, (num, den) in tally.corr.items():
        z = num / math.sqrt(den) if den > 0 else 0.0
        zs[key] = z
        if den > 0 and correlation_pvalue(z) < level:
            tally.find(
                "independence", f"the noise is not independent across {_WHAT[key]}: z = {z:.3g}"
            )
    return scales, zs


def _statements(tally, scales, zs, zthr, eps_hat, claimed, ceiling) -> tuple[str, ...]:
    """What each check could have caught on this audit (its power), and what it saw."""
    power = ", ".join(
        f"≥ {100 * s.detectable:.2g} % at {f} of {kind} (σ = {sigma:.3g})"
        for (kind, f, sigma), s in sorted(scales.items(), key=lambda kv: kv[1].detectable)
    )
    return (
        f"noise at {len(scales)} charged field(s) at least the charged σ (flags a shortfall "
        f"{power})",
        f"noise independent across trials, rounds and atoms (flags |z| > {zthr:.3g}; "
        + ", ".join(f"{k} z = {v:.2g}" for k, v in zs.items())
        + ")",
        f"every field that moved with the private row was charged and within its sensitivity "
        f"({tally.moved} field releases; largest shift {tally.worst_ratio:.3g} of the charged "
        "sensitivity)",
        f"ε̂ = {eps_hat:.3g} ≤ claimed ε = {claimed:.3g} (these neighbours reach "
        f"{ceiling:.3g} at the charged noise)",
    )


def judge(
    party, runs, claimed, delta, confidence, trials, notes, disabled=frozenset()
) -> MechanismAudit:
    """The verdict on ``runs`` (pair name -> per trial: (world-0 releases, [coupled
    neighbours' releases])); ``claimed``: the ledger's ε for ``party`` on its real rows.
    ``disabled``: checks (of :data:`CHECKS`) whose findings are dropped — for showing that each
    check is the one that catches its bugs (tests/test_mechanism_audit.py), never a user's
    option."""
    if claimed is None or not math.isfinite(claimed):
        return MechanismAudit(
            party,
            "not audited",
            "no claim (the defenses on it charge the ledger nothing)",
            delta=delta,
            trials=trials,
        )
    tally = _gather(runs)
    n_tests = len(tally.noise) + len(tally.corr)
    level = (1.0 - confidence) / max(n_tests, 1)
    scales, zs = _tests(tally, level)
    mu2 = mu2c = 0.0
    for terms in tally.shift_terms:
        hi = sum(
            s2 / scales[k].upper ** 2 if k in scales and scales[k].upper > 0 else math.inf
            for k, s2 in terms
        )
        mu2 = max(mu2, hi)
        mu2c = max(mu2c, sum(s2 / k[2] ** 2 for k, s2 in terms if k[2] > 0))
    mu_hat = math.sqrt(mu2)
    eps_hat = gdp_epsilon(mu_hat, delta) if math.isfinite(mu_hat) else math.inf
    ceiling = gdp_epsilon(math.sqrt(mu2c), delta)
    if eps_hat > claimed:
        tally.find(
            "epsilon", f"the measured mechanism gives ε̂ = {eps_hat:.3g} > the claimed {claimed:.3g}"
        )
    kept = {t: v for t, v in tally.findings.items() if v[1] not in disabled}
    findings = tuple(_count(t, n) for t, (n, _) in kept.items())
    failed = tuple(sorted({check for _, check in kept.values()}))
    zthr = float(stats.norm.isf(level / 2))
    checks = (*_statements(tally, scales, zs, zthr, eps_hat, claimed, ceiling), *notes)
    c = f"{100 * confidence:g} %"
    if findings:
        verdict = "VIOLATION"
        reason = f"the claim ε = {claimed:.3g} is refuted at {c}: " + "; ".join(findings)
    elif not scales:
        verdict = "not audited"
        reason = f"no charged release of {party} carried noise the audit could read"
    else:
        verdict = "holds"
        lo = min(s.detectable for s in scales.values())
        hi = max(s.detectable for s in scales.values())
        reason = (
            f"the claim ε = {claimed:.3g} holds at {c}: ε̂ ≥ {eps_hat:.3g} (these neighbours "
            f"reach {ceiling:.3g} at the charged noise); the noise at {len(scales)} charged "
            f"field(s) is at least the charged σ (a shortfall of {100 * lo:.2g}–{100 * hi:.2g} % "
            f"would have been flagged) and independent (|z| ≤ {zthr:.3g}); every field that "
            "moved with the private row was charged and within its sensitivity"
        )
    return MechanismAudit(
        party,
        verdict,
        reason,
        claimed,
        delta,
        eps_hat,
        ceiling,
        mu_hat,
        trials,
        findings,
        checks,
        failed,
    )
