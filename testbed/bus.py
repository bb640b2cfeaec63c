"""Message bus, envelopes, the append-only transcript and observer views.

Every value that crosses from one party to another goes through :meth:`Bus.send`. The bus runs
the sender's defenses on the outgoing envelope (each returns a *new* envelope), checks the result
with the privacy guard, appends it to the transcript and returns the delivered envelope to the
receiver's code. Nothing in the transcript is ever edited or deleted.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from testbed.errors import DataError, TestbedError
from testbed.guard import GuardFinding, PrivacyGuard
from testbed.measure import Measure
from testbed.payload import (
    Payload,
    _ro,
    freeze_payload,
    iter_arrays,
    map_arrays,
    payload_digest,
    payload_nbytes,
)

SERVER = "server"
EAVESDROPPER = "eavesdropper"


__all__ = [
    "EAVESDROPPER",
    "SERVER",
    "Bus",
    "Envelope",
    "GuardFinding",
    "Payload",
    "PrivacyGuard",
    "PublicInfo",
    "Transcript",
    "View",
    "freeze_payload",
    "iter_arrays",
    "map_arrays",
    "payload_digest",
    "payload_nbytes",
    "visible_to",
]


# ----------------------------------------------------------------------------- envelope
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
    def make(cls, *, seq, round, sender, receiver, kind, payload, meta=None) -> Envelope:
        frozen = freeze_payload(payload)
        return cls(
            seq=int(seq),
            round=int(round),
            sender=str(sender),
            receiver=str(receiver),
            kind=str(kind),
            payload=frozen,
            meta=MappingProxyType(dict(meta or {})),
            nbytes=payload_nbytes(frozen),
            digest=payload_digest(frozen),
        )

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

    @property
    def protocol(self) -> str:
        return self.kind.split(".", 1)[0]

    @property
    def step(self) -> str:
        return self.kind.split(".", 1)[-1]


# ----------------------------------------------------------------------------- transcript
def _encode(p: Payload, prefix: str, arrays: dict[str, np.ndarray]):
    if isinstance(p, Measure):
        arrays[f"{prefix}support"] = p.support
        arrays[f"{prefix}weights"] = p.weights
        return {"type": "measure", "key": prefix}
    if isinstance(p, np.ndarray):
        arrays[prefix] = p
        return {"type": "array", "key": prefix}
    if isinstance(p, Mapping):
        return {
            "type": "mapping",
            "items": {k: _encode(v, f"{prefix}/{k}", arrays) for k, v in p.items()},
        }
    if isinstance(p, bool):
        return {"type": "bool", "value": p}
    if isinstance(p, int):
        return {"type": "int", "value": p}
    if isinstance(p, float):
        return {"type": "float", "value": repr(p)}
    return {"type": "str", "value": str(p)}


def _decode(spec, arrays) -> Payload:
    t = spec["type"]
    if t == "measure":
        return Measure.restore(arrays[f"{spec['key']}support"], arrays[f"{spec['key']}weights"])
    if t == "array":
        return _ro(arrays[spec["key"]])
    if t == "mapping":
        return {k: _decode(v, arrays) for k, v in spec["items"].items()}
    if t == "float":
        return float(spec["value"])
    if t == "int":
        return int(spec["value"])
    if t == "bool":
        return bool(spec["value"])
    return spec["value"]


TEMP_MARK = "testbed-"  # in every temp file name the testbed creates; restarts delete only these


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{TEMP_MARK}", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def visible_to(env: Envelope, who) -> bool:
    """Whether the observers ``who`` (an observer and its colluders) saw ``env``: they sent or
    received it, or one of them is the eavesdropper, who sees every envelope."""
    return EAVESDROPPER in who or env.sender in who or env.receiver in who


class Transcript:
    """Append-only log of delivered envelopes."""

    def __init__(self, envelopes: Iterable[Envelope] = ()):
        self._envelopes: list[Envelope] = list(envelopes)

    def _append(self, env: Envelope) -> None:
        if env.seq != len(self._envelopes):
            raise TestbedError(
                f"transcript is append-only: expected seq {len(self._envelopes)}, got {env.seq}"
            )
        self._envelopes.append(env)

    def __len__(self) -> int:
        return len(self._envelopes)

    def __iter__(self) -> Iterator[Envelope]:
        return iter(tuple(self._envelopes))

    def __getitem__(self, i: int) -> Envelope:
        return self._envelopes[i]

    @property
    def envelopes(self) -> tuple[Envelope, ...]:
        return tuple(self._envelopes)

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._envelopes)

    def digest(self) -> str:
        """Hash of the whole transcript (routing + payload digests), order-sensitive."""
        h = hashlib.sha256()
        for e in self._envelopes:
            h.update(f"{e.seq}|{e.round}|{e.sender}|{e.receiver}|{e.kind}|{e.digest}\n".encode())
        return h.hexdigest()

    def parties(self) -> list[str]:
        names = {e.sender for e in self._envelopes} | {e.receiver for e in self._envelopes}
        return sorted(names)

    def view(
        self,
        observer: str,
        colluders: Sequence[str] = (),
        own_data: Mapping[str, np.ndarray] | None = None,
        public: PublicInfo | None = None,
    ) -> View:
        """What ``observer`` (plus colluders) saw. ``eavesdropper`` sees every envelope."""
        who = {observer, *colluders}
        seen = tuple(e for e in self._envelopes if visible_to(e, who))
        own = {k: _ro(v) for k, v in (own_data or {}).items() if k in who}
        return View(
            observer=observer,
            colluders=tuple(colluders),
            envelopes=seen,
            own_data=MappingProxyType(own),
            public=public or PublicInfo(),
        )

    # -- persistence
    def save(self, directory: str | Path) -> None:
        """Write ``envelopes.jsonl`` and ``payloads.npz`` (atomically) into ``directory``."""
        directory = Path(directory)
        arrays: dict[str, np.ndarray] = {}
        lines = []
        for e in self._envelopes:
            spec = _encode(e.payload, f"{e.seq}", arrays)
            rec = {
                "seq": e.seq,
                "round": e.round,
                "sender": e.sender,
                "receiver": e.receiver,
                "kind": e.kind,
                "nbytes": e.nbytes,
                "digest": e.digest,
                "meta": dict(e.meta),
                "payload": spec,
            }
            lines.append(json.dumps(rec, sort_keys=True))
        atomic_write_bytes(directory / "envelopes.jsonl", ("\n".join(lines) + "\n").encode())
        import io

        buf = io.BytesIO()
        np.savez(buf, **arrays)
        atomic_write_bytes(directory / "payloads.npz", buf.getvalue())

    @classmethod
    def load(cls, directory: str | Path) -> Transcript:
        directory = Path(directory)
        env_path, npz_path = directory / "envelopes.jsonl", directory / "payloads.npz"
        for p in (env_path, npz_path):
            if not p.exists():
                raise TestbedError(f"{p}: transcript file not found")
        with np.load(npz_path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        out = cls()
        for lineno, line in enumerate(env_path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                payload = _decode(rec["payload"], arrays)
            except (ValueError, KeyError, TypeError, DataError) as exc:
                raise TestbedError(
                    f"{env_path}:{lineno}: corrupt transcript record ({exc})"
                ) from None
            env = Envelope.make(
                seq=rec["seq"],
                round=rec["round"],
                sender=rec["sender"],
                receiver=rec["receiver"],
                kind=rec["kind"],
                payload=payload,
                meta=rec.get("meta"),
            )
            if env.digest != rec["digest"]:
                raise TestbedError(
                    f"{env_path}:{lineno}: payload digest mismatch for message #{env.seq}"
                )
            out._append(env)
        return out


# ----------------------------------------------------------------------------- view
@dataclass(frozen=True)
class PublicInfo:
    """What everyone knows: protocol name and public parameters, data dimension and a public
    prior (e.g. a public reference sample from the same domain, or bounds)."""

    protocol: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    parties: tuple[str, ...] = ()
    dim: int = 0
    prior: np.ndarray | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class View:
    """Read-only record of what an observer saw: envelopes, its own private data, public info."""

    observer: str
    colluders: tuple[str, ...]
    envelopes: tuple[Envelope, ...]
    own_data: Mapping[str, np.ndarray]
    public: PublicInfo

    def messages(self, kind: str = "*", sender: str | None = None, receiver: str | None = None):
        """Envelopes whose kind matches the glob ``kind`` (and sender/receiver if given)."""
        return [
            e
            for e in self.envelopes
            if fnmatch.fnmatchcase(e.kind, kind)
            and (sender is None or e.sender == sender)
            and (receiver is None or e.receiver == receiver)
        ]

    def digest(self) -> str:
        h = hashlib.sha256()
        for e in self.envelopes:
            h.update(payload_digest(e.payload).encode())
            h.update(f"{e.seq}{e.kind}{e.sender}{e.receiver}".encode())
        for k in sorted(self.own_data):
            h.update(payload_digest(self.own_data[k]).encode())
        return h.hexdigest()


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
    ):
        self.transcript = Transcript()
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
        )
        for defense, rng in self._defenses:
            if defense.applies_to(env):
                new = defense.on_send(env, rng, self.ledger)
                if not isinstance(new, Envelope) or new is env:
                    raise TestbedError(f"defense {defense.name!r} must return a new Envelope")
                env = new
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
        (:mod:`testbed.engines.pool`) runs them in its workers."""
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
