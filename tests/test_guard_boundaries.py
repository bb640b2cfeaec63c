"""The privacy guard at its boundaries: the threshold itself (both sides), every reading of an
array as rows (with the exact number of rows each reading checks), every dtype kind, exempt rows,
degenerate private data, and the record/stop bookkeeping. Written against the survivors of
mutation testing (docs/guide/development.md, "Mutation testing")."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.errors import PrivacyGuardError
from testbed.exchange.envelope import Envelope
from testbed.exchange.guard import GuardFinding, PrivacyGuard

RNG = np.random.default_rng(7)
X4 = RNG.normal(size=(20, 4)) + 3.0  # 4-d rows, no zero coordinate, not integer-valued


def _env(payload, meta=None, seq=5):
    return Envelope.make(
        seq=seq,
        round=2,
        sender="alice",
        receiver="server",
        kind="toy.k",
        payload=payload,
        meta=meta,
    )


# ----------------------------------------------------------------------------- the threshold
def test_threshold_is_rel_tol_times_the_median_row_norm():
    g = PrivacyGuard({"a": X4}, rel_tol=1e-3)
    assert g.thresholds == {"a": pytest.approx(1e-3 * np.median(np.linalg.norm(X4, axis=1)))}
    assert g.rel_tol == 1e-3 and isinstance(g.rel_tol, float)


def test_distance_exactly_at_the_threshold_is_a_near_copy_and_just_above_is_not():
    # one dimension: the projection is +-1, so distances are exact; median norm 2, tol 0.5
    g = PrivacyGuard({"a": np.array([[2.0]])}, rel_tol=0.25)
    assert g.thresholds["a"] == 0.5
    assert g.find({"x": np.array([[2.5]])}) == ("a", "x", 0, 0.5)
    assert g.find({"x": np.array([[1.5]])}) == ("a", "x", 0, 0.5)
    assert g.find({"x": np.array([[2.5000001]])}) is None
    assert g.find({"x": np.array([[1.4999999]])}) is None


def test_reported_distance_is_the_nearest_private_row_and_row_index_is_the_payload_row():
    # both private rows are candidates of the ball query; the nearest one (distance 0) is reported
    g = PrivacyGuard({"a": np.array([[1.0], [1.1]])}, rel_tol=0.2)
    assert g.find({"x": np.array([[5.0], [9.0], [1.0]])}) == ("a", "x", 2, 0.0)
    assert g.find({"x": np.array([[5.0], [1.05]])})[2:] == (1, pytest.approx(0.05))
    assert g.find({"x": np.array([[1.1]])}) == ("a", "x", 0, 0.0)  # 1.0 is a candidate too


def test_threshold_is_computed_in_double_precision_for_any_private_dtype():
    g = PrivacyGuard({"a": X4.astype(np.float32)}, rel_tol=1e-3)
    X = X4.astype(np.float32).astype(np.float64)
    assert g.thresholds["a"] == 1e-3 * float(np.median(np.linalg.norm(X, axis=1)))


def test_median_zero_falls_back_to_max_norm_and_rows_at_the_origin_are_not_guarded():
    X = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 4.0]])  # median norm 0, max 5
    g = PrivacyGuard({"a": X, "z": np.zeros((3, 2)), "s": np.array([[0.01, 0.0], [0.0, 0.0]])})
    assert g.thresholds["a"] == pytest.approx(5e-6)
    assert "z" not in g.thresholds  # every row is at the origin: nothing to guard
    assert g.thresholds["s"] == pytest.approx(5e-9)  # median 0.005
    assert g.find({"x": np.array([[3.0, 4.0 + 4e-6]])})[:3] == ("a", "x", 0)
    assert g.find({"x": np.array([[3.0, 4.0 + 6e-6]])}) is None
    assert g.find({"x": np.zeros((50, 2))}) is None  # zeros are in every sparse payload
    assert g.find({"x": np.array([[0.01, 0.0]])})[:3] == ("s", "x", 0)


def test_empty_or_fully_exempt_party_does_not_stop_the_others_from_being_guarded():
    g = PrivacyGuard({"empty": np.zeros((0, 4)), "gone": X4[:2], "a": X4}, exempt=[X4[:2]])
    assert set(g.thresholds) == {"a"}
    assert g.find({"x": X4[5:6]})[:3] == ("a", "x", 0)
    assert g.find({"x": X4[:2]}) is None  # exempt rows of "a" are not guarded either


def test_exempt_row_exactly_at_the_threshold_exempts_and_just_beyond_does_not():
    X = np.array([[2.0], [10.0]])  # median norm 6; rel_tol 1/12 -> tol 0.5
    at = PrivacyGuard({"a": X}, exempt=[np.array([[2.5]])], rel_tol=1 / 12)
    beyond = PrivacyGuard({"a": X}, exempt=[np.array([[2.6]])], rel_tol=1 / 12)
    assert at.thresholds["a"] == 0.5
    assert at.find({"x": np.array([[2.0]])}) is None
    assert beyond.find({"x": np.array([[2.0]])}) == ("a", "x", 0, 0.0)
    # an exempt set of another width is ignored
    other = PrivacyGuard({"a": X4}, exempt=[np.ones((3, 5))])
    assert other.find({"x": X4[:1]}) is not None


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="'stop' or 'record'"):
        PrivacyGuard({"a": X4}, mode="warn")


# ----------------------------------------------------------------------------- readings as rows
def test_every_window_of_every_axis_is_read_and_counted():
    g = PrivacyGuard({"a": X4})
    far = np.full(14, -100.0)  # a vector of 14: windows of 4 start at 0..10
    assert g.find({"v": far}) is None and g.rows_checked == 11
    g.find({"m": np.full((5, 4), -100.0)})  # along the rows: 17 windows; along columns: 17
    assert g.rows_checked == 11 + 34
    g.find({"t": np.full((2, 3, 4), -100.0)})  # 24 values along each of the 3 axes: 21 each
    assert g.rows_checked == 11 + 34 + 63
    g.find({"e": np.zeros((0, 4)), "one": np.full((1, 1, 4), -100.0)})  # empty: nothing;
    assert g.rows_checked == 11 + 34 + 63 + 1  # axes of length 1 change nothing


def test_transposed_block_at_an_offset_in_a_3d_array_is_found():
    g = PrivacyGuard({"a": X4})
    z = np.full((2, 7, 5), -100.0)
    z[1, 2:6, :] = X4[6:11].T  # column j of the second slab holds row 6 + j, from index 2
    hit = g.find({"x": z})
    assert hit[:2] == ("a", "x.axis1") and hit[3] == 0.0
    # the reading moves axis 1 last: (2, 5, 7); row 6 starts at slab 1, column 0, index 2
    assert hit[2] == 1 * 35 + 0 * 7 + 2


def test_row_at_an_offset_is_reported_with_where_its_window_starts():
    g = PrivacyGuard({"a": X4})
    v = np.concatenate([[-50.0, -60.0], X4[3], [-70.0]])
    assert g.find({"v": v}) == ("a", "v", 2, 0.0)
    wide = np.hstack([np.full((3, 3), -50.0), X4[3:6], np.full((3, 2), -50.0)])  # rows of 9
    assert g.find({"w": wide}) == ("a", "w", 3, 0.0)


def test_same_bytes_under_another_dtype_are_found_at_any_byte_offset():
    g = PrivacyGuard({"a": X4})
    assert g.find({"x": X4[:3].view(np.uint8)})[1:] == ("x.bytes", 0, 0.0)
    assert g.find({"x": X4[:3].view(np.int64)})[1:] == ("x.bytes", 0, 0.0)
    assert g.find({"x": X4[:3].view(np.float32)})[1:] == ("x.bytes", 0, 0.0)
    assert g.find({"x": np.ascontiguousarray(X4[:3].view(np.int64).T)})[1] == "x.axis0.bytes"
    for shift in range(1, 8):
        raw = b"\x07" * shift + X4[9].tobytes() + b"\x07" * (8 - shift)
        assert g.find({"x": np.frombuffer(raw, np.int64)}) == ("a", "x.bytes@", shift, 0.0)
    assert g.find({"x": np.frombuffer(X4[9].tobytes()[:-1] + b"\x00" * 9, np.int64)}) is None


def test_complex_arrays_are_read_as_real_and_imaginary_parts_and_as_bytes():
    g = PrivacyGuard({"a": X4})
    assert g.find({"c": X4[:2] + 1j})[1] == "c.real"
    assert g.find({"c": 1.0 + 1j * X4[:2]})[1] == "c.imag"
    assert g.find({"c": X4[:2].view(np.complex128)})[1] == "c.bytes"


# ----------------------------------------------------------------------------- dtypes, meta
def test_every_integer_kind_is_compared_with_truncated_rows():
    D = np.array([[3.7, 5.2, 9.9], [12.1, 0.4, 7.8], [2.2, 2.2, 2.2]])
    g = PrivacyGuard({"a": D})
    for dt in (np.int8, np.int64, np.uint8, np.uint16):
        assert g.find({"x": D[1:2].astype(dt)})[:3] == ("a", "x", 0), dt
    # the same integers as floats are not a near-copy of the float rows
    assert g.find({"x": D[1:2].astype(int).astype(float)}) is None


def test_truncation_ignores_rows_it_mostly_erases_and_bool_arrays_are_read():
    # private rows in (0, 1): truncated to integers they are all zero and say nothing
    P = RNG.uniform(0.1, 0.9, size=(6, 3))
    g = PrivacyGuard({"a": P})
    assert g.find({"x": np.zeros((2, 3), dtype=np.int32)}) is None
    assert g.find({"x": np.zeros((2, 3), dtype=bool)}) is None
    # small values: (0.3, 1.4, -0.6) truncates to (0, 1, 0), in every label vector
    small = PrivacyGuard({"a": np.array([[0.3, 1.4, -0.6], [5.0, 6.0, 7.0]])})
    assert small.find({"labels": np.array([0, 1, 0, 1, 1])}) is None
    assert small.find({"labels": np.array([0, 5, 6, 7])})[:3] == ("a", "labels", 1)
    # truncated rows a label vector holds by chance are not searched (integer_bits < 16):
    # (1.2, 0.1, 1.3) truncates to (1, 0, 1), among the cluster labels of a run (a false stop)
    labelled = PrivacyGuard({"a": np.array([[1.2, 0.1, 1.3], [12.1, 0.4, 7.8]])})
    assert labelled.find({"clusters": np.array([1, 0, 1, 1, 0])}) is None
    assert labelled.find({"x": np.array([3, 12, 0, 7])})[:3] == ("a", "x", 1)  # 16.7 bits
    # 0/1 data: a bool copy is a copy
    B = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    gb = PrivacyGuard({"b": B})
    assert gb.find({"x": B[1:2].astype(bool)})[:3] == ("b", "x", 0)


def test_non_finite_cells_are_read_as_zero():
    P = np.array([[0.0, 1.5, 2.5], [4.0, 0.0, 6.5], [7.5, 8.5, 0.0]])
    g = PrivacyGuard({"a": P})
    hit = g.find({"x": np.array([[100.0, 100.0, 100.0], [np.nan, 1.5, 2.5]])})
    assert hit == ("a", "x", 3, 0.0)
    assert g.find({"x": np.array([[np.inf, 0.0, 6.5]])}) is None  # inf -> 0: not row [4, 0, 6.5]
    assert g.find({"x": np.array([[1e308, -1e308, 4.0, 0.0, 6.5]])}) == ("a", "x", 2, 0.0)


def test_every_kind_of_meta_value_is_read():
    g = PrivacyGuard({"a": X4})
    meta = {"ragged": [[1.0], [1.0, 2.0]], "note": "text", "row": X4[7].tolist()}
    assert g.find({"w": np.ones(2)}, meta=meta) == ("a", "meta/row", 0, 0.0)
    assert g.find({"w": np.ones(2)}, meta=None) is None
    nested = {"a": [{"b": {"c": (X4[2][0], X4[2][1])}}, X4[2][2], X4[2][3]]}
    assert g.find(None, meta=nested)[:2] == ("a", "meta/numbers")
    assert g.find(None, meta={"s": "rows: " + repr(X4[5].tolist())})[1] == "meta/s.text"
    assert g.find(None, meta={"b": X4[5].tobytes()})[1] == "meta/b.bytes"
    big = int.from_bytes(X4[5].tobytes(), "little")
    assert g.find(None, meta={"n": big})[1] == "meta/n.bytes"


# ----------------------------------------------------------------------------- stop / record
def test_stop_mode_raises_the_finding_line_and_counts_the_message():
    g = PrivacyGuard({"a": X4}, rel_tol=1e-3)
    g.check(_env({"x": -X4}))
    with pytest.raises(PrivacyGuardError) as exc:
        g.check(_env({"x": X4[2:3]}))
    f = GuardFinding(5, 2, "alice", "server", "toy.k", "a", "x", 0, 0.0, g.thresholds["a"])
    assert str(exc.value) == f.line()
    assert g.messages_checked == 2 and g.violations == 0 and g.findings == []


def test_check_reads_the_envelope_meta():
    g = PrivacyGuard({"a": X4}, mode="record")
    g.check(_env({"w": np.ones(2)}, meta={"debug": X4[4].tolist()}))
    assert g.violations == 1 and g.findings[0].path == "meta/debug"


def test_finding_line_names_everything():
    f = GuardFinding(12, 3, "bob", "server", "k.m", "bob", "p/q.T", 4, 1.5e-7, 2.25e-6)
    assert f.line() == (
        "privacy guard: message #12 k.m (round 3) from bob to server carries a near-copy of a "
        "private row of 'bob' at p/q.T[4] (distance 1.5e-07 <= threshold 2.25e-06)"
    )


def test_record_mode_counts_every_violation_and_keeps_the_first_hundred():
    g = PrivacyGuard({"a": X4}, mode="record", rel_tol=1e-3)
    for i in range(103):
        g.check(_env({"x": X4[i % 20 : i % 20 + 1]}, seq=i))
    g.check(_env({"x": -X4}, seq=999))
    s = g.summary()
    assert s["violations"] == 103 and s["messages_checked"] == 104 and len(s["findings"]) == 100
    first = s["findings"][0]
    assert first == {
        "seq": 0,
        "round": 2,
        "sender": "alice",
        "receiver": "server",
        "kind": "toy.k",
        "party": "a",
        "path": "x",
        "row": 0,
        "distance": 0.0,
        "threshold": g.thresholds["a"],
        "message": g.findings[0].line(),
    }
    assert [f["seq"] for f in s["findings"]] == list(range(100))
    assert s["mode"] == "record" and s["rel_tol"] == 1e-3
    assert s["thresholds"] == g.thresholds and s["thresholds"] is not g.thresholds
    assert s["rows_checked"] == g.rows_checked > 0
    assert "any offset" in s["rule"] and "released value" in s["rule"]
    assert s["rows_indexed"] == 20
