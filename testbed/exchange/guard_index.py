"""The privacy guard's index: every private row of a run, built once, searched in O(length / k).

(k = 8 for dense rows; see :func:`_stride` for rows full of common runs.)

:class:`RowIndex` answers one question for a whole vector of numbers at once: which windows of
``d`` consecutive values lie within a party's threshold of one of that party's private rows.
Every window start is a candidate (rows at any offset, flattened blocks, rows inside wider rows),
and the cost is a few passes over every ``k``-th position of the vector, whatever the number of
parties or private rows:

- values are quantised to cells of width ``c`` (a power of two, at least 64 times the largest
  threshold) by one addition: ``x + 1.5 * 2**52 * c`` rounds ``x`` to a multiple of ``c``, and
  the sum's bits, read as an integer, number the cell;
- each private row is indexed by ``k`` *anchors*: the runs of ``t`` consecutive cells starting at
  ``k`` consecutive offsets ``o, ..., o + k - 1`` of the row (``o`` chosen where the runs are
  rarest among all rows). A window that starts at ``s`` has exactly one of the positions
  ``s + o, ..., s + o + k - 1`` at a multiple of ``k``, so scanning only the positions that are
  multiples of ``k`` meets every window at one of its row's anchors;
- a value within ``tol`` of the row's lies in the row's cell or in the one next to it when the
  row's value is within ``tol`` of a cell boundary: those neighbouring runs are indexed too;
- a hashed bitmap of all anchors says in one array lookup which scanned positions can be an
  anchor at all (almost none can); those few are matched against the sorted anchor keys
  (``searchsorted``) and checked at full dimension against each candidate row's own threshold.

:class:`ByteIndex` finds exact copies of a private row's bytes that start at a byte offset that
is not a multiple of 8 (the same bytes shifted under another dtype; aligned offsets are read as
float64 and checked by value), the same way: every ``k``-th aligned 8-byte word of the buffer
against anchors taken from ``k`` consecutive words of each row, for each of the 7 misalignments.

Hash collisions only add candidates; every reported hit is checked exactly. ``bounds`` (the
starts of the pieces a vector was concatenated from) keeps windows from straddling two pieces.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "TRUNC_BITS",
    "ByteIndex",
    "Hit",
    "RowIndex",
    "WidthIndex",
    "integer_bits",
    "join_pieces",
    "search_joined",
]

_EPS = np.finfo(np.float64).eps
_MIX = np.int64(0x9E3779B97F4A7C15 - (1 << 64))  # odd 64-bit constants (wrapping arithmetic)
_FIB = np.uint64(0xC2B2AE3D27D4EB4F)
_BITS = 27  # largest bitmap: 2**27 slots (16 MiB of bits)
_STRIDE = 8  # at most k = 8 anchors per row by value
_BYTE_STRIDE = 4  # and 4 per row and misalignment by bytes

Hit = tuple[int, int, float]  # (window start, private row, distance)


def _straddles(starts: np.ndarray, length: int, bounds: np.ndarray | None) -> np.ndarray:
    """Windows ``[s, s + length)`` that cross a piece boundary."""
    if bounds is None or bounds.size <= 1:
        return np.zeros(starts.shape, dtype=bool)
    return np.searchsorted(bounds, starts, "right") != np.searchsorted(
        bounds, starts + length - 1, "right"
    )


def _places(index, keys, at, length: int, total: int, skip, bounds):
    """Where a private row can start, for the scanned ``keys`` found in the bitmap at
    positions ``at``: each key looked up among the index's sorted anchors (``index.keys``,
    with ``index.rows`` and their offsets ``index.offs``), kept when the row fits in
    ``[0, total)``, its owner is not skipped and it does not straddle a piece. Returns
    ``(starts, rows)``."""
    lo = np.searchsorted(index.keys, keys, side="left")
    counts = np.searchsorted(index.keys, keys, side="right") - lo
    keep = counts > 0
    at, lo, counts = at[keep], lo[keep], counts[keep]
    first = np.cumsum(counts) - counts
    pos = np.arange(int(counts.sum())) - np.repeat(first, counts) + np.repeat(lo, counts)
    row = index.rows[pos]
    starts = np.repeat(at, counts) - index.offs[pos]
    ok = (starts >= 0) & (starts + length <= total)
    if skip is not None:
        ok &= ~skip[index.owner[row]]
    if bounds is not None:
        ok &= ~_straddles(starts, length, bounds)
    return starts[ok], row[ok]


class RowIndex:
    """Private rows of width ``d`` (float64), their owners (int) and thresholds.

    ``t = min(3, d)`` cells make an anchor; ``k`` anchors per row (at most 8 and ``d - t + 1``,
    fewer for rows full of common runs: :func:`_stride`), so a search scans one position in
    ``k``.
    """

    def __init__(self, rows: np.ndarray, owner: np.ndarray, tol: np.ndarray):
        self.P = np.ascontiguousarray(rows, dtype=np.float64)
        self.owner, self.tol = np.asarray(owner, dtype=np.int64), np.asarray(tol, np.float64)
        n, d = self.P.shape
        self.d, self.t = d, min(3, d)
        tol_max = float(self.tol.max()) if n else 1.0
        top = float(np.abs(self.P).max()) + tol_max if n else 1.0
        # the cell: >= 64 thresholds, and coarse enough that the addition's rounding is a
        # uniform grid over every private value (|x| < 2**50 c)
        cell = max(64.0 * tol_max, top * 2.0**-50, np.finfo(np.float64).tiny * 2.0**60)
        self.cell = float(2.0 ** np.ceil(np.log2(cell)))
        self._magic = 1.5 * 2.0**52 * self.cell
        keys, rows_, offs, self.k = self._anchors()
        order = np.argsort(keys)  # ties between rows are broken by row number in search()
        self.keys, self.rows, self.offs = keys[order], rows_[order], offs[order]
        self.bitmap = _Bitmap(len(keys))
        self.bitmap.add(self.bitmap.slot(self.keys))

    def _cells(self, f: np.ndarray) -> np.ndarray:
        """The cell of every value (int64), by one rounding addition."""
        return (f + self._magic).view(np.int64)  # NaN and inf stay NaN and inf: no warning

    @staticmethod
    def _combine(cols) -> np.ndarray:
        """64-bit key of runs of cells given column by column (wrapping arithmetic)."""
        key = cols[0].copy()  # integer arrays wrap silently
        for c in cols[1:]:
            key *= _MIX
            key += c
        key *= _MIX
        return key

    def _anchors(self):
        """``k`` consecutive runs of ``t`` cells per row, where they are rarest, plus their
        neighbours where a value is within the row's threshold of a cell boundary:
        (keys, row, offset of the run in the row, the stride k)."""
        n, d, t = len(self.P), self.d, self.t
        if not n:
            z = np.zeros(0, np.int64)
            return z, z, z, 1
        q = self._cells(self.P)
        runs = d - t + 1
        all_keys = self._combine([q[:, i : i + runs] for i in range(t)])  # (n, runs)
        k, o = _stride(_counts(all_keys), min(_STRIDE, runs))
        span = o[:, None] + np.arange(k + t - 1)
        vals = self.P[np.arange(n)[:, None], span]  # (n, k + t - 1)
        slack = self.tol[:, None] * (1 + 1e-9) + 4 * _EPS * np.abs(vals)
        mid = self._cells(vals)
        lo, hi = self._cells(vals - slack), self._cells(vals + slack)
        alt = np.where(lo != mid, lo, hi)  # the one neighbouring cell, where there is one
        has_alt = alt != mid
        keys, rows_, offs = [], [], []
        rows = np.arange(n, dtype=np.int32)  # 4 bytes a key: the index of 50,000 rows holds
        # about 0.4 million keys here and 1.4 million in the byte index
        for j in range(k):
            for pick in np.ndindex(*(2,) * t):  # each coordinate: its cell, or its neighbour
                need = np.ones(n, dtype=bool)
                for i, p in enumerate(pick):
                    if p:
                        need &= has_alt[:, j + i]
                if not need.any():
                    continue
                cols = [(alt if p else mid)[need, j + i] for i, p in enumerate(pick)]
                keys.append(self._combine(cols))
                rows_.append(rows[need])
                offs.append((o[need] + j).astype(np.int32))
        return np.concatenate(keys), np.concatenate(rows_), np.concatenate(offs), k

    def __len__(self) -> int:
        return len(self.P)

    def search(
        self, f: np.ndarray, skip: np.ndarray | None = None, bounds: np.ndarray | None = None
    ) -> Hit | None:
        """The first window of the float64 vector ``f`` within its owner's threshold of a
        private row (owners flagged in ``skip`` are ignored; windows straddling the piece
        starts ``bounds`` are not read), or None."""
        d, t, k, L = self.d, self.t, self.k, f.size
        if not len(self) or L < d:
            return None
        with np.errstate(invalid="ignore", over="ignore"):
            finite = np.isfinite(f.sum())  # one pass; a sum of huge values only goes slow
        if not finite:  # NaN and inf read as 0
            f = np.where(np.isfinite(f), f, 0.0)
        m = L - t + 1  # run starts; scanned: 0, k, 2k, ...
        keys = self._combine([self._cells(f[i : i + m : k]) for i in range(t)])
        cand = self.bitmap.hits(self.bitmap.slot(keys))
        if not cand.size:
            return None
        starts, row = _places(self, keys[cand], cand * k, d, L, skip, bounds)
        if not row.size:
            return None
        windows = f[starts[:, None] + np.arange(d)]
        with np.errstate(invalid="ignore", over="ignore"):
            dist = np.linalg.norm(windows - self.P[row], axis=1)
        good = np.flatnonzero(dist <= self.tol[row])
        if not good.size:
            return None
        # the earliest window, and for it the nearest private row
        first_start = starts[good].min()
        at = good[starts[good] == first_start]
        best = at[np.lexsort((row[at], dist[at]))[0]]
        return int(first_start), int(row[best]), float(dist[best])


class ByteIndex:
    """Exact copies of private rows' bytes (float64, ``8d`` bytes each) starting at a byte
    offset that is not a multiple of 8 (offsets that are are checked by value).

    If a row's bytes start at offset ``s`` with ``s % 8 = a``, the buffer's aligned 8-byte
    words cut the row at row offsets ``o = 8m + 8 - a``, ``m = 0 .. d - 2``. For each row and
    each ``a``, ``k`` consecutive such words (at most 4 and ``d - 1``; where they are rarest
    among all rows, fewer when every stretch of a row holds common words: :func:`_stride`) are
    its *anchors*; one pass over every ``k``-th aligned word of the buffer, looked up in a
    hashed bitmap of all anchors, finds every place a row can start, and each is confirmed
    byte for byte. Rows of one number (``d = 1``) have no aligned word inside a misaligned
    copy: their bytes are looked up at each misalignment instead.
    """

    def __init__(self, rows: np.ndarray, owner: np.ndarray):
        self.P = np.ascontiguousarray(rows, dtype=np.float64)
        self.owner = np.asarray(owner, dtype=np.int64)
        n, d = self.P.shape
        self.d, self.k = d, 1  # the stride, chosen with the anchors (see _stride)
        V = self.P.view(np.uint64)
        values, rows_, offs = [], [], []
        if d >= 2 and n:
            at = np.arange(n, dtype=np.int32)

            # the aligned words that cut a row starting at byte offset a: the last a bytes of
            # value m, then the first 8 - a bytes of value m + 1 (row byte 8m + 8 - a)
            def cut(left, right, a: int):
                return left >> np.uint64(8 * (8 - a)) | right << np.uint64(8 * a)

            counts = _counts(cut(V[:, :-1], V[:, 1:], 1))
            for a in range(2, 8):  # one misalignment at a time: rows x (d - 1) words each
                np.maximum(counts, _counts(cut(V[:, :-1], V[:, 1:], a)), out=counts)
            self.k, m0 = _stride(counts, min(_BYTE_STRIDE, d - 1))
            cols = [V[at, m0 + j] for j in range(self.k + 1)]
            for a in range(1, 8):
                for j in range(self.k):
                    values.append(cut(cols[j], cols[j + 1], a))
                    rows_.append(at)
                    offs.append((8 * (m0 + j) + 8 - a).astype(np.int32))
        v = np.concatenate(values) if values else np.zeros(0, np.uint64)
        order = np.argsort(v)
        self.keys = v[order]
        self.rows = (np.concatenate(rows_) if rows_ else np.zeros(0, np.int64))[order]
        self.offs = (np.concatenate(offs) if offs else np.zeros(0, np.int64))[order]
        self.bitmap = _Bitmap(len(v))
        self.bitmap.add(self.bitmap.slot(self.keys))
        if d == 1:  # rows of one number: their sorted words, for _search_scalars
            self._scalar_order = np.argsort(V[:, 0], kind="stable")
            self._scalar_words = V[self._scalar_order, 0]

    def search(self, buf: np.ndarray, skip=None, bounds: np.ndarray | None = None) -> Hit | None:
        """First misaligned exact copy of a private row's bytes in the uint8 array ``buf``:
        ``(byte offset, row, 0.0)``, or None. ``bounds``: byte offsets where the pieces ``buf``
        was concatenated from start (a copy may not straddle one)."""
        n8, k = buf.size // 8, self.k
        if self.d == 1 and len(self.P):
            return self._search_scalars(buf, skip, bounds)
        if not self.keys.size or n8 < self.d:
            return None
        words = (
            np.frombuffer(buf[: 8 * n8].tobytes(), dtype=np.uint64)
            if (buf.ctypes.data % 8)
            else buf[: 8 * n8].view(np.uint64)
        )
        scanned = words[::k]
        cand = self.bitmap.hits(self.bitmap.slot(scanned))
        if not cand.size:
            return None
        row_bytes = 8 * self.d
        starts, row = _places(self, scanned[cand], 8 * k * cand, row_bytes, buf.size, skip, bounds)
        order = np.lexsort((row, starts))
        mine = self.P.view(np.uint8).reshape(-1, row_bytes)
        for lo_ in range(0, order.size, 256):  # confirm byte for byte, a block at a time
            sel = order[lo_ : lo_ + 256]
            got = buf[starts[sel, None] + np.arange(row_bytes)]
            same = np.flatnonzero(np.all(got == mine[row[sel]], axis=1))
            if same.size:
                i = sel[same[0]]
                return int(starts[i]), int(row[i]), 0.0
        return None

    def _search_scalars(self, buf: np.ndarray, skip, bounds) -> Hit | None:
        """Rows of one number: no aligned word lies inside a misaligned copy, so read the
        buffer's words at each of the 7 misalignments and look them up."""
        words, order = self._scalar_words, self._scalar_order
        best = None
        for a in range(1, 8):
            n = (buf.size - a) // 8
            if n <= 0:
                continue
            w = np.frombuffer(buf[a : a + 8 * n].tobytes(), dtype=np.uint64)
            i = np.minimum(np.searchsorted(words, w), words.size - 1)
            at = np.flatnonzero(words[i] == w)
            for j in at:  # the earliest copy at this misalignment whose owner is not skipped
                start = a + 8 * int(j)
                if best is not None and start >= best[0]:
                    break
                if _straddles(np.array([start]), 8, bounds)[0]:
                    continue
                lo, hi = np.searchsorted(words, w[j]), np.searchsorted(words, w[j], "right")
                rows = [r for r in order[lo:hi] if skip is None or not skip[self.owner[r]]]
                if rows:
                    best = (start, int(min(rows)), 0.0)
                    break
        return best


def _counts(keys: np.ndarray) -> np.ndarray:
    """How often each 64-bit key occurs among all of them (hashed into about 4 buckets a key,
    at most 2**20: collisions only overcount)."""
    bits = int(min(max(np.ceil(np.log2(max(4 * keys.size, 1))), 8), 20))
    slots = (keys.view(np.uint64) * _FIB >> np.uint64(64 - bits)).view(np.int64)
    return np.bincount(slots.reshape(-1), minlength=1 << bits)[slots]


def _stride(counts: np.ndarray, most: int) -> tuple[int, np.ndarray]:
    """The stride k and each row's first anchor offset, from how common each candidate anchor
    is (``counts``: rows x anchor positions).

    Each row takes the k consecutive anchors whose commonest is rarest. A scanned position
    whose key is an anchor shared by c rows costs c candidate windows, so the largest k
    (fewest positions scanned) is taken whose commonest chosen anchor is within the larger of
    4 times and 64 more than what k = 1 needs (each row's single rarest anchor): sparse or
    integer-valued rows (digits, counts) have runs of zeros everywhere and fall back to a
    small k; dense data scans one position in ``most``."""
    best1 = counts.min(axis=1)
    limit = max(4 * int(best1.max()), int(best1.max()) + 64)
    k = most
    while True:
        m = counts.shape[1] - k + 1
        worst = counts[:, :m].copy()
        for j in range(1, k):
            np.maximum(worst, counts[:, j : j + m], out=worst)
        o = np.argmin(worst, axis=1)
        if k == 1 or int(worst[np.arange(len(o)), o].max()) <= limit:
            return k, o
        k //= 2


class _Bitmap:
    """A set of slot numbers as packed bits: ``2**bits`` slots, about 64 per member, at most
    ``2**27`` (16 MiB), so that a lookup of a non-member is almost always a miss."""

    def __init__(self, n: int):
        self.bits = int(min(max(np.ceil(np.log2(max(64 * n, 1))), 12), _BITS))
        self.shift = np.uint64(64 - self.bits)
        self.packed = np.zeros(1 << (self.bits - 3), dtype=np.uint8)

    def slot(self, keys: np.ndarray) -> np.ndarray:
        """Slot numbers of 64-bit keys (any integer dtype of 8 bytes): their top bits after
        one multiplication by an odd constant."""
        return (keys.view(np.uint64) * _FIB >> self.shift).view(np.int64)

    def add(self, slots: np.ndarray) -> None:
        s = np.sort(slots)  # repeats are harmless: OR is idempotent
        if not s.size:
            return
        byte = s >> 3
        first = np.flatnonzero(np.concatenate([[True], byte[1:] != byte[:-1]]))
        bit = (1 << (s & 7)).astype(np.uint8)
        self.packed[byte[first]] |= np.bitwise_or.reduceat(bit, first)

    def hits(self, slots: np.ndarray) -> np.ndarray:
        """Positions of ``slots`` that are members."""
        byte = self.packed[slots >> 3]
        return np.flatnonzero(byte >> (slots & 7).astype(np.uint8) & 1)


def join_pieces(pieces, as_bytes: bool) -> tuple[np.ndarray, np.ndarray]:
    """One vector of every piece in turn (float64 values, or bytes with every piece
    starting at a multiple of 8) and where each piece starts in it."""
    unit = [8 * p[2].size if as_bytes and p[2].dtype == np.float64 else p[2].size for p in pieces]
    sizes = [n + (-n % 8) for n in unit] if as_bytes else unit
    offsets = np.cumsum([0, *sizes[:-1]])
    if not as_bytes:  # each piece flattened in C order, cast as an assignment casts
        if len(pieces) == 1 and pieces[0][2].dtype == np.float64:
            return np.ascontiguousarray(pieces[0][2]).reshape(-1), offsets
        arrays = [p[2] for p in pieces]
        return np.concatenate(arrays, axis=None, dtype=np.float64, casting="unsafe"), offsets
    vec = np.zeros(sum(sizes), np.uint8) if as_bytes else np.empty(sum(sizes))
    for at, n, p in zip(offsets.tolist(), unit, pieces):
        a = p[2]
        if as_bytes and a.dtype == np.float64:
            vec[at : at + n].view(np.float64).reshape(a.shape)[...] = a
        else:
            vec[at : at + n].reshape(a.shape)[...] = a
    return vec, offsets


def search_joined(index, vec, offsets, pieces, skip) -> tuple | None:
    """``(piece, start, row, distance)`` of the first hit of ``index`` in ``vec``, the
    joined ``pieces`` starting at ``offsets`` (values, or bytes)."""
    hit = index.search(vec, skip, offsets if len(pieces) > 1 else None)
    if hit is None:
        return None
    start, row, dist = hit
    i = int(np.searchsorted(offsets, start, "right")) - 1
    return pieces[i], start - int(offsets[i]), row, dist


class WidthIndex:
    """The indexes of every private row of one width: by value, by bytes, and (built when an
    integer reading first needs it) by value truncated to integers."""

    def __init__(self, rows: np.ndarray, owner: np.ndarray, tol: np.ndarray):
        self.values, self.raw = RowIndex(rows, owner, tol), ByteIndex(rows, owner)
        self._rows, self._trunc = (rows, owner, tol), None

    @property
    def trunc(self) -> RowIndex:
        if self._trunc is None:
            rows, owner, tol = self._rows
            T = np.trunc(rows)
            # only rows that truncation keeps within half their norm: a row of small values
            # truncates to a few small integers, which any label or count vector contains
            keep = np.linalg.norm(rows - T, axis=1) <= 0.5 * np.linalg.norm(T, axis=1)
            keep &= np.linalg.norm(T, axis=1) > tol
            # and only truncated rows a vector of integers is unlikely to hold by chance: at
            # least TRUNC_BITS bits (integer_bits); three coordinates near 1 truncate to
            # (0, 1, 1), which a cluster-label vector holds
            keep &= integer_bits(T) >= TRUNC_BITS
            self._trunc = RowIndex(T[keep], owner[keep], tol[keep])
        return self._trunc


#: bits a truncated private row needs to be searched for in integer readings (integer_bits)
TRUNC_BITS = 16.0


def integer_bits(T: np.ndarray) -> np.ndarray:
    """Per row of integers ``T``, its surprisal in bits under a fixed prior over integers that
    favours small magnitudes, as labels and counts have: ``P(0) = 1/2`` and
    ``P(v) = 1 / (2 (|v| + 1) (|v| + 2))`` for ``v != 0`` (a distribution: the sums over each sign
    telescope to 1/4), summed over the coordinates. (12, 0, 7) has 16.7 bits, (5, 6, 7) 20.4,
    (2, 2, 2) 13.8, (0, 1, 0) 5.6."""
    a = np.abs(T)
    bits = np.where(a > 0, np.log2(2.0 * (a + 1.0) * (a + 2.0)), 1.0)
    return bits.sum(axis=1)
