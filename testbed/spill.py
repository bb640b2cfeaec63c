"""Bounded transcript memory: payload arrays spilled to an append-only file, read memory-mapped.

Once a transcript holds more than a threshold of payload bytes in memory, every further payload's
arrays are appended to ``payloads.spill`` in the run directory and the logged envelope keeps
read-only arrays that are views of a read-only memory map of that file. The bytes, and so the
digests, are those that were sent; pages are read from disk when an attack or a view touches them,
and the operating system may drop them again, so resident memory stays bounded however long the
run is. The file is only ever appended to; nothing in it is rewritten.
"""

from __future__ import annotations

import mmap
import os
import struct
import zipfile
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import numpy as np

from testbed.measure import Measure
from testbed.payload import Payload

__all__ = ["SPILL_NAME", "MappedNpz", "SpillStore", "mapped_npz"]

SPILL_NAME = "payloads.spill"
_ALIGN = 64
_GROW = 64 << 20  # the file grows (sparse) by at least this much, so re-mapping is rare


class SpillStore:
    """An append-only payload file with memory-mapped, read-only reads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd = -1  # the file is created on the first spilled array
        self._used = 0
        self._cap = 0
        self._map: mmap.mmap | None = None
        self.arrays = 0

    @property
    def nbytes(self) -> int:
        """Bytes written so far."""
        return self._used

    def _append_array(self, a: np.ndarray) -> np.ndarray:
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
        if self._map is None:
            self._map = mmap.mmap(self._fd, self._cap, access=mmap.ACCESS_READ)
        out = np.frombuffer(self._map, dtype=a.dtype, count=a.size, offset=off)
        return out.reshape(a.shape)

    def spill(self, p: Payload) -> Payload:
        """The same payload with every array replaced by a read-only view of the file."""
        if isinstance(p, Measure):
            out = object.__new__(Measure)  # already validated when it was sent; bytes unchanged
            object.__setattr__(out, "support", self._append_array(p.support))
            object.__setattr__(out, "weights", self._append_array(p.weights))
            return out
        if isinstance(p, np.ndarray):
            return p if p.dtype.hasobject else self._append_array(p)
        if isinstance(p, Mapping):
            return MappingProxyType({k: self.spill(v) for k, v in p.items()})
        return p

    def close(self) -> None:
        """Trim the file to what was written and close the descriptor (maps stay readable)."""
        if self._fd >= 0:
            os.ftruncate(self._fd, self._used)
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

    def __del__(self):  # pragma: no cover - best effort
        try:
            if self._fd >= 0:
                os.close(self._fd)
        except OSError:
            pass


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
