"""The guard's index finds exactly what a brute-force scan of every window finds.

The index scans one position in ``k`` and filters by hashed anchors (testbed.exchange.
guard_index); these properties compare it, on data drawn by hypothesis (dense, integer-valued
and sparse rows, near-copies planted at every offset, just inside and just outside the
threshold, pieces joined with boundaries), with the obvious O(windows x rows) scan.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from testbed.exchange.guard_index import ByteIndex, RowIndex

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _rows(rng, kind: str, n: int, d: int, scale: float) -> np.ndarray:
    if kind == "dense":
        return rng.normal(0.0, scale, size=(n, d))
    if kind == "integer":  # pixel-like values: long runs of equal cells
        return rng.integers(0, 4, size=(n, d)).astype(float) * scale
    X = np.zeros((n, d))  # sparse: one or two nonzero coordinates per row
    for i in range(n):
        X[i, rng.choice(d, size=min(d, 1 + i % 2), replace=False)] = rng.normal(
            0, scale, 1 + i % 2
        )[: min(d, 1 + i % 2)]
    return X


def _brute_rows(f, P, tol, skip, owner, bounds):
    d = P.shape[1]
    if f.size < d:
        return None
    f = np.where(np.isfinite(f), f, 0.0)
    W = sliding_window_view(f, d)
    dist = np.linalg.norm(W[:, None, :] - P[None, :, :], axis=2)
    ok = dist <= tol[None, :]
    if skip is not None:
        ok &= ~skip[owner][None, :]
    if bounds is not None:
        s = np.arange(len(W))
        piece = np.searchsorted(bounds, s, "right")
        ok &= (piece == np.searchsorted(bounds, s + d - 1, "right"))[:, None]
    starts = np.flatnonzero(ok.any(axis=1))
    if not starts.size:
        return None
    s = starts[0]
    row = np.flatnonzero(ok[s])[np.argmin(dist[s, ok[s]])]
    return int(s), int(row), float(dist[s, row])


@st.composite
def cases(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    d = draw(st.integers(1, 14))
    n = draw(st.integers(1, 40))
    kind = draw(st.sampled_from(["dense", "integer", "sparse"]))
    scale = 10.0 ** draw(st.integers(-3, 4))
    P = _rows(rng, kind, n, d, scale)
    owner = rng.integers(0, 3, size=n)
    norms = np.linalg.norm(P, axis=1)
    tol = np.full(n, 1e-6 * (float(np.median(norms)) or 1.0))
    keep = norms > tol
    P, owner, tol = P[keep], owner[keep], tol[keep]
    if not len(P):
        P, owner, tol = np.full((1, d), scale), np.zeros(1, int), np.full(1, 1e-6 * scale)
    # the payload: noise, private values out of place, near-copies and near-misses
    L = draw(st.integers(0, 6 * d + 30))
    f = rng.normal(0.0, scale, size=L)
    if L:
        f[rng.integers(0, L, size=L // 3)] = rng.choice(P.reshape(-1), size=L // 3)
    for _ in range(draw(st.integers(0, 3))):
        if L < d:
            break
        s = int(rng.integers(0, L - d + 1))
        r = int(rng.integers(0, len(P)))
        u = rng.normal(size=d)
        u /= np.linalg.norm(u) or 1.0
        factor = draw(st.sampled_from([0.0, 0.5, 0.9, 1.1, 3.0]))
        f[s : s + d] = P[r] + factor * tol[r] * u
    if L and draw(st.booleans()):
        f[rng.integers(0, L)] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    skip = rng.random(3) < 0.3 if draw(st.booleans()) else None
    bounds = None
    if L and draw(st.booleans()):
        cuts = np.sort(rng.choice(np.arange(1, L + 1), size=min(L, 3), replace=False))
        bounds = np.unique(np.concatenate([[0], cuts[cuts < L]]))
    return P, owner, tol, f, skip, bounds


@SETTINGS
@given(cases())
def test_row_index_finds_what_a_scan_of_every_window_finds(case):
    P, owner, tol, f, skip, bounds = case
    got = RowIndex(P, owner, tol).search(f, skip, bounds)
    want = _brute_rows(f, P, tol, skip, owner, bounds)
    if want is None:
        assert got is None
    else:
        assert got is not None and got[:2] == want[:2]
        assert np.isclose(got[2], want[2], rtol=1e-9, atol=1e-300)


def _brute_bytes(buf, P, skip, owner, bounds):
    row_bytes = 8 * P.shape[1]
    raw = P.view(np.uint8).reshape(len(P), row_bytes)
    for s in range(buf.size - row_bytes + 1):
        if s % 8 == 0:
            continue
        if bounds is not None and np.searchsorted(bounds, s, "right") != np.searchsorted(
            bounds, s + row_bytes - 1, "right"
        ):
            continue
        for r in range(len(P)):
            if skip is not None and skip[owner[r]]:
                continue
            if np.array_equal(buf[s : s + row_bytes], raw[r]):
                return s, r
    return None


@SETTINGS
@given(cases(), st.integers(0, 2**32 - 1))
def test_byte_index_finds_every_misaligned_copy_a_scan_finds(case, seed):
    P, owner, tol, _, skip, _ = case
    rng = np.random.default_rng(seed)
    row_bytes = 8 * P.shape[1]
    size = int(rng.integers(0, 3 * row_bytes + 40))
    buf = rng.integers(0, 256, size=size).astype(np.uint8)
    if size:  # zero runs, like the zero bytes of small integers stored as float64
        buf[rng.random(size) < 0.5] = 0
    for _ in range(int(rng.integers(0, 3))):
        if size < row_bytes:
            break
        s = int(rng.integers(0, size - row_bytes + 1))
        buf[s : s + row_bytes] = P[int(rng.integers(0, len(P)))].view(np.uint8)
        if rng.random() < 0.3:  # one byte off: not a copy
            buf[s + int(rng.integers(0, row_bytes))] ^= 1
    bounds = None
    if size >= 16 and rng.random() < 0.5:
        bounds = np.unique(np.concatenate([[0], 8 * rng.integers(1, size // 8, size=2)]))
    got = ByteIndex(P, owner).search(buf, skip, bounds)
    want = _brute_bytes(buf, P, skip, owner, bounds)
    if want is None:
        assert got is None
    else:
        assert got is not None and got[0] == want[0]
        assert np.array_equal(buf[got[0] : got[0] + row_bytes], P[got[1]].view(np.uint8))


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(1, 14), st.integers(-3, 4), st.sampled_from([-1, 1]))
def test_a_near_copy_across_a_cell_boundary_is_found(seed, d, exponent, side):
    # every value of the row sits just on one side of a quantisation boundary, the copy's
    # just on the other: found only through the neighbouring cells the index also holds
    rng = np.random.default_rng(seed)
    scale = 10.0**exponent
    P = rng.normal(0.0, scale, size=(5, d))
    tol = np.full(5, 1e-6 * float(np.median(np.linalg.norm(P, axis=1))))
    c = RowIndex(P, np.zeros(5, int), tol).cell
    eps = 0.1 * tol[0] / np.sqrt(d)
    boundary = (np.round(P / c) + 0.5) * c  # the quantiser rounds: cells end half-way
    P = boundary - side * eps
    index = RowIndex(P, np.zeros(5, int), tol)
    assert index.cell == c
    f = np.concatenate([rng.normal(0, scale, 7), boundary[3] + side * eps, rng.normal(0, scale, 3)])
    got = index.search(f)
    assert got is not None and got[:2] == (7, 3)


def test_rows_full_of_common_runs_fall_back_to_a_small_stride():
    # digits: integer pixels with zeros at every row's edges, so any 8 consecutive runs hold a
    # run of zeros that every row shares; scanning one position in 8 would then turn every
    # run of zeros in a payload into a candidate window for most rows
    from sklearn.datasets import load_digits

    import testbed.exchange.guard_index as gi

    X = load_digits().data.astype(float)
    n = len(X)
    digits = RowIndex(X, np.zeros(n, int), np.full(n, 1e-5))
    gauss = RowIndex(
        np.random.default_rng(0).normal(size=(n, 64)), np.zeros(n, int), np.full(n, 1e-5)
    )
    assert gauss.k == 8 and ByteIndex(gauss.P, np.zeros(n, int)).k == 4
    assert digits.k <= 2 and ByteIndex(X, np.zeros(n, int)).k <= 2
    # a payload of pixel-like values, zero-heavy: the candidate windows stay a few per position
    payload = np.where(np.random.default_rng(1).random(20_000) < 0.6, 0.0, 16.0)
    seen = []
    real = gi._places

    def counting(*args, **kw):
        out = real(*args, **kw)
        seen.append(out[0].size)
        return out

    gi._places, was = counting, gi._places
    try:
        digits.search(payload)
    finally:
        gi._places = was
    assert sum(seen) <= 4 * payload.size, sum(seen)
