"""What the privacy guard (:mod:`testbed.exchange.guard`) reports: one near-copy found."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RELEASE", "GuardFinding"]

#: the route of a released value (a finding's sender and receiver)
RELEASE = ("protocol", "released")


@dataclass(frozen=True)
class GuardFinding:
    """One near-copy found in a message (or, with ``seq = -1``, in a released value)."""

    seq: int
    round: int
    sender: str
    receiver: str
    kind: str
    party: str
    path: str
    row: int
    distance: float
    threshold: float

    def line(self) -> str:
        where = (
            f"the protocol's released {self.kind}"
            if self.seq < 0
            else f"message #{self.seq} {self.kind} (round {self.round}) from {self.sender} "
            f"to {self.receiver}"
        )
        return (
            f"privacy guard: {where} carries a near-copy of a private row of {self.party!r} at "
            f"{self.path}[{self.row}] (distance {self.distance:.3g} <= threshold "
            f"{self.threshold:.3g})"
        )
