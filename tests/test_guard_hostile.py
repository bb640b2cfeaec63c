"""Hostile protocols against the testbed's privacy guard (issue 21, breaks 7-9).

Each protocol below is written as a protocol author who wants raw rows out would write it, with
ordinary plugin code: it switches its own guard off, declares every row exempt, reads rows on the
driver and releases them, or hides rows in meta, in a 3-D transposed block, at an offset inside
wider rows, behind another dtype's view of the same bytes, or in a complex array. Each must be
stopped by ``guard: stop``, recorded by ``guard: record`` and fail the contract kit's
``no_private_rows``.
"""

from __future__ import annotations

import numpy as np
import pytest

from testbed.errors import PrivacyGuardError
from testbed.exchange.bus import SERVER
from testbed.exchange.schema import Array, Message, Num, Record
from testbed.run.execute import Replay, execute
from testbed.scenario.loading import parse_scenario
from testbed.testing import protocol_checks
from tests._toy_protocols import MEAN, PrivateMean, registered, two_gaussians

NOISE = np.random.default_rng(11).normal(size=(5, 4))


def _rows(party, k=5):
    return np.array(party.X[:k], dtype=np.float64)


class _Hostile(PrivateMean):
    """Runs the honest mean exchange, then sends ``leak(rows)`` (payload, meta) to the server."""

    #: what the typed channel lets through: any numeric array (the guard reads it whole)
    steps = {"mean": MEAN, "debug": Message(Array("fic", None))}

    def __init_subclass__(cls, **kw):
        cls.name = "hostile_" + cls.__name__.lower()
        super().__init_subclass__(**kw)

    def leak(self, X):  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def run(self, parties, bus, rng):
        a = list(parties)[0]
        payload, meta = self.leak(bus.local(a, _rows))
        bus.send(a, SERVER, f"{self.name}.debug", payload, meta=meta)
        return super().run(parties, bus, rng)


class OptsOut(_Hostile):
    """Break 7: declares that nothing is private, then sends raw rows."""

    def private_arrays(self, parties):
        return {}

    def leak(self, X):
        return X, None


class AllExempt(_Hostile):
    """Break 7: declares every party's rows exempt, then sends raw rows."""

    def exempt_arrays(self, parties):
        return [d.X for d in parties.values()]

    def leak(self, X):
        return X, None


class DriverRelease(PrivateMean):
    """Break 8: the driver takes rows (from the roster's placement where there is one, else from
    a party's local call) and releases them as estimates and outputs; no message carries them."""

    name = "hostile_driverrelease"
    released = {
        "estimates": Record({"mean_distance": Num(), **{f"x{i}": Num() for i in range(8)}}),
        "outputs": Record(sample=Array("f", None)),
    }

    def run(self, parties, bus, rng):
        a = list(parties)[0]
        placement = getattr(parties, "placement", None)
        X = placement()[a].X[:3] if placement is not None else bus.local(a, _rows, 3)
        honest = super().run(parties, bus, rng)
        est = dict(honest.estimates) | {f"x{i}": float(v) for i, v in enumerate(X[0])}
        return type(honest)(estimates=est, outputs={"sample": np.array(X)})


class InMeta(_Hostile):
    """Break 9: an innocent payload, the rows in a declared numeric meta field (nested
    mappings in meta are refused by the typed channel: tests/test_typed_messages.py)."""

    steps = {"mean": MEAN, "debug": Message(Num(), meta={"trace": Array("f", None)})}

    def leak(self, X):
        return 1.0, {"trace": X.tolist()}


class Transposed3D(_Hostile):
    """Break 9: a transposed block inside a 3-D array."""

    def leak(self, X):
        block = np.zeros((2, X.shape[1], len(X)))
        block[1] = X.T
        return block, None


class AtOffset(_Hostile):
    """Break 9: rows at an offset inside wider rows."""

    def leak(self, X):
        return np.hstack([NOISE[:, :1], X, NOISE[:, 1:3]]), None  # starts 6r + 1: never 3k


class Uint8View(_Hostile):
    """Break 9: the same bytes as uint8."""

    def leak(self, X):
        return X.view(np.uint8), None


class Int64View(_Hostile):
    """Break 9: the same bytes as int64."""

    def leak(self, X):
        return X.view(np.int64), None


class ShiftedBytes(_Hostile):
    """Beyond break 9: the bytes shifted by 3 and read as int64."""

    def leak(self, X):
        raw = b"\x00" * 3 + X.tobytes() + b"\x00" * 5
        return np.frombuffer(raw, dtype=np.int64), None


class AsComplex(_Hostile):
    """Break 9: a complex array whose real part is the rows."""

    def leak(self, X):
        return X + 1j * NOISE[:, : X.shape[1]], None


class ComplexView(_Hostile):
    """Break 9: a complex array whose real and imaginary parts interleave a row's values."""

    def leak(self, X):
        return np.ascontiguousarray(np.hstack([X, X[:, :1]])).view(np.complex128), None


HOSTILE = (
    OptsOut,
    AllExempt,
    DriverRelease,
    InMeta,
    Transposed3D,
    AtOffset,
    Uint8View,
    Int64View,
    ShiftedBytes,
    AsComplex,
    ComplexView,
)


@pytest.fixture(scope="module")
def hostile():
    with registered(*HOSTILE):
        yield


def _scenario(cls, mode):
    return parse_scenario(two_gaussians("hostile", cls.name, f"guard: {mode}\n"))


@pytest.mark.parametrize("cls", HOSTILE, ids=lambda c: c.__name__)
def test_guard_stop_ends_the_run(hostile, cls):
    with pytest.raises(PrivacyGuardError, match="near-copy of a private row of 'alice'"):
        execute(_scenario(cls, "stop"), until="results", write=False)


@pytest.mark.parametrize("cls", HOSTILE, ids=lambda c: c.__name__)
def test_guard_record_keeps_the_violation(hostile, cls):
    res = execute(_scenario(cls, "record"), until="results", write=False).results
    assert res["guard"]["violations"] >= 1
    assert {f["party"] for f in res["guard"]["findings"]} == {"alice"}


@pytest.mark.parametrize("cls", HOSTILE, ids=lambda c: c.__name__)
def test_contract_kit_fails_no_private_rows(hostile, cls):
    with pytest.raises(AssertionError, match="private rows reach other parties"):
        dict(protocol_checks(cls))["no_private_rows"]()


def test_a_release_is_named_as_such(hostile):
    res = execute(_scenario(DriverRelease, "record"), until="results", write=False).results
    kinds = {(f["seq"], f["sender"], f["receiver"], f["kind"]) for f in res["guard"]["findings"]}
    assert kinds == {(-1, "protocol", "released", "estimates"), (-1, "protocol", "released",
                                                                  "outputs")}  # fmt: skip
    line = res["guard"]["findings"][0]["message"]
    assert "the protocol's released estimates" in line and "\n" not in line


def test_released_rows_replayed_to_attacks_are_stopped(hostile):
    """``testbed attack`` on a saved run hands its released estimates to the attacks: a saved
    results.json whose estimates carry a row is refused before any attack sees it."""
    with registered(PrivateMean):
        sc = _scenario(PrivateMean, "stop")
        out = execute(sc, until="results", write=False)
        row = out.world.parties["bob"].X[4]
        released = dict(out.results["estimates"]) | {"a": row[0], "b": row[1], "c": row[2]}
        with pytest.raises(PrivacyGuardError, match="'bob'"):
            execute(sc, replay=Replay(out.transcript, released=released))
