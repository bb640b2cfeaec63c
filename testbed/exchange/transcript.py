"""The append-only transcript of delivered envelopes, its files, and observer views.

A transcript is saved as ``envelopes.jsonl`` (routing, digests, payload layout) plus
``payloads.npz`` and reloads byte for byte: every payload digest is checked on load.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import operator
import os
import pickle
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from testbed.errors import DataError, TestbedError
from testbed.exchange.envelope import Envelope, route_visible_to, visible_to
from testbed.exchange.payload import Payload, _ro, digest_algorithm, payload_digest
from testbed.exchange.spill import HEADER_NAME, SPILL_NAME, HeaderLog, SpillStore, mapped_npz
from testbed.measure import Measure, is_mapped_readonly

#: In-memory payload bytes a spilling transcript keeps before it writes payloads to disk.
DEFAULT_SPILL_THRESHOLD = 256 << 20

__all__ = ["EnvelopeSeq", "PublicInfo", "Transcript", "View", "atomic_write_bytes"]

_PICKLE = pickle.HIGHEST_PROTOCOL


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
        return Measure.restore(
            arrays[f"{spec['key']}support"], arrays[f"{spec['key']}weights"], keep_mapped=True
        )
    if t == "array":
        a = arrays[spec["key"]]
        return a if is_mapped_readonly(a) else _ro(a)
    if t == "mapping":
        return {k: _decode(v, arrays) for k, v in spec["items"].items()}
    if t == "float":
        return float(spec["value"])
    if t == "int":
        return int(spec["value"])
    if t == "bool":
        return bool(spec["value"])
    return spec["value"]


def _atomic_savez(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """``np.savez`` straight into a temporary file next to ``path``, then rename: the arrays
    (memory-mapped ones included) are streamed one by one, never gathered in one buffer."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{TEMP_MARK}", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class Transcript:
    """Append-only log of delivered envelopes.

    With ``spill_dir``, the transcript stops growing in memory once it holds
    ``spill_threshold`` payload bytes: from then on every envelope is written to disk in the
    run directory, its payload arrays to the append-only ``payloads.spill`` and its header
    (routing, size, digest, the payload's layout) to ``envelopes.spill`` with a fixed-size index
    (:mod:`testbed.exchange.spill`). Reading envelope ``i`` then rebuilds it from its header, its arrays
    read-only views of a memory map of the payload file; iterating, views and digests read the
    files lazily, so memory stays bounded however long the run is. Digests, views and attacks
    see the same bytes either way.
    """

    def __init__(
        self,
        envelopes: Iterable[Envelope] = (),
        *,
        spill_dir: str | Path | None = None,
        spill_threshold: int | None = None,
    ):
        self._envelopes: list[Envelope] = []  # the first envelopes, kept in memory
        self._in_memory = 0
        self._count = 0
        self._nbytes = 0
        self._threshold = DEFAULT_SPILL_THRESHOLD if spill_threshold is None else spill_threshold
        self._spill = self._log = None
        if spill_dir is not None:
            self._spill = SpillStore(Path(spill_dir) / SPILL_NAME)
            self._log = HeaderLog(Path(spill_dir) / HEADER_NAME)
        for e in envelopes:
            self._append(e)

    @property
    def spilled_bytes(self) -> int:
        """Payload bytes held in the spill file (0 when nothing spilled)."""
        return 0 if self._spill is None else self._spill.nbytes

    @property
    def on_disk(self) -> int:
        """How many envelopes were written to disk instead of memory (the last ones)."""
        return 0 if self._log is None else self._log.count

    def _append(self, env: Envelope) -> None:
        if env.seq != self._count:
            raise TestbedError(
                f"transcript is append-only: expected seq {self._count}, got {env.seq}"
            )
        if self._spill is not None and (
            self._log.count or self._in_memory + env.nbytes > self._threshold
        ):
            layout = self._spill.layout(env.payload)  # same bytes, same digest
            header = (env.round, env.sender, env.receiver, env.kind, env.nbytes, env.digest)
            meta = dict(env.meta) or None
            self._log.append(pickle.dumps((header, meta, layout), protocol=_PICKLE))
        else:
            self._in_memory += env.nbytes
            self._envelopes.append(env)
        self._count += 1
        self._nbytes += env.nbytes

    def _from_disk(self, seq: int) -> Envelope:
        header, meta, layout = pickle.loads(self._log[seq - len(self._envelopes)])
        round_, sender, receiver, kind, nbytes, digest = header
        return Envelope(
            seq=seq,
            round=round_,
            sender=sender,
            receiver=receiver,
            kind=kind,
            payload=self._spill.restore(layout),
            meta=MappingProxyType(meta or {}),
            nbytes=nbytes,
            digest=digest,
        )

    def _headers(self) -> Iterator[tuple[int, int, str, str, str, str]]:
        """(seq, round, sender, receiver, kind, digest) of every envelope, without reading any
        payload (the digest and routing of a spilled transcript come from its header file)."""
        for e in self._envelopes:
            yield e.seq, e.round, e.sender, e.receiver, e.kind, e.digest
        first = len(self._envelopes)
        for k in range(self.on_disk):
            round_, sender, receiver, kind, _, digest = pickle.loads(self._log[k])[0]
            yield first + k, round_, sender, receiver, kind, digest

    def close(self) -> None:
        """Finish the spill files (trimmed, synced); the transcript stays readable."""
        if self._spill is not None:
            self._spill.close()
            self._log.close()

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Envelope]:
        n = self._count  # a snapshot: envelopes appended while iterating are not visited
        yield from self._envelopes[: min(n, len(self._envelopes))]
        for seq in range(len(self._envelopes), n):
            yield self._from_disk(seq)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._count))]
        i = operator.index(i)
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError("transcript index out of range")
        if i < len(self._envelopes):
            return self._envelopes[i]
        return self._from_disk(i)

    @property
    def envelopes(self) -> tuple[Envelope, ...]:
        """Every envelope, as a tuple (rebuilt from disk for a spilled transcript: iterate
        instead when the transcript may be long)."""
        return tuple(self)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def digest(self) -> str:
        """Hash of the whole transcript (routing + payload digests), order-sensitive."""
        h = hashlib.sha256()
        for seq, round_, sender, receiver, kind, digest in self._headers():
            h.update(f"{seq}|{round_}|{sender}|{receiver}|{kind}|{digest}\n".encode())
        return h.hexdigest()

    def parties(self) -> list[str]:
        names = set()
        for _, _, sender, receiver, _, _ in self._headers():
            names.update((sender, receiver))
        return sorted(names)

    def view(
        self,
        observer: str,
        colluders: Sequence[str] = (),
        own_data: Mapping[str, np.ndarray] | None = None,
        public: PublicInfo | None = None,
    ) -> View:
        """What ``observer`` (plus colluders) saw. ``eavesdropper`` sees every envelope.

        On a transcript that spilled to disk the view's envelopes are a lazy, read-only
        sequence (:class:`EnvelopeSeq`): each is read from the files when it is used."""
        who = {observer, *colluders}
        if self.on_disk:
            picked = [
                seq
                for seq, _, sender, receiver, _, _ in self._headers()
                if route_visible_to(sender, receiver, who)
            ]
            if len(picked) == self._count:
                seen = EnvelopeSeq(self, range(self._count))
            else:
                seen = EnvelopeSeq(self, np.asarray(picked, dtype=np.int64))
        else:
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
        for e in self:
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
        _atomic_savez(directory / "payloads.npz", arrays)

    @classmethod
    def load(cls, directory: str | Path) -> Transcript:
        """Reload a saved transcript, checking every payload digest.

        The payload arrays are read-only views of a read-only memory map of ``payloads.npz``
        (:func:`testbed.exchange.spill.mapped_npz`), not copies: a transcript larger than memory (one that
        spilled while it was recorded) loads, and its pages are read from disk when a view or an
        attack touches them. After hashing, verified pages are dropped from the resident set."""
        directory = Path(directory)
        env_path, npz_path = directory / "envelopes.jsonl", directory / "payloads.npz"
        for p in (env_path, npz_path):
            if not p.exists():
                raise TestbedError(f"{p}: transcript file not found")
        arrays = mapped_npz(npz_path)  # read-only memory map: pages are read when touched
        out = cls()
        for lineno, line in enumerate(env_path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                payload = _decode(rec["payload"], arrays)
                algorithm = digest_algorithm(str(rec["digest"]))
                if algorithm not in ("blake3", "sha256"):
                    raise ValueError(f"unknown digest algorithm {algorithm!r}")
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
                algorithm=algorithm,
            )
            if env.digest != rec["digest"]:
                raise TestbedError(
                    f"{env_path}:{lineno}: payload digest mismatch for message #{env.seq}"
                )
            out._append(env)
            arrays.release_verified(env.nbytes)  # hashed pages leave the resident set
        return out


# ----------------------------------------------------------------------------- view
class EnvelopeSeq(Sequence):
    """A read-only sequence of some of a transcript's envelopes (by sequence number), each
    read from the transcript when it is used: the envelopes of a view of a spilled transcript."""

    __slots__ = ("_seqs", "_transcript")

    def __init__(self, transcript: Transcript, seqs):
        self._transcript = transcript
        self._seqs = seqs

    def __len__(self) -> int:
        return len(self._seqs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[k] for k in range(*i.indices(len(self))))
        return self._transcript[int(self._seqs[i])]

    def __iter__(self) -> Iterator[Envelope]:
        for seq in self._seqs:
            yield self._transcript[int(seq)]

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __repr__(self) -> str:
        return f"EnvelopeSeq({len(self)} envelopes, read from disk)"


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
    envelopes: Sequence[Envelope]  # a tuple, or a lazy EnvelopeSeq for a spilled transcript
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
        for e in self.envelopes:  # envelope digests: verified on load, payloads are immutable
            h.update(e.digest.encode())
            h.update(f"{e.seq}{e.kind}{e.sender}{e.receiver}".encode())
        for k in sorted(self.own_data):
            h.update(payload_digest(self.own_data[k]).encode())
        return h.hexdigest()
