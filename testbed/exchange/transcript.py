"""The append-only transcript of delivered envelopes, its files, and observer views.

A transcript is saved as ``envelopes.jsonl`` (routing, digests, payload layout) plus
``payloads.npz`` and reloads byte for byte: every payload digest is checked on load.
"""

from __future__ import annotations

import fnmatch
import json
import operator
import os
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from testbed.errors import TestbedError
from testbed.exchange.envelope import Envelope, route_visible_to, visible_to
from testbed.exchange.payload import (
    Payload,
    _ro,
    canonical_digest,
    canonical_update,
    digest_algorithm,
    finish_digest,
    new_hasher,
    payload_digest,
    sequence_header,
)
from testbed.exchange.spill import (
    _MAC,
    HEADER_NAME,
    SPILL_NAME,
    HeaderLog,
    SpillStore,
    header_json,
    mac,
    mapped_npz,
    parse_header,
    read_spilled,
    record_of,
    restored,
)
from testbed.measure import Measure, is_mapped_readonly

#: In-memory payload bytes a spilling transcript keeps before it writes payloads to disk.
DEFAULT_SPILL_THRESHOLD = 256 << 20

__all__ = [
    "TRANSCRIPT_FORMAT",
    "EnvelopeSeq",
    "PublicInfo",
    "Transcript",
    "View",
    "atomic_write_bytes",
    "read_spilled",
    "records_digest",
]

#: first item of every transcript digest's encoding (the format's name and version)
TRANSCRIPT_FORMAT = "testbed-transcript/2"


TEMP_MARK = "testbed-"  # in every temp file name the testbed creates; restarts delete only these


def _make_parent(path: Path) -> None:
    """Create ``path``'s folder; a file in the way is one line naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise TestbedError(
            f"{path.parent}: is a file, so {path.name} cannot be written there; move it away"
        ) from None


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, then rename)."""
    path = Path(path)
    if path.is_dir():  # os.replace would fail naming the temporary file, not this one
        raise TestbedError(f"{path}: is a directory, so the file cannot be written; move it away")
    _make_parent(path)
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


def _atomic_savez(path: Path, arrays: Iterable[tuple[str, np.ndarray]]) -> None:
    """``np.savez``'s file (an uncompressed zip of ``NAME.npy`` members, zip64 forced), written
    straight into a temporary file next to ``path``, then renamed: the ``(name, array)`` pairs
    are written as they come, so a caller can hand them out one envelope at a time."""
    _make_parent(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{TEMP_MARK}", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
                for key, val in arrays:
                    with z.open(f"{key}.npy", "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, np.asanyarray(val), allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def records_digest(records: Iterable[Mapping[str, Any]], count: int) -> str:
    """The transcript digest of ``count`` envelope records (in order), streamed."""
    h = new_hasher()
    canonical_update(h, TRANSCRIPT_FORMAT)
    h.update(sequence_header(count))
    n = 0
    for r in records:
        canonical_update(h, r)
        n += 1
    if n != count:
        raise TestbedError(f"transcript changed while it was hashed ({n} records, not {count})")
    return finish_digest(h)


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
        self._key = os.urandom(32)  # keys the spilled headers' hashes; never written anywhere
        self._digest: tuple[int, str] | None = None
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
            self._log.append(self._seal(header_json(env, layout)))
        else:
            self._in_memory += env.nbytes
            self._envelopes.append(env)
        self._count += 1
        self._nbytes += env.nbytes

    def _seal(self, header: bytes) -> bytes:
        """A header record: a keyed BLAKE3 of the JSON header (the key exists only in this
        process's memory), then the header."""
        return mac(self._key, header) + header

    def _header(self, k: int) -> dict:
        """Spilled header ``k``, its keyed hash checked before it is parsed (as JSON)."""
        rec = self._log[k]
        seq = len(self._envelopes) + k
        if len(rec) < _MAC or rec[:_MAC] != mac(self._key, rec[_MAC:]):
            raise TestbedError(
                f"{self._log.path}: the header of message #{seq} was changed after it was "
                "written (keyed hash mismatch); the transcript is not what was sent"
            )
        return parse_header(rec[_MAC:], self._log.path, seq)

    def _from_disk(self, seq: int) -> Envelope:
        h = self._header(seq - len(self._envelopes))
        return restored(h, self._spill, seq)

    def _records(self) -> Iterator[dict]:
        """Every envelope's :func:`~testbed.exchange.envelope.envelope_record`, without reading
        any payload (a spilled envelope's record comes from its header)."""
        for e in self._envelopes:
            yield e.record()
        for k in range(self.on_disk):
            yield record_of(self._header(k))

    def close(self) -> None:
        """Finish the spill files (trimmed, synced); the transcript stays readable."""
        if self._spill is not None:
            self._spill.close()
            self._log.close()

    def relocate(self, directory: str | Path) -> None:
        """The spill files were moved (with their run directory) to ``directory``: read them
        there from now on (open descriptors and maps stay valid; a fresh map opens the path)."""
        if self._spill is not None:
            self._spill.path = Path(directory) / SPILL_NAME
            self._log.path = Path(directory) / HEADER_NAME
            self._log.idx_path = self._log.path.with_name(HEADER_NAME + ".idx")

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Envelope]:
        n = self._count  # a snapshot: envelopes appended while iterating are not visited
        yield from self._envelopes[: min(n, len(self._envelopes))]
        for seq in range(len(self._envelopes), n):
            yield self._from_disk(seq)  # the spill store releases the pages read every 64 MB

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
        """Digest of the whole transcript, order-sensitive: the canonical encoding of every
        envelope's fields (seq, round, sender, receiver, kind, size, payload digest, meta)."""
        if self._digest is None or self._digest[0] != self._count:  # once per length
            self._digest = (self._count, records_digest(self._records(), self._count))
        return self._digest[1]

    def spill_digest(self) -> str | None:
        """Digest of the spilled envelopes alone (None when nothing spilled): what
        ``testbed verify`` re-checks from the spill files of a run that did not save its
        transcript."""
        if not self.on_disk:
            return None
        return records_digest(
            (record_of(self._header(k)) for k in range(self.on_disk)), self.on_disk
        )

    def parties(self) -> list[str]:
        names = set()
        for r in self._records():
            names.update((r["sender"], r["receiver"]))
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
                r["seq"]
                for r in self._records()
                if route_visible_to(r["sender"], r["receiver"], who)
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
        lines: list[str] = []

        def arrays() -> Iterator[tuple[str, np.ndarray]]:
            for e in self:
                got: dict[str, np.ndarray] = {}
                spec = _encode(e.payload, f"{e.seq}", got)
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
                    "record": canonical_digest(e.record()),
                }
                lines.append(json.dumps(rec, sort_keys=True))
                yield from got.items()  # the spill store releases the pages read
            if self._spill is not None:
                self._spill.release()

        _atomic_savez(directory / "payloads.npz", arrays())
        atomic_write_bytes(directory / "envelopes.jsonl", ("\n".join(lines) + "\n").encode())

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
        try:
            arrays = mapped_npz(npz_path)  # read-only memory map: pages are read when touched
        except Exception as exc:  # noqa: BLE001 - whatever a corrupted zip or .npy header raises
            raise TestbedError(
                f"{npz_path}: not a readable payload file ({type(exc).__name__}: {exc})"
            ) from None
        out = cls()
        if not env_path.is_file():
            raise TestbedError(f"{env_path}: not a file")
        with open(env_path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                env = _loaded_envelope(line, arrays, f"{env_path}:{lineno}")
                try:
                    out._append(env)
                except TestbedError as exc:
                    raise TestbedError(f"{env_path}:{lineno}: {exc}") from None
                arrays.release_verified(env.nbytes)  # hashed pages leave the resident set
        return out


def _loaded_envelope(line: bytes, arrays, where: str) -> Envelope:
    """One line of ``envelopes.jsonl`` as an envelope, its payload digest and its record digest
    (every field, meta included) checked; a mismatch is one line naming ``where``."""
    try:
        rec = json.loads(line)
        payload = _decode(rec["payload"], arrays)
        algorithm = digest_algorithm(str(rec["digest"]))
        env = Envelope.make(
            seq=rec["seq"],
            round=rec["round"],
            sender=rec["sender"],
            receiver=rec["receiver"],
            kind=rec["kind"],
            payload=payload,
            meta=rec["meta"],
            algorithm=algorithm,
        )
        record = str(rec["record"])
        record_algorithm = digest_algorithm(record)
    except Exception as exc:  # noqa: BLE001 - any unreadable record or payload array (its .npy
        # header, a zip member that does not inflate, a bad digest name) is one line naming it
        raise TestbedError(
            f"{where}: corrupt transcript record ({type(exc).__name__}: {exc})"
        ) from None
    if env.digest != rec["digest"]:
        raise TestbedError(f"{where}: payload digest mismatch for message #{env.seq}")
    if env.nbytes != rec.get("nbytes"):
        raise TestbedError(f"{where}: size of message #{env.seq} does not match its payload")
    if canonical_digest(env.record(), record_algorithm) != record:
        raise TestbedError(
            f"{where}: record digest mismatch for message #{env.seq} (routing, kind or meta "
            "changed)"
        )
    return env


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
    #: a chained attack's input (its scenario entry's ``input:``): the AttackOutputs of the
    #: attack that label names, run on this same view (its baseline's outputs when the chained
    #: attack's baseline runs); empty for an attack without ``input:``. Never ground truth.
    upstream: Sequence[Any] = ()

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
        """Digest of what the observer saw: every visible envelope's record (payload digests
        verified on load, payloads immutable) and its own data."""
        h = new_hasher()
        canonical_update(h, "testbed-view/2")
        canonical_update(h, [self.observer, list(self.colluders)])
        h.update(sequence_header(len(self.envelopes)))
        for e in self.envelopes:
            canonical_update(h, e.record())
        canonical_update(h, {k: payload_digest(v) for k, v in self.own_data.items()})
        return finish_digest(h)
