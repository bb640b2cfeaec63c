"""The bus checks messages with the guard in batches: the outcome must be the one a check at
every send gives, and nothing unchecked may ever be logged or written.

Each test compares a batching bus against one that checks every message as it is sent
(``GUARD_BATCH = 1``), or plays a protocol that tries to get a row past the batch: by failing
right after sending it, by reading the transcript before the batch is checked, or by hiding it
among many clean messages.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.errors import PrivacyGuardError
from testbed.exchange.bus import SERVER, Bus, PrivacyGuard, Transcript
from testbed.measure import Measure

RNG = np.random.default_rng(5)
PRIVATE = {"alice": RNG.normal(size=(20, 4)), "bob": RNG.normal(size=(15, 4))}


def _message(kind: str, i: int, rng: np.random.Generator):
    """One payload (and meta) of the kind drawn: clean values, a broadcast repeat, or a row of
    alice's or bob's hidden in a payload or its meta."""
    clean = rng.normal(size=(3, 4)) + 10.0
    if kind == "clean":
        return clean, None
    if kind == "repeat":
        return np.full((2, 4), 7.0), {"round": i}
    party = "alice" if kind.endswith("alice") else "bob"
    row = PRIVATE[party][i % len(PRIVATE[party])]
    if kind.startswith("meta"):
        return clean, {"debug": row.tolist()}
    return Measure(np.vstack([clean, row])), None


def _play(kinds, batch: int, mode: str, seed: int = 0):
    """Send the messages on a bus checking ``batch`` at a time; returns (bus, guard, error)."""
    guard = PrivacyGuard(PRIVATE, mode=mode)
    bus = Bus(guard=guard)
    bus.GUARD_BATCH = batch
    rng = np.random.default_rng(seed)
    error = None
    try:
        for i, kind in enumerate(kinds):
            payload, meta = _message(kind, i, rng)
            bus.send("alice" if i % 2 else "bob", SERVER, f"p.{kind}", payload, round=i, meta=meta)
        bus.flush()
    except PrivacyGuardError as exc:
        error = str(exc)
    return bus, guard, error


def _outcome(bus, guard, error):
    summary = guard.summary()
    return error, bus.transcript.digest(), len(bus.transcript), summary


KINDS = st.lists(
    st.sampled_from(["clean", "clean", "clean", "repeat", "alice", "bob", "meta_alice"]),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=KINDS, batch=st.sampled_from([2, 3, 7, 64]), mode=st.sampled_from(["stop", "record"]))
def test_batched_checks_give_what_a_check_at_every_send_gives(kinds, batch, mode):
    # Execute: the same messages, checked one at a time and in batches
    one = _outcome(*_play(kinds, 1, mode))
    many = _outcome(*_play(kinds, batch, mode))
    # Assert: the same error (first leak named), the same logged messages, the same counters
    # and findings in results.json
    assert many == one
    leaks = [k for k in kinds if k not in ("clean", "repeat")]
    if mode == "stop":
        assert (one[0] is not None) == bool(leaks)
        assert one[2] == kinds.index(leaks[0]) if leaks else len(kinds)
    else:
        assert one[3]["violations"] == len(leaks) and one[2] == len(kinds)


def test_a_leak_is_stopped_within_one_batch_of_sends():
    guard = PrivacyGuard(PRIVATE)
    bus = Bus(guard=guard)
    bus.send("alice", SERVER, "p.leak", PRIVATE["alice"][3])
    with pytest.raises(PrivacyGuardError, match="'alice'"):
        for i in range(Bus.GUARD_BATCH):
            bus.send("alice", SERVER, "p.ok", np.full(4, 100.0 + i))
    assert i == Bus.GUARD_BATCH - 2  # the batch's last send checked it
    assert len(bus.transcript) == 0


def test_a_large_payload_is_checked_before_the_batch_is_full():
    guard = PrivacyGuard(PRIVATE)
    bus = Bus(guard=guard)
    big = np.zeros((Bus.GUARD_BATCH_BYTES // 32 + 1, 4))
    big[-1] = PRIVATE["bob"][0]
    with pytest.raises(PrivacyGuardError, match="'bob'"):
        bus.send("bob", SERVER, "p.big", big)


def test_a_protocol_that_fails_after_a_leak_logs_and_writes_nothing_of_it(tmp_path):
    """Hostile: send a row, then raise before the batch is checked, hoping the row was logged
    or spilled to the run directory unchecked."""
    row = PRIVATE["alice"][7]
    transcript = Transcript(spill_dir=tmp_path, spill_threshold=0)
    bus = Bus(guard=PrivacyGuard(PRIVATE), transcript=transcript)
    bus.send("alice", SERVER, "p.ok", np.full((50, 4), 3.0))
    bus.send("alice", SERVER, "p.leak", np.vstack([np.full((50, 4), 3.0), row]))
    with pytest.raises(RuntimeError):
        try:
            raise RuntimeError("the protocol fails on purpose")
        finally:
            transcript.close()
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert row.tobytes() not in written
    assert all(e.kind != "p.leak" for e in transcript)


def test_reading_the_transcript_checks_what_is_pending_first():
    """Hostile: send a row, then read the transcript before the batch is full."""
    bus = Bus(guard=PrivacyGuard(PRIVATE))
    bus.send("bob", SERVER, "p.leak", {"x": PRIVATE["bob"][2] * 1.0})
    with pytest.raises(PrivacyGuardError, match="'bob'"):
        list(bus.transcript)
    assert len(bus.transcript) == 0


def test_sequence_numbers_count_sends_not_checks():
    bus = Bus(guard=PrivacyGuard(PRIVATE))
    envs = [bus.send("alice", SERVER, "p.ok", np.full(4, 50.0 + i)) for i in range(5)]
    assert [e.seq for e in envs] == list(range(5))
    assert [e.seq for e in bus.transcript] == list(range(5))
    assert bus.guard.messages_checked == 5
