"""What one scored attack row shows, in words a reviewer can check (issue 22): a record leak, a
membership signal, or distributional inference, with the figure that says how much and the
baseline it is measured against. The scorecard's headline, the report's headline and the coverage
matrix read attack rows through :func:`verdict`, so they agree.

The rule for reconstructions (DESIGN.md, "Metrics", record-level leakage vs the population): a
leak of a party's rows is claimed only when the reconstruction is closer to that party's rows than
to population rows (``record_leak``, decided in :mod:`testbed.scoring.records`); its figure is
``record_leakage`` (1 for an exact copy). Otherwise the W2 leakage against the prior-only baseline
is distributional inference, shown beside what the same reconstruction scores against the
population. Without population rows (and without an exact recovery) the record test did not
run: the text says so and what was measured (:mod:`testbed.scoring.vocabulary`), never "no record
leak".

A membership signal is claimed when the AUC beats the prior-only attacker and chance, the latter
with a one-sided test at 5 % (:func:`auc_p_value`) when the row has its candidate counts: an
attack that applies to every protocol scores data-blind releases too, and 10 + 10 candidates
put an AUC of 0.69 within chance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from testbed.scoring.vocabulary import record_test_note

__all__ = [
    "ALPHA",
    "DISTRIBUTIONAL",
    "MEMBERSHIP",
    "NO_LEAK",
    "RECORD",
    "Verdict",
    "auc_p_value",
    "verdict",
]

RECORD = "record leak"
MEMBERSHIP = "membership inference"
DISTRIBUTIONAL = "distributional inference"
NO_LEAK = "no leak measured"


@dataclass(frozen=True)
class Verdict:
    """``kind`` (one of the constants above), the headline ``metric`` and its ``value``, the
    ``baseline`` it is measured against, and a one-line ``text``."""

    kind: str
    metric: str
    value: float | None
    baseline: str
    text: str

    @property
    def leak(self) -> bool:
        """A leak of a party's data (record level or membership), not distributional."""
        return self.kind in (RECORD, MEMBERSHIP)

    @property
    def rank(self) -> tuple[int, float]:
        """Sort key, larger = worse: record leaks, then membership, then distributional."""
        order = {RECORD: 3, MEMBERSHIP: 2, DISTRIBUTIONAL: 1}.get(self.kind, 0)
        v = self.value if self.value is not None and math.isfinite(self.value) else -math.inf
        return order, v


def _f(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def _num(row: Mapping[str, Any], key: str) -> float | None:
    v = row.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _points(row: Mapping[str, Any]) -> Verdict:
    cov, cov_pop, p = _num(row, "coverage"), _num(row, "coverage_population"), _num(row, "record_p")
    if row.get("record_leak"):
        ups = [
            f"up to {k} {_f(_num(row, f'exact_recovery_{k}'))}"
            for k in ("similarity", "affine")
            if _num(row, f"exact_recovery_{k}") is not None
        ]
        base = (
            f"population rows ({row.get('population_method')})"
            if cov_pop is not None
            else "exact recovery (no population rows)"
        )
        detail = f"exact recovery {_f(_num(row, 'exact_recovery'))}" + (
            f" ({', '.join(ups)})" if ups else ""
        )
        if cov_pop is not None:
            detail = f"coverage {_f(cov)} vs population {_f(cov_pop)}, p = {_f(p)}; " + detail
        v = _num(row, "record_leakage")
        return Verdict(RECORD, "record_leakage", v, base, f"record leak {_f(v)} ({detail})")
    v = _num(row, "leakage")
    pop = _num(row, "leakage_population")
    text = f"leakage {_f(v)} vs the prior-only baseline"
    if pop is not None:
        text += f" (against population rows: {_f(pop)})"
    if cov_pop is not None:
        text += f"; no record leak (coverage {_f(cov)} vs population {_f(cov_pop)}, p = {_f(p)})"
    elif record_test_note(row):  # no population rows: the record test did not run
        text += "; " + record_test_note(row)
    kind = DISTRIBUTIONAL if v is not None and v > 0 else NO_LEAK
    return Verdict(kind, "leakage", v, "prior-only attacker", text)


#: a membership signal is claimed when its AUC is above chance at this level
ALPHA = 0.05


def auc_p_value(auc: float, n_members: float | None, n_nonmembers: float | None) -> float | None:
    r"""One-sided p-value of an AUC against chance (0.5): the Mann-Whitney statistic's normal
    approximation, standard deviation :math:`\sqrt{(n_1 + n_0 + 1) / (12 n_1 n_0)}`. With 10
    members and 10 non-members an AUC of 0.69 is p = 0.075: what data-blind scores reach by
    chance. None when the counts are not known."""
    if not n_members or not n_nonmembers:
        return None
    sd = math.sqrt((n_members + n_nonmembers + 1) / (12.0 * n_members * n_nonmembers))
    return 0.5 * math.erfc((auc - 0.5) / sd / math.sqrt(2.0))


def verdict(row: Mapping[str, Any]) -> Verdict:
    """The verdict of one attack row (results.json ``attacks`` row, or its numeric metrics)."""
    if "record_leak" in row or "leakage" in row or "coverage" in row:
        return _points(row)
    if _num(row, "auc") is not None:
        auc, b = _num(row, "auc"), _num(row, "baseline_auc")
        floor = max(0.5, b if b is not None else 0.5)
        base = "chance (AUC 0.5)" + ("" if b is None else f", prior-only attacker {_f(b)}")
        p = auc_p_value(auc, _num(row, "n_members"), _num(row, "n_nonmembers"))
        kind = MEMBERSHIP if auc > floor and (p is None or p < ALPHA) else NO_LEAK
        text = f"membership AUC {_f(auc)} vs {base}"
        if p is not None:
            text += f", p = {_f(p)}" + (" (not significant at 5 %)" if p >= ALPHA else "")
        return Verdict(kind, "auc", auc, base, text)
    if _num(row, "tv") is not None:
        tv, b = _num(row, "tv"), _num(row, "tv_baseline")
        kind = DISTRIBUTIONAL if b is None or tv < b else NO_LEAK
        base = "prior-only attacker" + ("" if b is None else f" {_f(b)}")
        return Verdict(kind, "tv", tv, base, f"label histogram TV {_f(tv)} vs {base}")
    if _num(row, "matching_rate") is not None:
        m, b = _num(row, "matching_rate"), _num(row, "matching_rate_baseline")
        kind = RECORD if b is None or m > b else NO_LEAK
        base = "prior-only attacker" + ("" if b is None else f" {_f(b)}")
        return Verdict(kind, "matching_rate", m, base, f"words matched {_f(m)} vs {base}")
    return Verdict(NO_LEAK, "-", None, "-", "no figure")
