"""The words every verdict of the testbed is stated in (issue 46): a figure that was measured
and is 0 is not a figure that was never measured, and neither is a test that does not apply.

The report (headline, tables, coverage matrix, the claimed-vs-audited table), the scorecard and
``testbed run``'s summary say these words, from these constants and helpers, so that they read
alike everywhere:

- **measured**: the test ran; its figure (0 included) is evidence;
- **not measured**: the test could have applied but did not run, with the reason (e.g. the
  record test without population rows); never shown as 0 or "no leak";
- **not applicable**: no test of that kind applies here;
- **no attack applies: nothing was measured**: a scorecard or a protocol no shipped attack
  applies to.

For a privacy claim: **not valid** when an assumption behind it fails (whatever an audit says),
**not audited** without an audit, else the audit's verdict (``holds``, ``VIOLATION``,
``inconclusive``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "HOLDS",
    "INCONCLUSIVE",
    "MEASURED",
    "NOTHING_MEASURED",
    "NO_ATTACK_APPLIED",
    "NO_ATTACK_APPLIES",
    "NOT_APPLICABLE",
    "NOT_AUDITED",
    "NOT_MEASURED",
    "NOT_VALID",
    "RECORD_KEYS",
    "VIOLATION",
    "claim_status",
    "record_test",
    "record_test_note",
]

MEASURED = "measured"
NOT_MEASURED = "not measured"
NOT_APPLICABLE = "not applicable"
NO_ATTACK_APPLIED = "no attack applied"
NOTHING_MEASURED = "nothing was measured"
NO_ATTACK_APPLIES = f"no attack applies: {NOTHING_MEASURED}"
#: a privacy claim: an assumption behind it fails / no audit ran / an audit's verdicts
NOT_VALID = "not valid"
NOT_AUDITED = "not audited"
HOLDS = "holds"
VIOLATION = "VIOLATION"
INCONCLUSIVE = "inconclusive"

#: the record test's figures in an attack row (absent when it did not run)
RECORD_KEYS = ("record_leak", "record_leakage")


def _why_no_population(row: Mapping[str, Any]) -> str:
    method = str(row.get("population_method") or "none")
    detail = method.split("(", 1)[1].rstrip(")") if "(" in method else ""
    return "no population rows" + (f": {detail}" if detail else "")


def record_test(row: Mapping[str, Any]) -> tuple[str, str]:
    """``(state, reason)`` of the record test (closer to the party's rows than to population
    rows) in one scored attack row: :data:`MEASURED` (against population rows: ``record_p``;
    or an exact recovery, a record leak that needs none), :data:`NOT_MEASURED` (a points row
    without either: no population rows and no row recovered exactly, so the test could not
    run; also a ``record_leak`` of 0 without ``record_p``, as results written before issue 46
    have it) or :data:`NOT_APPLICABLE` (the output is no reconstruction of rows)."""
    if "record_p" in row:
        return MEASURED, "population rows"
    if row.get("record_leak"):  # an exact recovery is a record leak without population rows
        return MEASURED, "exact recovery (no population rows)"
    # a 0 without population rows (results written before the scorer left it out) is no test
    if "coverage" in row or "leakage" in row or "record_leak" in row:
        return NOT_MEASURED, _why_no_population(row)
    return NOT_APPLICABLE, "the output is no reconstruction of rows"


def record_test_note(row: Mapping[str, Any]) -> str:
    """One phrase for a row whose record test did not run, saying what was measured instead
    (``""`` when it ran or does not apply)."""
    state, why = record_test(row)
    if state != NOT_MEASURED:
        return ""
    seen = [
        f"{k.replace('_', ' ')} {_g(row.get(k))}"
        for k in ("coverage", "exact_recovery")
        if isinstance(row.get(k), (int, float))
    ]
    return f"record test {NOT_MEASURED} ({why})" + (
        f"; measured: {', '.join(seen)} of the party's rows" if seen else ""
    )


def _g(v) -> str:
    return f"{float(v):.3g}"


def claim_status(
    claimed: float,
    audited: float,
    holds: Iterable[bool] = (),
    verdicts: Iterable[str] = (),
) -> str:
    """The status of one privacy claim beside its audit: :data:`NOT_VALID` when an assumption
    behind it fails (``holds`` has a False), ``not applicable (no claim)`` for ε = ∞, else the
    audit's worst ``verdicts`` (VIOLATION, then inconclusive, then holds; ``not audited`` rows
    are no audit) or, from an audit that gives no verdict, VIOLATION when the audited ε exceeds
    the claim and ``consistent`` otherwise; :data:`NOT_AUDITED` without any audit (``audited``
    NaN)."""
    holds = list(holds)
    if holds and not all(holds):
        return f"{NOT_VALID} (an assumption fails)"
    if not math.isfinite(claimed):
        return f"{NOT_APPLICABLE} (no claim)"
    said = {v for v in verdicts if v and v != NOT_AUDITED}
    for v in (VIOLATION, INCONCLUSIVE, HOLDS):
        if v in said:
            return v + (": audited > claimed" if v == VIOLATION else "")
    if math.isnan(audited):
        return NOT_AUDITED
    return f"{VIOLATION}: audited > claimed" if audited > claimed else "consistent"
