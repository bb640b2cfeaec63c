"""The transcript's content hash: BLAKE3 over one typed, length-prefixed encoding, computed
once per delivered payload; SHA-256 on request; digests of the old, ambiguous encoding are
refused; tampering is detected."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import testbed.exchange.bus as busmod
import testbed.exchange.payload as payloadmod
from testbed.errors import TestbedError
from testbed.exchange.bus import Bus, Envelope, Transcript, payload_digest
from testbed.exchange.payload import canonical_bytes
from testbed.measure import Measure


def _payload():
    g = np.random.default_rng(0)
    return {"m": Measure(g.normal(size=(7, 3))), "a": g.normal(size=(4, 4)), "s": 1.5}


def test_digest_is_blake3_and_names_its_algorithm():
    d = payload_digest(_payload())
    assert d.startswith("blake3.v2:") and len(d) == len("blake3.v2:") + 64
    assert payload_digest(_payload()) == d  # deterministic
    sha = payload_digest(_payload(), "sha256")
    assert sha.startswith("sha256.v2:") and len(sha) == len("sha256.v2:") + 64


def test_mapping_keys_are_length_prefixed():
    """The old encoding wrote a mapping key without its length: these two payloads collided."""
    a = {"rows": np.frombuffer(b"ABC", dtype=np.uint8), "z": {}}
    b = {"rowsA|u1(3,)ABCKz": {}}
    assert payload_digest(a) != payload_digest(b)
    assert canonical_bytes(a) != canonical_bytes(b)


@pytest.mark.parametrize(
    "x,y",
    [
        ({"a": "bc"}, {"ab": "c"}),
        (["a", "b"], ["ab"]),
        ({"a": 1}, {"a": "1"}),
        ({"a": 1}, {"a": 1.0}),
        ({"a": True}, {"a": 1}),
        ({"a": None}, {"a": {}}),
        (np.zeros(2, np.float64), np.zeros(2, np.int64)),
        (np.zeros((2, 3)), np.zeros((3, 2))),
        (np.zeros(0), np.zeros((0, 1))),
        ("x", b"x"),
        ({"k": [1, 2]}, {"k": [[1], 2]}),
    ],
)
def test_different_values_encode_differently(x, y):
    assert canonical_bytes(x) != canonical_bytes(y)
    assert payload_digest(x) != payload_digest(y)


def test_canonical_bytes_decode_unambiguously():
    """The encoding is prefix-free: parse it back and get the value's structure."""
    import struct

    def parse(b, i=0):
        tag, n = b[i : i + 1], struct.unpack(">Q", b[i + 1 : i + 9])[0]
        i += 9
        if tag in (b"D", b"L", b"M", b"A", b"O"):
            items = []
            for _ in range(n * (2 if tag == b"D" else 1)):
                item, i = parse(b, i)
                items.append(item)
            return (tag, items), i
        return (tag, b[i : i + n]), i + n

    for v in [{"rows": np.arange(3, dtype=np.uint8), "z": {}}, {"rowsA|u1(3,)ABCKz": {}}]:
        b = canonical_bytes(v)
        tree, end = parse(b)
        assert end == len(b) and tree[0] == b"D"


def test_old_format_digests_are_refused(tmp_path):
    """A digest of the old, ambiguous encoding is not accepted (no downgrade)."""
    _saved(tmp_path, None)
    p = tmp_path / "envelopes.jsonl"
    lines = p.read_text().splitlines()
    rec = json.loads(lines[0])
    rec["digest"] = "blake3:" + rec["digest"].split(":")[1]
    lines[0] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(TestbedError, match=r"envelopes.jsonl:1: .*old, ambiguous encoding"):
        Transcript.load(tmp_path)


def test_digest_sees_dtype_shape_and_every_byte():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    base = payload_digest(a)
    assert payload_digest(a.reshape(4, 3)) != base
    assert payload_digest(a.astype(np.float32)) != base
    b = a.copy()
    b[2, 3] = np.nextafter(b[2, 3], np.inf)  # one bit
    assert payload_digest(b) != base
    assert payload_digest(np.asfortranarray(a)) == base  # layout is not content


def test_bus_hashes_each_payload_once(monkeypatch):
    calls = []
    real = payloadmod.payload_digest

    def counting(p, algorithm=None):
        calls.append(1)
        return real(p, algorithm)

    monkeypatch.setattr(busmod, "payload_digest", counting)
    monkeypatch.setattr("testbed.exchange.envelope.payload_digest", counting)
    bus = Bus()
    for i in range(5):
        bus.send("a", "b", "p.x", _payload(), round=i)
    assert len(calls) == 5
    assert all(e.digest == real(e.payload) for e in bus.transcript)


def _saved(tmp_path, algorithm):
    tr = Transcript(
        Envelope.make(
            seq=i,
            round=0,
            sender="a",
            receiver="b",
            kind="p.x",
            payload=_payload(),
            algorithm=algorithm,
        )
        for i in range(3)
    )
    tr.save(tmp_path)
    return tr


@pytest.mark.parametrize("algorithm", ["sha256", "blake3"])
def test_saved_transcript_reloads_with_its_own_algorithm(tmp_path, algorithm):
    tr = _saved(tmp_path, algorithm)
    back = Transcript.load(tmp_path)
    assert [e.digest for e in back] == [e.digest for e in tr]
    assert back.digest() == tr.digest()


@pytest.mark.parametrize("algorithm", ["sha256", "blake3"])
def test_tampered_payload_is_refused(tmp_path, algorithm):
    _saved(tmp_path, algorithm)
    with np.load(tmp_path / "payloads.npz") as z:
        arrays = {k: z[k].copy() for k in z.files}
    arrays["1/a"][0, 0] += 1e-12
    np.savez(tmp_path / "payloads.npz", **arrays)
    with pytest.raises(TestbedError, match="digest mismatch for message #1"):
        Transcript.load(tmp_path)


def test_unknown_digest_algorithm_is_a_one_line_error(tmp_path):
    _saved(tmp_path, None)
    p = tmp_path / "envelopes.jsonl"
    lines = p.read_text().splitlines()
    rec = json.loads(lines[0])
    rec["digest"] = "md5:" + rec["digest"].split(":")[1]
    lines[0] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(TestbedError, match=r"envelopes.jsonl:1: .*unknown digest algorithm 'md5'"):
        Transcript.load(tmp_path)


_LEAF = st.one_of(
    st.floats(allow_nan=False),
    st.integers(-(2**70), 2**70),
    st.text(max_size=5),
    st.none(),
    st.builds(
        lambda n, k: np.arange(n, dtype=k).reshape(-1, 1)[::2],  # non-contiguous
        st.integers(0, 40),
        st.sampled_from(["f8", "i4", "u1"]),
    ),  # fmt: skip
    st.builds(
        lambda n, d: Measure(np.ones((n, d)) / (n + d)), st.integers(1, 5), st.integers(1, 3)
    ),
)
_PAYLOADS = st.recursive(
    _LEAF,
    lambda inner: st.one_of(
        st.dictionaries(st.text(max_size=3), inner, max_size=3), st.lists(inner, max_size=3)
    ),  # fmt: skip
    max_leaves=8,
)


@given(_PAYLOADS, st.booleans(), st.sampled_from(["blake3", "sha256"]))
@settings(max_examples=150, deadline=None)
def test_payload_digest_hashes_the_canonical_encoding(payload, large, algorithm):
    """Small payloads are hashed in one call, large ones piece by piece: both give the hash of
    the canonical encoding (the oracle hashes :func:`canonical_bytes` itself)."""
    import hashlib

    from blake3 import blake3

    if large:  # past the one-call size: the streamed path
        payload = {"big": np.ones(payloadmod._ONE_SHOT // 8 + 1), "rest": payload}
    data = canonical_bytes(payload)
    want = (blake3 if algorithm == "blake3" else hashlib.sha256)(data).hexdigest()
    assert payload_digest(payload, algorithm) == f"{algorithm}.v2:{want}"
    # and the hash fed piece by piece, which shares no collector with either
    assert payload_digest(payload, algorithm) == payloadmod.canonical_digest(payload, algorithm)


@pytest.mark.parametrize(
    "support",
    [
        np.arange(12.0).reshape(4, 3),  # the fast path: float64, C order
        np.arange(12.0).reshape(3, 4).T,  # not C-contiguous
        np.arange(12, dtype=np.float32).reshape(4, 3),  # not float64
        np.arange(12.0).astype(">f8").reshape(4, 3),  # not this machine's byte order
        np.arange(3 * 9000.0).reshape(9000, 3),  # past the one-call size
    ],
)
def test_a_measure_hashes_its_canonical_encoding_whatever_its_arrays(support):
    """A Measure is hashed by its own short path when its arrays are float64 in C order, and
    by the general one otherwise (one built around the constructor, as hostile code could):
    every one gives the hash of its canonical encoding."""
    from blake3 import blake3

    m = object.__new__(Measure)
    object.__setattr__(m, "support", support)
    object.__setattr__(m, "weights", np.full(len(support), 1 / len(support)))
    want = f"blake3.v2:{blake3(canonical_bytes(m)).hexdigest()}"
    assert payload_digest(m) == want
