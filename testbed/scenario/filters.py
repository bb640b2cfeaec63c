"""A defense's ``senders`` and ``kinds`` filters checked against the protocol (issue 12).

A typo in a filter would silently disable the defense (a privacy bug: the report would claim a
defense that never ran). ``senders`` must name parties of the scenario or the protocol's other
senders (``Protocol.extra_senders``, the server by default); every ``kinds`` glob must match a
kind the protocol declares it sends (``Protocol.message_kinds``; a protocol that declares none
is not checked).
"""

from __future__ import annotations

import fnmatch

from testbed.errors import ScenarioError
from testbed.registry import PROTOCOLS
from testbed.scenario.yamlloc import where

__all__ = ["check_defense_filters"]


def check_defense_filters(cfg, sc, i: int, root, fname: str) -> None:
    """Raise a one-line :class:`ScenarioError` naming ``defenses[i].params.<field>[j]`` and the
    known values when a filter names no sender or no message kind of the protocol."""
    proto = PROTOCOLS.get(sc.protocol.name)

    def fail(field: str, j: int, value, what: str, known) -> None:
        raise ScenarioError(
            f"{where(fname, root, ['defenses', i, 'params', field, j])}: {value!r} is not {what} "
            f"of protocol {proto.name}; known: {', '.join(known)}"
        )

    senders = getattr(cfg, "senders", None)
    if senders:
        known = [*sc.data.party_names(), *proto.extra_senders]
        for j, s in enumerate(senders):
            if s not in known:
                fail("senders", j, s, "a sender", known)
    kinds = getattr(cfg, "kinds", None)
    declared = tuple(proto.message_kinds or ())
    if kinds and declared:
        for j, k in enumerate(kinds):
            if not isinstance(k, str) or not any(fnmatch.fnmatchcase(d, k) for d in declared):
                fail("kinds", j, k, "a message kind (or a glob matching one)", declared)
