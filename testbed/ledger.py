"""Privacy ledger: defenses record mechanism events; an opacus accountant turns them into a
claimed (epsilon, delta) per party.

An event is a Gaussian mechanism invocation ``(noise_multiplier, sample_rate, count)`` where
``noise_multiplier = sigma / sensitivity`` (the L2 sensitivity stated by the defense). Events are
grouped by the party whose data they protect, and composed with opacus's RDP accountant
(``RDPAccountant``); ``"prv"`` selects opacus's PRV accountant instead.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

__all__ = ["MechanismEvent", "PrivacyLedger"]


@dataclass(frozen=True)
class MechanismEvent:
    party: str
    mechanism: str  # "gaussian" | "laplace" | "dpsgd" | ...
    noise_multiplier: float
    sample_rate: float = 1.0
    count: int = 1
    sensitivity: float = float("nan")
    sigma: float = float("nan")
    note: str = ""
    epsilon: float | None = None  # pure-DP events (Laplace) carry their own epsilon


@dataclass
class PrivacyLedger:
    """Append-only list of mechanism events, with accounting."""

    accountant: str = "rdp"
    events: list[MechanismEvent] = field(default_factory=list)
    claims: dict[str, tuple[float, float]] = field(default_factory=dict)

    def record(self, event: MechanismEvent) -> None:
        self.events.append(event)

    def claim(self, party: str, epsilon: float, delta: float) -> None:
        """Record an (epsilon, delta) computed elsewhere (e.g. opacus's own DP-SGD accountant)."""
        self.claims[party] = (float(epsilon), float(delta))

    def parties(self) -> list[str]:
        return sorted({e.party for e in self.events} | set(self.claims))

    def epsilon(self, party: str, delta: float) -> float:
        """Claimed epsilon for ``party`` at ``delta``; ``inf`` when nothing protects it."""
        evs = [e for e in self.events if e.party == party]
        if party in self.claims and not evs:
            return self.claims[party][0]
        if not evs:
            return math.inf
        pure = sum(e.epsilon * e.count for e in evs if e.epsilon is not None)
        gauss = [e for e in evs if e.epsilon is None]
        eps = pure
        if gauss:
            if any(e.noise_multiplier <= 0 for e in gauss):
                return math.inf
            from opacus.accountants import create_accountant

            acc = create_accountant(self.accountant)
            acc.history = [(e.noise_multiplier, e.sample_rate, e.count) for e in gauss]
            eps += float(acc.get_epsilon(delta=delta))
        if party in self.claims:
            eps += self.claims[party][0]
        return eps

    def summary(self, delta: float) -> dict[str, dict]:
        return {
            p: {
                "epsilon": self.epsilon(p, delta),
                "delta": delta,
                "events": sum(e.count for e in self.events if e.party == p),
            }
            for p in self.parties()
        }

    def to_json(self) -> list[dict]:
        return [asdict(e) for e in self.events]
