"""The privacy guard's index: every private row of a run, built once, searched in O(length).

:class:`RowIndex` answers one question for a whole vector of numbers at once: which windows of
``d`` consecutive values lie within a party's threshold of one of that party's private rows.
Every window start is a candidate (rows at any offset, flattened blocks, rows inside wider rows),
and the cost is a few elementwise passes over the vector, whatever the number of parties or
private rows: each row is indexed by an anchor (a few of its consecutive coordinates, quantised);
a hashed bitmap of all anchors says in one array lookup which positions of the vector can start a
near-copy at all (almost none can); those few are matched against the sorted anchor keys
(``searchsorted``) and checked at full dimension against each candidate row's own threshold.

:class:`ByteIndex` finds exact copies of a private row's bytes that start at a byte offset that
is not a multiple of 8 (the same bytes shifted under another dtype; aligned offsets are read as
float64 and checked by value): one pass over the buffer's aligned words against a hashed bitmap
of per-row anchor words, each hit confirmed byte for byte.

Hash collisions only add candidates; every reported hit is checked exactly.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["ByteIndex", "Hit", "RowIndex"]

_EPS = np.finfo(np.float64).eps
_H = tuple(np.uint64(h) for h in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9))
_BITS = 24  # largest bitmap: 2**24 slots

Hit = tuple[int, int, float]  # (window start, private row, distance)


class RowIndex:
    """Private rows of width ``d`` (float64), their owners (int) and thresholds.

    Each row is indexed by an *anchor*: ``t`` consecutive coordinates (``t = min(3, d)``, the
    run of them whose quantised values are rarest among all rows), quantised to cells of width
    ``c >= 64 x`` the largest threshold. A window within ``tol`` of the row has each anchor
    value within ``tol`` of the row's, so it lies in the row's cell, or in the neighbouring cell
    when the row's value is within ``tol`` of a cell boundary (those neighbours are indexed
    too). One pass over a vector's consecutive ``t``-tuples, looked up in a hashed bitmap of all
    anchors, therefore finds every window start that can be a near-copy; the few found are
    checked at full dimension.
    """

    def __init__(self, rows: np.ndarray, owner: np.ndarray, tol: np.ndarray):
        self.P = np.ascontiguousarray(rows, dtype=np.float64)
        self.owner, self.tol = np.asarray(owner, dtype=np.int64), np.asarray(tol, np.float64)
        n, d = self.P.shape
        self.d, self.t = d, min(3, d)
        tol_max = float(self.tol.max()) if n else 1.0
        self.cell = float(2.0 ** np.ceil(np.log2(64.0 * tol_max))) if tol_max > 0 else 1.0
        self._inv = 1.0 / self.cell
        keys, rows_, offs = self._anchors()
        order = np.argsort(keys, kind="stable")
        self.keys, self.rows, self.offs = keys[order], rows_[order], offs[order]
        self.bits = np.zeros(_slots(len(keys)), dtype=bool)
        self._shift = np.uint64(64 - int(np.log2(self.bits.size)))
        self.bits[self._slot(self.keys)] = True

    def _cells(self, f: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            return np.floor(f * self._inv).astype(np.int64)

    def _tuple_keys(self, q: np.ndarray) -> np.ndarray:
        """64-bit key of every run of ``t`` consecutive cells along the last axis."""
        t, m = self.t, q.shape[-1] - self.t + 1
        with np.errstate(over="ignore"):
            h = q[..., :m].view(np.uint64) * _H[0]
            for i in range(1, t):
                h ^= q[..., i : i + m].view(np.uint64) * _H[i]
            h *= _H[0]
        return h

    def _anchors(self):
        """Each row's rarest run of ``t`` cells, plus its neighbours where a value is within the
        row's threshold of a cell boundary: (keys, row, offset of the run in the row)."""
        n, t = len(self.P), self.t
        if not n:
            z = np.zeros(0, np.int64)
            return z.astype(np.uint64), z, z
        q = self._cells(self.P)
        all_keys = self._tuple_keys(q)  # (n, d - t + 1)
        # how often each run occurs among all rows (hashed counts: collisions only overcount)
        slots = (all_keys >> np.uint64(64 - 20)).astype(np.int64)
        counts = np.bincount(slots.reshape(-1), minlength=1 << 20)
        k = np.argmin(counts[slots], axis=1)
        at = np.arange(n)[:, None]
        span = k[:, None] + np.arange(t)
        vals, cells = self.P[at, span], q[at, span]  # (n, t)
        frac = vals * self._inv - cells
        margin = (self.tol[:, None] + 4 * _EPS * np.abs(vals)) * self._inv
        low, high = frac < margin, frac > 1.0 - margin
        keys, rows_, offs = [self._tuple_keys(cells)[:, 0]], [np.arange(n)], [k]
        edge = np.flatnonzero(np.any(low | high, axis=1))  # few rows: near a cell boundary
        low, high, ec = low[edge], high[edge], cells[edge]
        for shifts in np.ndindex(*(3,) * t):  # each coordinate: cell -1, 0 or +1
            sh = np.asarray(shifts) - 1
            if not sh.any():
                continue
            need = np.all((sh == 0) | ((sh < 0) & low) | ((sh > 0) & high), axis=1)
            if need.any():
                keys.append(self._tuple_keys(ec[need] + sh)[:, 0])
                rows_.append(edge[need])
                offs.append(k[edge[need]])
        return np.concatenate(keys), np.concatenate(rows_), np.concatenate(offs)

    def _slot(self, keys: np.ndarray) -> np.ndarray:
        return (keys >> self._shift).astype(np.int64)

    def __len__(self) -> int:
        return len(self.P)

    def search(self, f: np.ndarray, skip: np.ndarray | None = None) -> Hit | None:
        """The first window of the float64 vector ``f`` within its owner's threshold of a
        private row (owners flagged in ``skip`` are ignored), or None."""
        d, L = self.d, f.size
        if not len(self) or L < d:
            return None
        if not (np.isfinite(f.max()) and np.isfinite(f.min())):  # NaN and inf read as 0
            f = np.where(np.isfinite(f), f, 0.0)
        keys = self._tuple_keys(self._cells(f))
        cand = np.flatnonzero(self.bits[self._slot(keys)])
        if not cand.size:
            return None
        key = keys[cand]
        lo = np.searchsorted(self.keys, key, side="left")
        hi = np.searchsorted(self.keys, key, side="right")
        counts = hi - lo
        keep = counts > 0
        cand, lo, counts = cand[keep], lo[keep], counts[keep]
        if not cand.size:
            return None
        first = np.cumsum(counts) - counts
        pos = np.arange(int(counts.sum())) - np.repeat(first, counts) + np.repeat(lo, counts)
        row = self.rows[pos]
        starts = np.repeat(cand, counts) - self.offs[pos]
        ok = (starts >= 0) & (starts <= L - d)
        if skip is not None:
            ok &= ~skip[self.owner[row]]
        starts, row = starts[ok], row[ok]
        if not row.size:
            return None
        windows = sliding_window_view(f, d)[starts]
        with np.errstate(invalid="ignore", over="ignore"):
            dist = np.linalg.norm(windows - self.P[row], axis=1)
        good = np.flatnonzero(dist <= self.tol[row])
        if not good.size:
            return None
        # the earliest window, and for it the nearest private row
        first_start = starts[good].min()
        at = good[starts[good] == first_start]
        best = at[np.argmin(dist[at])]
        return int(first_start), int(row[best]), float(dist[best])


class ByteIndex:
    """Exact copies of private rows' bytes (float64, ``8d`` bytes each) starting at a byte
    offset that is not a multiple of 8 (offsets that are are checked by value).

    If a row's bytes start at offset ``s`` with ``s % 8 = a``, the buffer's aligned 8-byte
    words cut the row at row offsets ``o = 8k + 8 - a``. For each row and each ``a`` one such
    word (the one with the most nonzero bytes) is its *anchor*; one pass over the buffer's
    aligned words, looked up in a hashed bitmap of all anchors, finds every place a row can
    start, and each is confirmed byte for byte.
    """

    def __init__(self, rows: np.ndarray, owner: np.ndarray):
        self.P = np.ascontiguousarray(rows, dtype=np.float64)
        self.owner = np.asarray(owner, dtype=np.int64)
        n, d = self.P.shape
        self.d = d
        raw = self.P.view(np.uint8).reshape(n, 8 * d)
        values, rows_, offs = [], [], []
        if d >= 2 and n:
            # the pair of neighbouring values with the most nonzero bytes gives every anchor
            nz = (raw.reshape(n, d, 8) != 0).sum(axis=2)
            k = np.argmax(nz[:, :-1] + nz[:, 1:], axis=1)
            at = np.arange(n)[:, None]
            for a in range(1, 8):
                o = 8 * k + 8 - a  # where aligned words cut a row that starts at offset a
                piece = np.ascontiguousarray(raw[at, o[:, None] + np.arange(8)])
                values.append(piece.view(np.uint64)[:, 0])
                rows_.append(np.arange(n))
                offs.append(o)
        v = np.concatenate(values) if values else np.zeros(0, np.uint64)
        order = np.argsort(v, kind="stable")
        self.anchors = v[order]
        self.rows = (np.concatenate(rows_) if rows_ else np.zeros(0, np.int64))[order]
        self.offs = (np.concatenate(offs) if offs else np.zeros(0, np.int64))[order]
        self.bits = np.zeros(_slots(len(v)), dtype=bool)
        self._shift = np.uint64(64 - int(np.log2(self.bits.size)))
        self.bits[self._slot(self.anchors)] = True

    def _slot(self, words: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return ((words * _H[0]) >> self._shift).astype(np.int64)

    def search(self, buf: np.ndarray, skip=None) -> Hit | None:
        """First misaligned exact copy of a private row's bytes in the uint8 array ``buf``:
        ``(byte offset, row, 0.0)``, or None."""
        n8 = buf.size // 8
        if not self.anchors.size or n8 < self.d:
            return None
        words = (
            np.frombuffer(buf[: 8 * n8].tobytes(), dtype=np.uint64)
            if (buf.ctypes.data % 8)
            else buf[: 8 * n8].view(np.uint64)
        )
        cand = np.flatnonzero(self.bits[self._slot(words)])
        if not cand.size:
            return None
        w = words[cand]
        lo = np.searchsorted(self.anchors, w, side="left")
        hi = np.searchsorted(self.anchors, w, side="right")
        size, row_bytes = buf.size, 8 * self.d
        for m, i0, i1 in zip(cand[hi > lo], lo[hi > lo], hi[hi > lo]):
            for i in range(int(i0), int(i1)):
                row, start = int(self.rows[i]), 8 * int(m) - int(self.offs[i])
                if start < 0 or start + row_bytes > size:
                    continue
                if skip is not None and skip[self.owner[row]]:
                    continue
                if np.array_equal(buf[start : start + row_bytes], self.P[row].view(np.uint8)):
                    return start, row, 0.0
        return None


def _slots(n: int) -> int:
    """Bitmap size for ``n`` keys: about 64 slots per key, a power of two in [2**12, 2**24]."""
    return 1 << int(min(max(np.ceil(np.log2(max(64 * n, 1))), 12), _BITS))
