"""Bounded transcript memory: payload arrays spilled to an append-only file, read memory-mapped.

Once a transcript holds more than a threshold of payload bytes in memory, every further payload's
arrays are appended to ``payloads.spill`` in the run directory and the logged envelope keeps
read-only arrays that are views of a read-only memory map of that file. The bytes, and so the
digests, are those that were sent; pages are read from disk when an attack or a view touches them,
and the operating system may drop them again, so resident memory stays bounded however long the
run is. The file is only ever appended to; nothing in it is rewritten.

Each spilled envelope's header goes to ``envelopes.spill`` as JSON behind a keyed BLAKE3 hash
(the key lives only in the driver's memory): a header is checked before it is parsed, a payload
is re-hashed when it is read back, and nothing is ever unpickled (docs/reference/trust.md).
"""

from __future__ import annotations

import json
import mmap
import operator
import os
import struct
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType

import numpy as np
from blake3 import blake3

from testbed.errors import DataError, TestbedError
from testbed.exchange.envelope import Envelope, envelope_record
from testbed.exchange.payload import Payload, digest_algorithm, payload_digest
from testbed.measure import Measure

__all__ = [
    "HEADER_NAME",
    "SPILL_NAME",
    "HeaderLog",
    "MappedNpz",
    "SpillStore",
    "header_json",
    "mac",
    "mapped_npz",
    "parse_header",
    "read_spilled",
    "record_of",
    "restored",
]

SPILL_NAME = "payloads.spill"
HEADER_NAME = "envelopes.spill"
_ALIGN = 64
_GROW = 64 << 20  # the file grows (sparse) by at least this much, so re-mapping is rare


#: Bytes handed out as views of the file between two releases of the map's pages from the
#: resident set (:meth:`SpillStore.release`).
RELEASE_BYTES = 64 << 20


class SpillStore:
    """An append-only payload file with memory-mapped, read-only reads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd = -1  # the file is created on the first spilled array
        self._used = 0
        self._cap = 0
        self._map: mmap.mmap | None = None
        self.arrays = 0
        self._viewed = 0  # bytes handed out as views since the last release

    @property
    def nbytes(self) -> int:
        """Bytes written so far."""
        return self._used

    def _write(self, a: np.ndarray) -> list:
        """Append ``a``'s bytes; returns where they are: (offset, dtype, shape)."""
        a = np.ascontiguousarray(a)
        if self._fd < 0 and self._cap == 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        off = -(-self._used // _ALIGN) * _ALIGN
        end = off + a.nbytes
        if end > self._cap:
            self._cap = max(end, 2 * self._cap, self._cap + _GROW)
            os.ftruncate(self._fd, self._cap)
            self._map = None  # arrays handed out keep their own (older) map alive
        if a.nbytes:
            os.pwrite(self._fd, memoryview(a.reshape(-1)).cast("B"), off)
        self._used = end
        self.arrays += 1
        return [off, a.dtype.str, list(a.shape)]

    def _view(self, off: int, dtype: str, shape) -> np.ndarray:
        """A read-only view of bytes written by :meth:`_write` (a place read back from a
        header file is checked: a plain dtype, a shape of whole numbers, inside the file)."""
        try:
            dt = np.dtype(str(dtype))
            shape = tuple(operator.index(n) for n in shape)
            off = operator.index(off)
        except (TypeError, ValueError) as exc:
            raise DataError(f"{self.path}: bad array place in a header ({exc})") from None
        if dt.hasobject or dt.fields is not None or off < 0 or any(n < 0 for n in shape):
            raise DataError(f"{self.path}: bad array place in a header ({dt}, {shape}, {off})")
        if self._map is None:
            if self._fd >= 0:
                self._map = mmap.mmap(self._fd, self._cap, access=mmap.ACCESS_READ)
            else:  # closed: map the finished file
                with open(self.path, "rb") as f:
                    self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        count = int(np.prod(shape, dtype=np.int64))
        try:
            out = np.frombuffer(self._map, dtype=dt, count=count, offset=off).reshape(shape)
        except ValueError as exc:
            raise DataError(f"{self.path}: array outside the file ({exc})") from None
        self._viewed += out.nbytes
        if self._viewed >= RELEASE_BYTES:  # whatever reads it back: a pass over a spilled
            self._viewed = 0  # transcript (results, view, save) by any path would otherwise
            self.release()  # keep all of it resident (5 GB at 1000 FedBary clients)
        return out

    def layout(self, p: Payload):
        """Write ``p``'s arrays and return a JSON-able description of the payload (arrays as
        their place in the file) that :meth:`restore` turns back into it. Nothing in it is
        code: a header file is parsed as JSON, never unpickled."""
        if isinstance(p, Measure):
            return ["measure", self._write(p.support), self._write(p.weights)]
        if isinstance(p, np.ndarray):
            return ["array", self._write(p)]
        if isinstance(p, Mapping):
            return ["mapping", [[k, self.layout(v)] for k, v in p.items()]]
        if p is None or isinstance(p, (bool, int, float, str)):
            return ["value", p]
        raise TypeError(f"cannot spill a payload of type {type(p).__name__}")

    def restore(self, spec) -> Payload:
        """The payload :meth:`layout` described, its arrays read-only views of the file."""
        try:
            tag = spec[0]
            if tag == "measure":
                out = object.__new__(Measure)  # the caller re-hashes the bytes it restored
                object.__setattr__(out, "support", self._view(*spec[1]))
                object.__setattr__(out, "weights", self._view(*spec[2]))
                return out
            if tag == "array":
                return self._view(*spec[1])
            if tag == "mapping":
                return MappingProxyType({str(k): self.restore(v) for k, v in spec[1]})
            if tag == "value" and (spec[1] is None or isinstance(spec[1], (bool, int, float, str))):
                return spec[1]
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            raise DataError(f"{self.path}: bad payload layout in a header ({exc})") from None
        raise DataError(f"{self.path}: bad payload layout in a header ({str(spec)[:40]})")

    def spill(self, p: Payload) -> Payload:
        """The same payload with every array replaced by a read-only view of the file."""
        return self.restore(self.layout(p))

    def release(self) -> None:
        """Drop this process's pages of the file's current map from its resident set
        (``MADV_DONTNEED`` on a read-only file map: the bytes stay valid and are read again
        from the page cache or disk when touched). Reading a whole spilled transcript back
        (saving it) would otherwise keep every page of it resident."""
        if self._map is not None and hasattr(self._map, "madvise"):
            self._map.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        """Trim the file to what was written and close the descriptor (maps stay readable)."""
        if self._fd >= 0:
            os.ftruncate(self._fd, self._used)
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
            self._map = None  # the next read maps the trimmed file

    def __del__(self):  # pragma: no cover - best effort
        try:
            if self._fd >= 0:
                os.close(self._fd)
        except OSError:
            pass


class HeaderLog:
    """Append-only file of records (bytes), read back by number: ``<name>`` holds the records,
    ``<name>.idx`` their (offset, length) as two little-endian int64 each, so reading record
    ``i`` costs two ``pread`` calls and nothing is kept in memory per record."""

    _IDX = struct.Struct("<qq")

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.idx_path = self.path.with_name(self.path.name + ".idx")
        self._data = self._idx = None
        self._end = 0
        self._dirty = False
        self.count = 0

    @classmethod
    def existing(cls, path: str | Path) -> HeaderLog:
        """A finished log on disk, opened read-only (``testbed verify``)."""
        log = cls(path)
        log._data = open(log.path, "rb")  # noqa: SIM115 (kept open)
        log._idx = open(log.idx_path, "rb")  # noqa: SIM115
        size = os.fstat(log._idx.fileno()).st_size
        if size % cls._IDX.size:
            raise DataError(f"{log.idx_path}: truncated index ({size} bytes)")
        log.count = size // cls._IDX.size
        log._end = os.fstat(log._data.fileno()).st_size
        return log

    def append(self, record: bytes) -> None:
        if self._data is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._data = open(self.path, "w+b", buffering=1 << 20)  # noqa: SIM115 (kept open)
            self._idx = open(self.idx_path, "w+b", buffering=1 << 16)  # noqa: SIM115
        self._data.write(record)
        self._idx.write(self._IDX.pack(self._end, len(record)))
        self._end += len(record)
        self.count += 1
        self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            self._data.flush()
            self._idx.flush()
            self._dirty = False

    def __getitem__(self, i: int) -> bytes:
        if not 0 <= i < self.count:
            raise IndexError(i)
        self.flush()
        off, n = self._IDX.unpack(os.pread(self._idx.fileno(), self._IDX.size, i * self._IDX.size))
        if off < 0 or n < 0 or off + n > self._end:
            raise DataError(f"{self.idx_path}: entry {i} points outside {self.path.name}")
        return os.pread(self._data.fileno(), n, off)

    def close(self) -> None:
        """Flush and sync; the log stays readable."""
        if self._data is not None and self._data.writable():
            self.flush()
            os.fsync(self._data.fileno())
            os.fsync(self._idx.fileno())

    def __del__(self):  # pragma: no cover - best effort
        for f in (self._data, self._idx):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass


# ----------------------------------------------------------------------------- headers
_MAC = 32  # bytes of the keyed hash in front of every spilled header


def mac(key: bytes, data: bytes) -> bytes:
    return blake3(data, key=key).digest()


def header_json(env: Envelope, layout) -> bytes:
    """A spilled envelope's header: its record (every field, payload as digest) and where its
    arrays are, as JSON."""
    return json.dumps(
        {**env.record(), "layout": layout}, sort_keys=True, separators=(",", ":")
    ).encode()


_HEADER_KEYS = {"seq", "round", "sender", "receiver", "kind", "nbytes", "payload", "meta", "layout"}


def parse_header(raw: bytes, path, seq: int) -> dict:
    try:
        h = json.loads(raw)
        ok = isinstance(h, dict) and set(h) == _HEADER_KEYS and h["seq"] == seq
        ok = ok and isinstance(h["meta"], dict)
    except (ValueError, UnicodeDecodeError, RecursionError):
        ok = False
    if not ok:
        raise TestbedError(f"{path}: the header of message #{seq} is not a valid header")
    return h


def record_of(h: dict) -> dict:
    return envelope_record(
        h["seq"],
        h["round"],
        h["sender"],
        h["receiver"],
        h["kind"],
        h["nbytes"],
        h["payload"],
        h["meta"],
    )


def restored(h: dict, spill: SpillStore, seq: int) -> Envelope:
    """The envelope a spilled header describes, its payload re-hashed: a payload whose bytes
    changed on disk is refused (one line)."""
    try:
        payload = spill.restore(h["layout"])
        algorithm = digest_algorithm(h["payload"])
    except (DataError, ValueError) as exc:
        raise TestbedError(f"message #{seq}: {exc}") from None
    if payload_digest(payload, algorithm) != h["payload"]:
        raise TestbedError(
            f"{spill.path}: the payload of message #{seq} changed on disk (digest mismatch)"
        )
    return Envelope(
        seq=seq,
        round=h["round"],
        sender=h["sender"],
        receiver=h["receiver"],
        kind=h["kind"],
        payload=payload,
        meta=MappingProxyType(h["meta"]),
        nbytes=h["nbytes"],
        digest=h["payload"],
    )


def read_spilled(directory: str | Path) -> tuple[int, Iterator[Envelope]]:
    """The envelopes a finished run spilled into ``directory`` (``envelopes.spill`` and its
    index, ``payloads.spill``), without the run's key: each header is parsed as JSON (never
    unpickled) and each payload re-hashed against its header's digest. Returns the count and
    the envelopes in order (from the first spilled sequence number)."""
    directory = Path(directory)
    log = HeaderLog.existing(directory / HEADER_NAME)
    spill = SpillStore(directory / SPILL_NAME)

    def envelopes() -> Iterator[Envelope]:
        first = None
        for k in range(log.count):
            raw = log[k]
            if len(raw) < _MAC:
                raise TestbedError(f"{log.path}: record {k} is truncated")
            if first is None:
                try:
                    first = int(json.loads(raw[_MAC:])["seq"])
                except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                    raise TestbedError(f"{log.path}: record 0 is not a valid header") from None
            yield restored(parse_header(raw[_MAC:], log.path, first + k), spill, first + k)

    return log.count, envelopes()


# ----------------------------------------------------------------------------- reading a saved npz
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # a zip member's local file header (30 bytes)
_RELEASE_EVERY = 64 << 20


class MappedNpz(dict):
    """The arrays of an uncompressed ``.npz`` as read-only views of one read-only memory map
    (members that cannot be mapped — compressed, object or Fortran-ordered — are read normally).

    :meth:`release_verified` drops the mapped pages from this process's resident set every
    ``_RELEASE_EVERY`` bytes that the caller has finished with (``MADV_DONTNEED`` on a read-only
    file map: the data stays valid and is read again from the page cache or disk when touched)."""

    def __init__(self, arrays, mm: mmap.mmap | None):
        super().__init__(arrays)
        self.map = mm
        self._pending = 0

    def release_verified(self, nbytes: int) -> None:
        self._pending += nbytes
        if self.map is not None and self._pending >= _RELEASE_EVERY:
            self._pending = 0
            self.release()

    def release(self) -> None:
        if self.map is not None and hasattr(self.map, "madvise"):
            self.map.madvise(mmap.MADV_DONTNEED)


def _member_offset(f, info: zipfile.ZipInfo) -> int:
    """Offset of a stored member's bytes: after its local header, name and extra field."""
    f.seek(info.header_offset)
    fields = _LOCAL_HEADER.unpack(f.read(_LOCAL_HEADER.size))
    if fields[0] != b"PK\x03\x04":
        raise ValueError(f"bad zip local header for {info.filename}")
    return info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1]


def mapped_npz(path: str | Path) -> MappedNpz:
    """Every array of the ``.npz`` at ``path`` (as ``np.load`` would give, keys without
    ``.npy``), memory-mapped read-only where the member is stored uncompressed (``np.savez``)."""
    path = Path(path)
    out: dict[str, np.ndarray] = {}
    fallback = []
    mm = None
    with open(path, "rb") as f, zipfile.ZipFile(f) as zf:
        if path.stat().st_size:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        for info in zf.infolist():
            key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if info.compress_type != zipfile.ZIP_STORED or mm is None:
                fallback.append(key)
                continue
            start = _member_offset(f, info)
            f.seek(start)
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                fallback.append(key)
                continue
            if fortran or dtype.hasobject:
                fallback.append(key)
                continue
            count = int(np.prod(shape, dtype=np.int64))
            a = np.frombuffer(mm, dtype=dtype, count=count, offset=f.tell())
            out[key] = a.reshape(shape)
    if fallback:
        with np.load(path, allow_pickle=False) as z:
            for key in fallback:
                out[key] = z[key]
    return MappedNpz(out, mm)
