"""Stage 5: what the threat model's observer saw — its View of the transcript and the public
information, each a copy of its own.

The observer (the server, a party, or an eavesdropper, plus colluders) sees the envelopes it sent
or received (all of them for an eavesdropper), the private data of the observer and its colluders
(a curious party knows its own rows), the public parameters, and the protocol's released
estimates (``public.extra["released"]``).

``attack_key`` stays in the driver: the attack stage derives each attack's random stream from it
(:func:`testbed.seeding.keyed_rng`). It is a digest of the root seed and every party's private
rows, so neither an attack's ``rng`` nor anything else it receives reveals the seed or the
partition (docs/reference/trust.md, "What an attack receives").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from testbed.exchange.bus import PublicInfo, Transcript, View
from testbed.run.roster import World
from testbed.seeding import private_key

__all__ = ["Observation", "observe"]


@dataclass(frozen=True)
class Observation:
    """The threat model's view and the public information that goes with it."""

    observer: str
    colluders: tuple[str, ...]
    view: View
    public: PublicInfo
    attack_key: bytes = field(default=b"", repr=False)  # the driver's; no attack receives it


def observe(
    world: World,
    transcript: Transcript,
    released: dict[str, Any] | None = None,
    observer: str | None = None,
    colluders: tuple[str, ...] | list[str] | None = None,
) -> Observation:
    """The view of ``observer`` (default: the scenario's threat model)."""
    tm = world.scenario.threat_model
    observer = tm.observer if observer is None else observer
    colluders = tuple(tm.colluders if colluders is None else colluders)
    who = {observer, *colluders}
    own = {p: d.X for p, d in world.parties.items() if p in who}
    public = world.public
    if released is not None:
        public = replace(public, extra={**public.extra, "released": dict(released)})
    view = transcript.view(observer, list(colluders), own_data=own, public=public)
    return Observation(observer, colluders, view, public, attack_key(world))


def attack_key(world: World) -> bytes:
    """The key attack streams are derived from: root seed and every party's rows, labels and
    row indices (the partition)."""
    arrays = []
    for name, d in sorted(world.parties.items()):
        arrays.append((f"{name}.X", d.X))
        for part in ("y", "source_index"):
            if getattr(d, part, None) is not None:
                arrays.append((f"{name}.{part}", getattr(d, part)))
    return private_key(world.scenario.seed, arrays)
