"""With the guard's worker running, the payloads' digests are computed there, from the copy the
bus hands it: every digest must be the one :func:`payload_digest` gives in the bus's process,
for every payload a message may carry, and a transcript must not depend on where it was hashed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.exchange import guard_worker
from testbed.exchange.bus import SERVER, Bus, PrivacyGuard
from testbed.exchange.guard_worker import ArrayReader, pack_payloads, unpack_payload
from testbed.exchange.payload import canonical_bytes, freeze_payload, payload_digest
from testbed.measure import Measure

WORKER = guard_worker.shared_worker(force=True)  # started now: ready by the first test using it
# far from every generated payload: a finding would be the guard's business, not these tests'
PRIVATE = {"alice": np.random.default_rng(3).normal(size=(12, 3)) * 10 + 12345.678}


def _worker():
    if WORKER is None or not WORKER.wait_ready():
        pytest.skip("no guard worker on this platform (needs os.memfd_create)")
    return WORKER


_KINDS = ["f8", ">f8", "i4", "u1", "c16", "bool", "U3", "S2", "strided", "empty", "0-d"]


def _array(kind: str, n: int) -> np.ndarray:
    a = np.arange(2 * n + 2)
    return {
        "f8": a.astype("f8") / 3,
        ">f8": (a / 7).astype(">f8"),  # not this machine's byte order
        "i4": a.astype("i4") - 5,
        "u1": a.astype("u1"),
        "c16": a * (1 + 2j),
        "bool": a % 3 == 0,
        "U3": np.array([str(x) for x in a], dtype="U3"),
        "S2": np.array([str(x).encode()[:2] for x in a], dtype="S2"),
        "strided": (a.astype("f8") * 1.5).reshape(-1, 2)[:, ::-1],  # not C-contiguous
        "empty": np.zeros((0, 3)),
        "0-d": np.array(2.5),
    }[kind]


_LEAF = st.one_of(
    st.floats(allow_nan=False),
    st.integers(-(2**70), 2**70),  # wider than 64 bits too
    st.booleans(),
    st.text(max_size=5),
    st.builds(_array, st.sampled_from(_KINDS), st.integers(0, 9)),
    st.builds(
        lambda n, d: Measure(np.arange(n * d).reshape(n, d) / (n * d + 1.0)),
        st.integers(1, 5),
        st.integers(1, 3),
    ),
)
_PAYLOADS = st.recursive(
    _LEAF, lambda inner: st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8
)


@given(st.lists(_PAYLOADS, min_size=1, max_size=4))
@settings(max_examples=200, deadline=None)
def test_an_unpacked_payload_encodes_as_the_payload(payloads):
    """The templates, values and arrays (copied here as the bus copies them, one after
    another at aligned offsets) give back payloads with the same canonical encoding, hence the
    same digests and the same readings."""
    payloads = [freeze_payload(p) for p in payloads]
    arrays: list = []
    values: list = []
    templates = pack_payloads(payloads + payloads[:1], arrays, values)  # last: a broadcast
    assert templates[-1] == 0
    size = sum(-(-a.nbytes // 64) * 64 for a in arrays)
    buf = bytearray(size + 64)
    at = 0
    for a in arrays:
        buf[at : at + a.nbytes] = np.ascontiguousarray(a).tobytes()
        at += -(-a.nbytes // 64) * 64
    read, vals = ArrayReader(memoryview(buf)), iter(values)
    for p, t in zip(payloads, templates):
        if type(t) is int:  # an earlier payload (small ints are shared)
            assert payloads[t] is p
            continue
        assert canonical_bytes(unpack_payload(t, read, vals)) == canonical_bytes(p)
    assert read.at == at and next(vals, None) is None  # everything taken, in order


@given(st.lists(_PAYLOADS, min_size=1, max_size=6), st.booleans())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_workers_digests_are_the_bus_process_digests(payloads, repeat):
    """Through the real worker (copied to its shared memory, rebuilt, hashed there): each
    digest equals payload_digest here, a repeated object included."""
    w = _worker()
    guard = PrivacyGuard(PRIVATE, worker=True)
    assert guard._worker is w
    payloads = [freeze_payload(p) for p in payloads]
    if repeat:
        payloads.append(payloads[0])
    try:
        clean, _, digests = w.answer(w.submit(guard._gid, payloads))
    finally:
        guard.close()
    assert clean
    assert digests == [payload_digest(p) for p in payloads]


@pytest.mark.parametrize("kind", _KINDS)
def test_every_kind_of_array_hashes_the_same_on_the_worker(kind):
    """Each dtype and layout on its own, alone and inside a mapping (the random mix above may
    draw a rare one seldom)."""
    w = _worker()
    guard = PrivacyGuard(PRIVATE, worker=True)
    payloads = [freeze_payload(_array(kind, 5)), freeze_payload({"a": _array(kind, 2), "b": 1.0})]
    try:
        clean, _, digests = w.answer(w.submit(guard._gid, payloads))
    finally:
        guard.close()
    assert digests == [payload_digest(p) for p in payloads]


def test_a_transcript_is_the_same_wherever_it_was_hashed():
    """The same messages on a bus hashing here (no worker) and on one whose worker hashes:
    the same envelopes, digests and transcript digest."""
    _worker()
    rng = np.random.default_rng(0)
    msgs = [
        Measure(rng.normal(size=(5, 3))),
        {"gamma": Measure(rng.normal(size=(4, 3))), "distance": 0.25},
        rng.normal(size=(2, 7)).T,  # not C-contiguous
        "text 1.5",
        3,
    ]
    out = []
    for worker in (False, True):
        guard = PrivacyGuard(PRIVATE, worker=worker)
        bus = Bus(guard=guard)
        bus.GUARD_BATCH = 2
        for i, m in enumerate(msgs * 3):
            bus.send("alice", SERVER, "p.x", m, round=i)
        out.append((bus.transcript.digest(), [e.digest for e in bus.transcript]))
        assert (guard._worker is not None) == worker
        guard.close()
    assert out[0] == out[1]
    assert all(out[0][1])


@pytest.mark.parametrize("dtype", ["<f8", "<f4", ">f8"])
def test_a_measure_built_around_its_constructor_hashes_the_same_on_the_worker(dtype):
    """Hostile: a protocol builds a Measure without its constructor (object.__new__), with
    arrays that are not float64; the worker rebuilds them with their own dtypes, so its digest
    is the bus process's."""
    w = _worker()
    guard = PrivacyGuard(PRIVATE, worker=True)
    m = object.__new__(Measure)
    object.__setattr__(m, "support", (np.arange(12.0).reshape(4, 3) / 7).astype(dtype))
    object.__setattr__(m, "weights", np.full(4, 0.25).astype(dtype))
    try:
        clean, _, digests = w.answer(w.submit(guard._gid, [m]))
    finally:
        guard.close()
    assert digests == [payload_digest(m)]
