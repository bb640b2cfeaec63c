"""The privacy guard at its boundaries: the threshold itself (both sides), every reading of an
array as rows (with the exact number of rows each reading checks), every dtype kind, exempt rows,
degenerate private data, and the record/stop bookkeeping. Written against the survivors of
mutation testing (docs/development.md, "Mutation testing")."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.errors import PrivacyGuardError
from testbed.exchange.envelope import Envelope
from testbed.exchange.guard import GuardFinding, PrivacyGuard, _row_views

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


def test_median_zero_falls_back_to_max_norm_and_all_zero_to_one():
    X = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 4.0]])  # median norm 0, max 5
    g = PrivacyGuard({"a": X, "z": np.zeros((3, 2))}, rel_tol=0.1)
    assert g.thresholds["a"] == pytest.approx(0.5)
    assert g.thresholds["z"] == pytest.approx(0.1)
    assert g.find({"x": np.array([[3.0, 4.4]])})[:3] == ("a", "x", 0)
    assert g.find({"x": np.array([[3.0, 4.6]])}) is None


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
def _views(a, d):
    return [(how, rows.tolist()) for how, rows in _row_views(np.asarray(a, float), d)]


def test_row_views_of_each_shape():
    a = np.arange(12.0)
    # a vector: every offset 0..d-1 with as many whole rows as fit
    assert [h for h, _ in _views(a, 4)] == [".flat", "@1", "@2", "@3"]
    assert _views(a, 4)[1] == ("@1", [[1, 2, 3, 4], [5, 6, 7, 8]])
    assert _views(a, 4)[3] == ("@3", [[3, 4, 5, 6], [7, 8, 9, 10]])
    # a vector shorter than d + offsets: only offsets with a whole row
    assert [h for h, _ in _views(np.arange(5.0), 4)] == [".flat", "@1"]
    assert _views(np.arange(3.0), 4) == []
    # rows of width d (any leading shape): rows only
    assert _views(a.reshape(3, 4), 4) == [("", a.reshape(3, 4).tolist())]
    assert _views(a.reshape(3, 1, 4), 4) == [("", a.reshape(3, 4).tolist())]
    # a d x k block: its transpose, then its start read flat
    b = a.reshape(4, 3)
    assert _views(b, 4) == [(".T", b.T.tolist()), (".flat", a.reshape(3, 4).tolist())]
    # another 2-D layout: read from its start only
    assert _views(a.reshape(2, 6), 4) == [(".flat", a.reshape(3, 4).tolist())]
    assert _views(np.arange(10.0).reshape(2, 5), 4) == [(".flat", [[0, 1, 2, 3], [4, 5, 6, 7]])]
    # a square d x d block: its rows and its transpose (its columns)
    s = np.arange(16.0).reshape(4, 4)
    assert _views(s, 4) == [("", s.tolist()), (".T", s.T.tolist())]


def test_rows_checked_counts_every_row_of_every_reading():
    g = PrivacyGuard({"a": X4})
    far = np.full(14, -100.0)  # vector of 14: offsets 0..3 give 3 + 3 + 3 + 2 rows
    assert g.find({"v": far}) is None and g.rows_checked == 11
    g.find({"m": np.full((5, 4), -100.0)})  # 5 rows, nothing else
    assert g.rows_checked == 16
    g.find({"t": np.full((4, 3), -100.0)})  # transpose: 3 rows; flat from the start: 3 rows
    assert g.rows_checked == 22
    g.find({"e": np.zeros((0, 4)), "c": np.ones((3, 4), complex), "s": np.array(["ab"])})
    assert g.rows_checked == 22  # empty, complex and string arrays are not read


def test_transposed_square_block_is_found():
    # a d x d block of private rows, transposed, carries d private rows as its columns
    g = PrivacyGuard({"a": X4})
    assert g.find({"x": np.ascontiguousarray(X4[:4].T)})[:3] == ("a", "x.T", 0)


def test_row_at_an_offset_is_reported_with_its_reading_and_row():
    g = PrivacyGuard({"a": X4})
    v = np.concatenate([[-50.0, -60.0], X4[3], [-70.0]])
    assert g.find({"v": v})[:3] == ("a", "v@2", 0)
    w = np.concatenate([np.full(4, -50.0), X4[3], X4[4]])
    assert g.find({"v": w})[:3] == ("a", "v.flat", 1)


# ----------------------------------------------------------------------------- dtypes, meta
def test_every_integer_kind_is_compared_with_truncated_rows():
    D = np.array([[3.7, 5.2, 9.9], [12.1, 0.4, 7.8], [2.2, 2.2, 2.2]])
    g = PrivacyGuard({"a": D})
    for dt in (np.int8, np.int64, np.uint8, np.uint16):
        assert g.find({"x": D[1:2].astype(dt)})[:3] == ("a", "x", 0), dt
    # the same integers as floats are not a near-copy of the float rows
    assert g.find({"x": D[1:2].astype(int).astype(float)}) is None


def test_truncation_ignores_all_zero_rows_and_bool_arrays_are_read():
    # private rows in (0, 1): truncated to integers they are all zero and say nothing
    P = RNG.uniform(0.1, 0.9, size=(6, 3))
    g = PrivacyGuard({"a": P})
    assert g.find({"x": np.zeros((2, 3), dtype=np.int32)}) is None
    assert g.find({"x": np.zeros((2, 3), dtype=bool)}) is None
    # 0/1 data: a bool copy is a copy
    B = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    gb = PrivacyGuard({"b": B})
    assert gb.find({"x": B[1:2].astype(bool)})[:3] == ("b", "x", 0)


def test_non_finite_cells_are_read_as_zero():
    P = np.array([[0.0, 1.5, 2.5], [4.0, 0.0, 6.5], [7.5, 8.5, 0.0]])
    g = PrivacyGuard({"a": P})
    hit = g.find({"x": np.array([[100.0, 100.0, 100.0], [np.nan, 1.5, 2.5]])})
    assert hit == ("a", "x", 1, 0.0)
    assert g.find({"x": np.array([[np.inf, 0.0, 6.5]])}) is None  # inf -> 0: not row [4, 0, 6.5]


def test_meta_values_that_are_not_arrays_are_skipped_and_the_rest_is_checked():
    g = PrivacyGuard({"a": X4})
    meta = {"ragged": [[1.0], [1.0, 2.0]], "note": "text", "row": X4[7].tolist()}
    assert g.find({"w": np.ones(2)}, meta=meta) == ("a", "meta/row.flat", 0, 0.0)
    assert g.find({"w": np.ones(2)}, meta=None) is None


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
    assert g.violations == 1 and g.findings[0].path == "meta/debug.flat"


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
    assert s["rule"] == (
        "payload or meta row within rel_tol x median private row norm of a private row "
        "(any dtype; rows, transposed blocks, flattened runs at every offset)"
    )
