"""Stage 5: what the threat model's observer saw — its View of the transcript and the public
information, each a copy of its own.

The observer (the server, a party, or an eavesdropper, plus colluders) sees the envelopes it sent
or received (all of them for an eavesdropper), the private data of the observer and its colluders
(a curious party knows its own rows), the public parameters, and the protocol's released
estimates (``public.extra["released"]``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from testbed.exchange.bus import PublicInfo, Transcript, View
from testbed.run.roster import World

__all__ = ["Observation", "observe"]


@dataclass(frozen=True)
class Observation:
    """The threat model's view and the public information that goes with it."""

    observer: str
    colluders: tuple[str, ...]
    view: View
    public: PublicInfo


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
    return Observation(observer, colluders, view, public)
