"""Envelopes, the append-only transcript, views, defenses on the bus, and the privacy guard."""

from __future__ import annotations

import numpy as np
import pytest

from defenses._base import Defense
from testbed.errors import PrivacyGuardError, TestbedError
from testbed.exchange.bus import EAVESDROPPER, SERVER, Bus, Envelope, PrivacyGuard, Transcript
from testbed.measure import Measure


def _bus_with_traffic():
    bus = Bus()
    m = Measure(np.arange(6, dtype=float).reshape(3, 2))
    bus.send(SERVER, "alice", "p.xi", m, round=1)
    bus.send(SERVER, "bob", "p.xi", m, round=1)
    bus.send("alice", SERVER, "p.eta", {"m": m, "d": 1.5}, round=1)
    bus.send("bob", SERVER, "p.cost", np.ones((2, 2)), round=1)
    bus.send("alice", "bob", "p.direct", 3.0, round=2)
    return bus


def test_envelope_payload_is_a_read_only_copy():
    # Prepare
    arr = np.zeros((2, 2))
    # Execute
    env = Envelope.make(seq=0, round=0, sender="a", receiver="b", kind="p.x", payload={"arr": arr})
    arr[0, 0] = 7.0
    # Assert: the sender's later writes do not reach the envelope, and it cannot be written
    assert env.payload["arr"][0, 0] == 0.0
    with pytest.raises(ValueError):
        env.payload["arr"][0, 0] = 1.0
    with pytest.raises(TypeError):
        env.payload["new"] = 1
    assert env.nbytes == 32
    assert env.digest.startswith("blake3.v2:") and len(env.digest) == len("blake3.v2:") + 64


def test_transcript_is_append_only_and_ordered():
    bus = _bus_with_traffic()
    tr = bus.transcript
    assert [e.seq for e in tr] == list(range(5))
    with pytest.raises(TestbedError, match="append-only"):
        tr._append(tr[0])
    with pytest.raises(AttributeError):
        tr[0].kind = "x"  # frozen


def test_transcript_roundtrip_preserves_digests(tmp_path):
    bus = _bus_with_traffic()
    bus.transcript.save(tmp_path)
    loaded = Transcript.load(tmp_path)
    assert loaded.digest() == bus.transcript.digest()
    assert [e.digest for e in loaded] == [e.digest for e in bus.transcript]
    assert isinstance(loaded[2].payload["m"], Measure)
    assert loaded[4].payload == 3.0


def test_transcript_load_detects_tampering(tmp_path):
    bus = _bus_with_traffic()
    bus.transcript.save(tmp_path)
    text = (tmp_path / "envelopes.jsonl").read_text().replace('"value": "3.0"', '"value": "4.0"')
    (tmp_path / "envelopes.jsonl").write_text(text)
    with pytest.raises(TestbedError, match="digest mismatch"):
        Transcript.load(tmp_path)


@pytest.mark.parametrize(
    ("observer", "colluders", "expected"),
    [
        (SERVER, (), [0, 1, 2, 3]),
        ("alice", (), [0, 2, 4]),
        ("bob", (), [1, 3, 4]),
        ("bob", ("alice",), [0, 1, 2, 3, 4]),
        (EAVESDROPPER, (), [0, 1, 2, 3, 4]),
    ],
)
def test_view_holds_what_the_observer_saw(observer, colluders, expected):
    tr = _bus_with_traffic().transcript
    own = {"alice": np.ones((2, 2)), "bob": np.zeros((2, 2))}
    view = tr.view(observer, colluders, own_data=own)
    assert [e.seq for e in view.envelopes] == expected
    assert set(view.own_data) == ({observer, *colluders} & set(own))
    assert view.own_data.get("alice") is None or not view.own_data["alice"].flags.writeable


class _AddOne(Defense):
    name = "add_one_test"

    def on_send(self, env, rng, ledger):
        return env.with_payload(np.asarray(env.payload) + 1.0, defended=True)


class _Mutating(Defense):
    name = "returns_same_test"

    def on_send(self, env, rng, ledger):
        return env


def test_defense_returns_new_envelope_and_transcript_logs_what_was_sent():
    bus = Bus(defenses=[(_AddOne(), np.random.default_rng(0))])
    delivered = bus.send("alice", SERVER, "p.v", np.zeros(3))
    np.testing.assert_array_equal(delivered.payload, np.ones(3))
    np.testing.assert_array_equal(bus.transcript[0].payload, np.ones(3))
    assert bus.transcript[0].meta["defended"] is True
    # the server's own messages are not defended by default
    assert bus.send(SERVER, "alice", "p.v", np.zeros(3)).payload.sum() == 0


class _Tag(Defense):
    name = "tag_test"

    def on_send(self, env, rng, ledger):
        return self.marked(env, env.payload)


def test_defended_by_reads_the_names_a_defense_wrote_in_meta():
    from testbed.exchange.envelope import defended_by

    assert defended_by(None) == defended_by({}) == ()
    assert defended_by({"defended_by": "noisy_soft_labels"}) == ("noisy_soft_labels",)
    assert defended_by({"defended_by": ["a", "b"]}) == ("a", "b")  # as reloaded from JSON
    bus = Bus(defenses=[(_AddOne(), np.random.default_rng(0)), (_Tag(), None)])
    env = bus.send("alice", SERVER, "p.v", np.zeros(3))
    # a defense that does not name itself (_AddOne) is not listed: nothing records it
    assert env.defended_by == ("tag_test",) and env.meta["defended"] is True
    again = _Tag().marked(env, env.payload)
    assert again.defended_by == ("tag_test", "tag_test") and env.defended_by == ("tag_test",)


def test_defense_returning_the_same_envelope_is_refused():
    bus = Bus(defenses=[(_Mutating(), np.random.default_rng(0))])
    with pytest.raises(TestbedError, match="new Envelope"):
        bus.send("alice", SERVER, "p.v", np.zeros(3))


def test_guard_refuses_a_private_row_even_after_round_off():
    X = np.random.default_rng(0).normal(size=(5, 3))
    guard = PrivacyGuard({"alice": X})
    bus = Bus(guard=guard)
    # a row passed through (1-t) x + t x carries round-off but is still the row
    t = 0.3
    leaked = (1 - t) * X[2] + t * X[2]
    bus.send("alice", SERVER, "p.leak", Measure(np.vstack([X[2] + 1, leaked])))
    with pytest.raises(PrivacyGuardError, match="alice"):
        bus.flush()
    assert len(bus.transcript) == 0  # nothing refused is logged
    bus.send("alice", SERVER, "p.ok", Measure(X + 1e-3))
    assert len(bus.transcript) == 1


def test_guard_exempt_rows_are_allowed():
    X = np.arange(6, dtype=float).reshape(3, 2)
    guard = PrivacyGuard({"alice": X}, exempt=[X[:1]])
    assert guard.find({"a": X[:1]}) is None
    assert guard.find({"a": X[1:2]})[:3] == ("alice", "a", 0)


def test_bus_local_runs_at_the_party_only():
    from testbed.data.datasets import PartyData

    bus = Bus(parties={"alice": PartyData("alice", np.ones((2, 2)))})
    assert bus.local("alice", lambda p, k: p.X.sum() * k, 2) == 8.0
    with pytest.raises(TestbedError, match="no party 'carol'"):
        bus.local("carol", lambda p: p)


def test_with_digest_is_replace_without_the_constructor():
    from dataclasses import FrozenInstanceError, replace

    env = Envelope.make(seq=3, round=1, sender="a", receiver="b", kind="p.s",
                        payload={"m": Measure(np.ones((2, 2)), [0.5, 0.5]), "x": 1.0},
                        meta={"note": 1}, hashed=False)  # fmt: skip
    new = env.with_digest("blake3.v2:ab")
    assert new == replace(env, digest="blake3.v2:ab")
    assert env.digest == "" and new.digest == "blake3.v2:ab"  # the original is untouched
    assert new.payload is env.payload and new.meta is env.meta
    with pytest.raises(FrozenInstanceError):
        new.digest = "other"


def test_make_sets_every_field_as_the_constructor_would():
    from dataclasses import fields

    payload = {"m": Measure(np.ones((2, 2)), [0.5, 0.5]), "x": 1.0}
    for meta in (None, {}, {"note": 1}):
        env = Envelope.make(seq=np.int64(3), round=1, sender="a", receiver="b", kind="p.s",
                            payload=payload, meta=meta)  # fmt: skip
        same = Envelope(**{f.name: getattr(env, f.name) for f in fields(Envelope)})
        assert env == same and env.record() == same.record()
        assert type(env.seq) is int and dict(env.meta) == dict(meta or {})
        with pytest.raises(TypeError):
            env.meta["new"] = 2  # read-only, also when empty
