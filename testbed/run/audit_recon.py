"""A reconstruction bound beside every μ-GDP claim (Balle, Cherubin and Hayes 2022; Hayes et al.
2023): under μ-GDP no attacker reconstructs a target within radius η with probability above
Φ(Φ⁻¹(κ) + μ), κ the success of the attacker who knows only the prior. Here η is the coverage
radius (``coverage_r``: the median leave-one-out nearest-neighbour distance inside the target's
data), the success is the attack's ``coverage`` and κ the larger of the prior-only baseline's
``coverage_baseline`` on the same rows and what the same output covers of population rows
(``coverage_population_hi``, where the scorer has population rows); both are taken conservatively
(:func:`testbed.scoring.audit_bounds.reconstruction_audit`) and a success above the bound is a
violated claim, flagged like an audited ε above a claimed ε."""

from __future__ import annotations

import math

from testbed.scoring.audit_bounds import reconstruction_audit

__all__ = ["reconstruction_checks"]


def reconstruction_checks(
    rows: list[dict], ledger, parties, confidence: float = 0.95
) -> list[dict]:
    """One check per reconstruction row (a row with ``coverage`` and ``coverage_baseline``)
    whose target's ledger events make a μ-GDP claim (full-batch Gaussian releases only; an
    (ε, δ) claim of another form gets no row)."""
    out = []
    for row in rows:
        target = row.get("target")
        if "coverage" not in row or "coverage_baseline" not in row or target not in parties:
            continue
        mu = ledger.gdp_mu(target)
        if mu is None or math.isinf(mu):
            continue
        n = int(parties[target].n)
        hits = int(round(float(row["coverage"]) * n))
        prior = int(round(float(row["coverage_baseline"]) * n))
        pop = row.get("coverage_population_hi")
        pop = float(pop) if isinstance(pop, (int, float)) and math.isfinite(pop) else None
        out.append(
            {
                "attack": row.get("label") or row.get("attack"),
                "target": target,
                "observer": row.get("observer"),
                "radius": row.get("coverage_r"),
                "rows": n,
                **reconstruction_audit(hits, n, prior, n, mu, confidence, population_upper=pop),
            }
        )
    return out
