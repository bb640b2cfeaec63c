"""Envelopes: one message as it was delivered, with its size and content digest, and who saw it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from testbed.exchange.payload import Payload, freeze_payload, payload_digest, payload_nbytes

SERVER = "server"
EAVESDROPPER = "eavesdropper"

__all__ = [
    "EAVESDROPPER",
    "SERVER",
    "Envelope",
    "defended_by",
    "envelope_record",
    "route_visible_to",
    "visible_to",
]


# ----------------------------------------------------------------------------- envelope
_NO_META: Mapping[str, Any] = MappingProxyType({})  # read-only, so one serves every envelope
_set = object.__setattr__  # past the frozen dataclass's guard, for fields set once at creation


@dataclass(frozen=True)
class Envelope:
    """One message as it was sent (after the sender's defenses).

    ``kind`` is ``"<protocol>.<step>"``; ``payload`` is a Measure, scalar, array or a mapping of
    these (read-only); ``nbytes`` and ``digest`` are computed from the payload.
    """

    seq: int
    round: int
    sender: str
    receiver: str
    kind: str
    payload: Payload
    meta: Mapping[str, Any] = field(default_factory=dict)
    nbytes: int = 0
    digest: str = ""

    @classmethod
    def make(
        cls, *, seq, round, sender, receiver, kind, payload, meta=None, algorithm=None, hashed=True
    ) -> Envelope:
        """Freeze ``payload`` and record its size and digest (``algorithm``: see
        :func:`~testbed.exchange.payload.payload_digest`). ``hashed=False`` leaves ``digest`` empty for a
        caller that hashes the final payload itself (the bus, after the defenses)."""
        frozen = freeze_payload(payload)
        # the fields set directly, as one dict: the frozen dataclass's constructor (one guarded
        # setattr a field) costs half of an envelope, and ``__dict__.update(**fields)`` still a
        # third (its keyword dict); the bus makes one for every message
        env = object.__new__(cls)
        _set(
            env,
            "__dict__",
            {
                "seq": seq if type(seq) is int else int(seq),
                "round": round if type(round) is int else int(round),
                "sender": sender if type(sender) is str else str(sender),
                "receiver": receiver if type(receiver) is str else str(receiver),
                "kind": kind if type(kind) is str else str(kind),
                "payload": frozen,
                "meta": MappingProxyType(dict(meta)) if meta else _NO_META,
                "nbytes": payload_nbytes(frozen),
                "digest": payload_digest(frozen, algorithm) if hashed else "",
            },
        )
        return env

    def with_payload(self, payload: Payload, **meta) -> Envelope:
        """A new envelope with another payload (and merged meta); the original is untouched."""
        frozen = freeze_payload(payload)
        return replace(
            self,
            payload=frozen,
            meta=MappingProxyType({**self.meta, **meta}),
            nbytes=payload_nbytes(frozen),
            digest=payload_digest(frozen),
        )

    def with_digest(self, digest: str) -> Envelope:
        """The same envelope with its payload's ``digest`` filled in (the bus hashes a batch at
        once, after the defenses). A field copy: ``dataclasses.replace`` runs the whole
        constructor again, which costs about as much as a small payload's digest."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__["digest"] = str(digest)
        return new

    def record(self) -> dict[str, Any]:
        """Every field of the envelope, the payload as its digest: what the transcript digest
        covers (:func:`envelope_record`)."""
        return envelope_record(
            self.seq,
            self.round,
            self.sender,
            self.receiver,
            self.kind,
            self.nbytes,
            self.digest,
            self.meta,
        )

    @property
    def defended_by(self) -> tuple[str, ...]:
        """The defenses that acted on this message, in order (:func:`defended_by`)."""
        return defended_by(self.meta)

    @property
    def protocol(self) -> str:
        return self.kind.split(".", 1)[0]

    @property
    def step(self) -> str:
        return self.kind.split(".", 1)[-1]


def envelope_record(seq, round, sender, receiver, kind, nbytes, digest, meta) -> dict[str, Any]:
    """One envelope's fields as the mapping its record digest and the transcript digest encode
    (:func:`~testbed.exchange.payload.canonical_update`): routing, kind, size, the payload's
    digest and the whole ``meta``."""
    return {
        "seq": int(seq),
        "round": int(round),
        "sender": str(sender),
        "receiver": str(receiver),
        "kind": str(kind),
        "nbytes": int(nbytes),
        "payload": str(digest),
        "meta": dict(meta or {}),
    }


def defended_by(meta: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The names of the defenses that acted on a message, in order, as its ``meta`` records
    them: ``meta["defended_by"]``, a list of names (what :meth:`Defense.marked
    <defenses._base.Defense.marked>` writes) or one name (``noisy_soft_labels``); ``()`` when no
    defense marked it. Read from the meta, which the envelope's record digest and the transcript
    digest cover, so a saved run shows it as it was sent, and runs saved before this was shown
    show it too."""
    names = (meta or {}).get("defended_by")
    if names is None:
        return ()
    if isinstance(names, str):
        return (names,)
    if isinstance(names, (list, tuple)):
        return tuple(str(n) for n in names)
    return (str(names),)


def visible_to(env: Envelope, who) -> bool:
    """Whether the observers ``who`` (an observer and its colluders) saw ``env``: they sent or
    received it, or one of them is the eavesdropper, who sees every envelope."""
    return route_visible_to(env.sender, env.receiver, who)


def route_visible_to(sender: str, receiver: str, who) -> bool:
    """:func:`visible_to` from a message's routing alone (e.g. a header read from disk)."""
    return EAVESDROPPER in who or sender in who or receiver in who
