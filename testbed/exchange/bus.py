"""Message bus: the only way a value crosses from one party to another.

:meth:`Bus.send` runs the sender's defenses on the outgoing envelope (each returns a *new*
envelope), checks the result with the privacy guard, appends it to the transcript and returns the
delivered envelope to the receiver's code. Nothing in the transcript is ever edited or deleted.

The pieces live in their own modules and are re-exported here, so ``from testbed.exchange.bus import X``
keeps working: payload freezing, sizes and digests (:mod:`testbed.exchange.payload`), envelopes
(:mod:`testbed.exchange.envelope`), the privacy guard (:mod:`testbed.exchange.guard`), the transcript, its files and
observer views (:mod:`testbed.exchange.transcript`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from testbed.errors import TestbedError
from testbed.exchange.envelope import EAVESDROPPER, SERVER, Envelope, visible_to
from testbed.exchange.guard import GuardFinding, PrivacyGuard
from testbed.exchange.payload import (
    Payload,
    freeze_payload,
    iter_arrays,
    map_arrays,
    payload_digest,
    payload_nbytes,
)
from testbed.exchange.transcript import TEMP_MARK, PublicInfo, Transcript, View, atomic_write_bytes

__all__ = [
    "EAVESDROPPER",
    "SERVER",
    "TEMP_MARK",
    "Bus",
    "Envelope",
    "GuardFinding",
    "Payload",
    "PrivacyGuard",
    "PublicInfo",
    "Transcript",
    "View",
    "atomic_write_bytes",
    "freeze_payload",
    "iter_arrays",
    "map_arrays",
    "payload_digest",
    "payload_nbytes",
    "visible_to",
]


# ----------------------------------------------------------------------------- bus
class Bus:
    """In-process message bus.

    Parameters
    ----------
    defenses : sequence of (defense, rng)
        Applied in order to every envelope the defense ``applies_to``.
    guard : PrivacyGuard, optional
        When given, every delivered payload is checked for private rows.
    ledger : object with ``record(event)``, optional
        Passed to defenses for privacy accounting.
    on_send : callable, optional
        Called with each delivered envelope (progress reporting only).
    transcript : Transcript, optional
        Where delivered envelopes are logged (e.g. one that spills payloads to the run
        directory); a fresh in-memory transcript by default.
    parties : mapping name -> PartyData
        The parties' private data. Protocol code reaches it only through :meth:`local`, which
        runs a function *at* a party; another engine (e.g. Ray actors) can run it remotely.
    """

    def __init__(
        self,
        defenses=(),
        guard: PrivacyGuard | None = None,
        ledger=None,
        on_send=None,
        parties=None,
        transcript: Transcript | None = None,
    ):
        self.transcript = transcript if transcript is not None else Transcript()
        self._parties = dict(parties or {})
        self._defenses = list(defenses)
        self.guard = guard
        self.ledger = ledger
        self._on_send = on_send

    def send(
        self, sender: str, receiver: str, kind: str, payload: Payload, round: int = 0, meta=None
    ) -> Envelope:
        """Send one message; returns the envelope as delivered (after defenses)."""
        env = Envelope.make(
            seq=len(self.transcript),
            round=round,
            sender=sender,
            receiver=receiver,
            kind=kind,
            payload=payload,
            meta=meta,
            hashed=False,  # hashed once below, after the defenses settled the payload
        )
        for defense, rng in self._defenses:
            if defense.applies_to(env):
                new = defense.on_send(env, rng, self.ledger)
                if not isinstance(new, Envelope) or new is env:
                    raise TestbedError(f"defense {defense.name!r} must return a new Envelope")
                env = new
        if not env.digest:
            env = replace(env, digest=payload_digest(env.payload))
        if self.guard is not None:
            self.guard.check(env)
        self.transcript._append(env)
        if self._on_send is not None:
            self._on_send(env)
        return env

    def local(self, party: str, fn, /, *args, **kwargs):
        """Run ``fn(party_data, *args, **kwargs)`` at ``party`` and return the result to that
        party's own code. Whatever the result is, it must go through :meth:`send` before any
        other party uses it."""
        try:
            data = self._parties[party]
        except KeyError:
            known = ", ".join(self._parties) or "(none)"
            raise TestbedError(f"no party {party!r} on this bus; parties: {known}") from None
        return fn(data, *args, **kwargs)

    def local_map(self, calls):
        """Run several independent ``(party, fn, *args)`` calls; results in call order.

        In process they run one after another; an engine with remote parties (Ray) runs them
        concurrently. Same contract as :meth:`local` for each call."""
        return [self.local(c[0], c[1], *c[2:]) for c in calls]

    #: True when :meth:`local_map`/:meth:`map_pure` run calls at the same time (a protocol may
    #: then precompute work it would otherwise do one call at a time)
    runs_concurrently = False

    def map_pure(self, calls):
        """Run ``(fn, *args)`` calls that read no party's data (e.g. the server's own solves);
        results in call order. In process they run one after another; the pool engine
        (:mod:`testbed.exchange.engines.pool`) runs them in its workers."""
        return [c[0](*c[1:]) for c in calls]

    def broadcast(
        self,
        sender: str,
        receivers: Sequence[str],
        kind: str,
        payload: Payload,
        round: int = 0,
        meta=None,
    ):
        """One envelope per receiver (each is counted on the wire)."""
        return [self.send(sender, r, kind, payload, round=round, meta=meta) for r in receivers]
