"""One audit verdict: what an audit of one party's claim, at one scope, may say.

Every verdict is one of :data:`VERDICTS` (DESIGN.md, "Audits: verdicts that can fail"):

- ``VIOLATION``: the audited lower bound exceeds the claim;
- ``holds``: not refuted, and the audit *could* have refuted it — the claim is below the
  audit's ceiling (the largest ε̂ its canaries or trials could ever certify);
- ``inconclusive``: not refuted, but the claim is at or above the ceiling, so no outcome of this
  audit could have refuted it; never reported as "holds";
- ``not audited``: there is no claim to test (nothing protects the party), or nothing the audit
  reads; a leak the audit still measured is stated in ``reason``.

``scope`` is ``"protocol"`` (the canary audits of :mod:`testbed.run.audit_one_run` and
:mod:`testbed.run.audit`) or ``"mechanism"`` (an audit that drives the defense itself).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

__all__ = ["SCOPES", "VERDICTS", "AuditVerdict", "judge"]

VERDICTS = ("holds", "VIOLATION", "inconclusive", "not audited")
SCOPES = ("protocol", "mechanism")


def _num(x: float) -> float | None:
    """A JSON number: ``None`` for no claim (inf) or an unknown value (nan)."""
    return float(x) if x is not None and math.isfinite(x) else None


@dataclass(frozen=True)
class AuditVerdict:
    """One record per (party, scope) (and per sweep cell, ``setting``)."""

    party: str
    scope: str
    claimed_epsilon: float  # inf: no claim
    audited_epsilon: float  # the lower bound the audit proved (0: no evidence)
    ceiling_epsilon: float  # the most this audit could ever certify (nan: not audited)
    verdict: str
    reason: str
    setting: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")
        if self.scope not in SCOPES:
            raise ValueError(f"scope {self.scope!r} is not one of {', '.join(SCOPES)}")

    def to_json(self) -> dict:
        """The record as JSON values (no claim and unknown numbers are ``null``); ``setting``
        only for a cell of a sweep."""
        out = asdict(self)
        for k in ("claimed_epsilon", "audited_epsilon", "ceiling_epsilon"):
            out[k] = _num(out[k])
        if not self.setting:
            del out["setting"]
        return out

    def line(self) -> str:
        """The verdict as one printed line, with its scope and ceiling."""
        where = f"{self.setting}: " if self.setting else ""
        sep = " — " if self.verdict == "VIOLATION" else ": "
        return f"{where}{self.party}: {self.verdict}{sep}{self.reason} [{self.scope} audit]"


def _g(x: float) -> str:
    return f"{x:.3g}"


def judge(
    party: str,
    scope: str,
    claimed: float,
    audited: float,
    ceiling: float,
    violated: bool,
    confidence: float,
    *,
    advice: str = "the mechanism audit",
    setting: str = "",
) -> AuditVerdict:
    """The verdict of one audit outcome: ``audited`` (the lower bound proved) and ``ceiling``
    (the most it could prove) against ``claimed``; ``violated`` as the audit decided it (it may
    also rest on a μ-GDP test; the ceiling is then expressed in the claim's ε). ``advice``: what
    would raise the ceiling (e.g. ``"--canaries 1024 or the mechanism audit"``)."""
    c = f"{100 * confidence:g} %"
    claim = f"ε = {_g(claimed)}"
    tail = f"ε̂ ≥ {_g(audited)}, ceiling {_g(ceiling)}"
    if violated:
        v, why = "VIOLATION", f"the claim {claim} is refuted at {c}: {tail}"
    elif not math.isfinite(claimed):
        v, why = "not audited", "no claim (nothing protects it)"
        if audited > 0:
            why += f"; the audit measured a leak: ε̂ ≥ {_g(audited)} at {c}"
    elif claimed >= ceiling:
        v = "inconclusive"
        why = (
            f"the claim {claim} is above what this audit can refute (ceiling {_g(ceiling)}); "
            f"use {advice} (ε̂ ≥ {_g(audited)})"
        )
    else:
        v, why = "holds", f"the claim {claim} holds against this audit at {c} ({tail})"
    return AuditVerdict(party, scope, claimed, audited, ceiling, v, why, setting)
