"""The typed channel (issue 48, point 1): hostile protocols that hide a party's row in what the
guard does not read as numbers (strings of full-width, Arabic-Indic or underscored digits,
mapping keys, the kind, names, lengths, dtypes, nested lists, bytes, the keys and texts of what
a result releases) are refused at send time, on one line naming protocol, kind and field; a run
exits 1 with that line and a sweep keeps the cells it finished."""

from __future__ import annotations

import json

import numpy as np
import pytest

from testbed.api import ProtocolResult
from testbed.cli.main import main
from testbed.exchange.bus import SERVER
from testbed.exchange.schema import Choice, Message, MessageSchemaError, Num, Record
from testbed.run.execute import execute
from testbed.scenario.loading import parse_scenario
from tests._toy_protocols import MEAN, PrivateMean, registered, two_gaussians

FULL_WIDTH = str.maketrans("0123456789.-", "０１２３４５６７８９．－")
ARABIC_INDIC = str.maketrans("0123456789.", "٠١٢٣٤٥٦٧٨٩٫")


def _row(party):
    return np.array(party.X[0], dtype=np.float64)


def _text(x: float) -> str:
    return repr(float(x))


def _underscored(x: float) -> str:
    """``2.0_9_8e-01``: Python's float() reads it, a digits-only pattern reads pieces."""
    m, e = f"{x:.6e}".split("e")
    return "_".join(m[:3]) + m[3:].replace("", "_").strip("_") + "e" + e


#: the carrier's own declared message: a level (a declared choice) and a value, meta: a flag
NOTE = Message(Record(level=Choice("low", "high"), value=Num()), meta={"flag": Choice("on")})


class _Carrier(PrivateMean):
    """Runs the honest mean exchange, then tries to carry the first row of the first party out
    with :meth:`carry`; a class per carrier."""

    steps = {"mean": MEAN, "note": NOTE}

    def __init_subclass__(cls, **kw):
        cls.name = "carrier_" + cls.__name__.lower()
        super().__init_subclass__(**kw)

    def run(self, parties, bus, rng):
        a = list(parties)[0]
        out = self.carry(bus, a, bus.local(a, _row))
        return out if out is not None else super().run(parties, bus, rng)

    def note(self, bus, a, payload, meta=None, kind="note", **kw):
        bus.send(a, SERVER, f"{self.name}.{kind}", payload, meta=meta, **kw)


class FullWidth(_Carrier):
    """Carrier 1: the row as text in full-width digits (float() reads them)."""

    def carry(self, bus, a, x):
        self.note(bus, a, {"level": _text(x[0]).translate(FULL_WIDTH), "value": 0.0})


class ArabicIndic(_Carrier):
    """Carrier 1: the row as text in Arabic-Indic digits, in meta."""

    def carry(self, bus, a, x):
        meta = {"flag": _text(x[0]).translate(ARABIC_INDIC)}
        self.note(bus, a, {"level": "low", "value": 0.0}, meta=meta)


class Underscored(_Carrier):
    """Carrier 2: digit-separating underscores (``2.0_9_8e-01``)."""

    def carry(self, bus, a, x):
        self.note(bus, a, {"level": _underscored(x[0]), "value": 0.0})


class MetaKeys(_Carrier):
    """Carrier 3: the row as the keys of a mapping in meta."""

    def carry(self, bus, a, x):
        self.note(bus, a, {"level": "low", "value": 0.0}, meta={_text(v): 1 for v in x})


class NestedKeys(_Carrier):
    """Carrier 3: the row as the keys of a mapping inside a declared field."""

    def carry(self, bus, a, x):
        self.note(bus, a, {"level": "low", "value": 0.0, **{_text(v): 0.0 for v in x}})


class KindNumbers(_Carrier):
    """Carrier 4: numbers inside the message kind."""

    def carry(self, bus, a, x):
        self.note(bus, a, {"level": "low", "value": 0.0}, kind="note_" + _text(x[0]))


class OutputKeys(_Carrier):
    """Carrier 5: the row as the keys of the released outputs."""

    def carry(self, bus, a, x):
        return ProtocolResult(estimates={"mean_distance": 1.0}, outputs={_text(v): 0 for v in x})


class EstimateKeys(_Carrier):
    def carry(self, bus, a, x):
        return ProtocolResult(estimates={"mean_distance": 1.0, _text(x[0]): 0.0})


class HistoryText(_Carrier):
    def carry(self, bus, a, x):
        return ProtocolResult(estimates={"mean_distance": 1.0}, history={"h": [_text(x[0])]})


class ModeDigits(_Carrier):
    def carry(self, bus, a, x):
        return ProtocolResult(
            estimates={"mean_distance": 1.0}, mode=_text(x[0]).translate(FULL_WIDTH)
        )


class DeviationUnderscores(_Carrier):
    def carry(self, bus, a, x):
        return ProtocolResult(estimates={"mean_distance": 1.0}, deviations=(_underscored(x[0]),))


class DetectionKeys(_Carrier):
    def carry(self, bus, a, x):
        return ProtocolResult(estimates={"mean_distance": 1.0}, detection={_text(x[0]): {}})


class FreeString(_Carrier):
    """A string in a field declared numeric."""

    def carry(self, bus, a, x):
        self.note(bus, a, {"level": "low", "value": _text(x[0])})


class BytesInMeta(_Carrier):
    """Bytes in meta (was: TypeError, not JSON serializable, after the run)."""

    def carry(self, bus, a, x):
        self.note(bus, a, {"level": "low", "value": 0.0}, meta={"flag": x.tobytes()})


class BytesPayload(_Carrier):
    def carry(self, bus, a, x):
        self.note(bus, a, x.tobytes(), kind="mean")


class UndeclaredMeta(_Carrier):
    def carry(self, bus, a, x):
        self.note(bus, a, {"level": "low", "value": 0.0}, meta={"flag": "on", "extra": 1.0})


class ReceiverName(_Carrier):
    """Numbers in a name: the receiver."""

    def carry(self, bus, a, x):
        bus.send(a, "server_" + _text(x[0]), f"{self.name}.note", {"level": "low", "value": 0.0})


class SenderName(_Carrier):
    def carry(self, bus, a, x):
        bus.send(_text(x[0]), SERVER, f"{self.name}.note", {"level": "low", "value": 0.0})


class ShapeLength(_Carrier):
    """A number as an array's length (the schema declares ``("d",)``)."""

    def carry(self, bus, a, x):
        self.note(bus, a, np.zeros(1 + int(abs(x[0]) * 1000)), kind="mean")


class StringDtype(_Carrier):
    def carry(self, bus, a, x):
        self.note(bus, a, np.array([_text(v) for v in x]), kind="mean")


class StructuredDtype(_Carrier):
    """Numbers in a dtype's field names."""

    def carry(self, bus, a, x):
        dt = np.dtype([(f"f{_text(v)}", "f8") for v in x])
        self.note(bus, a, np.zeros(len(x), dtype=np.float64).view(dt), kind="mean")


class DatetimeDtype(_Carrier):
    def carry(self, bus, a, x):
        self.note(bus, a, (x * 1e6).astype("datetime64[us]"), kind="mean")


class NestedList(_Carrier):
    """The row in a nested, ragged list with strings."""

    def carry(self, bus, a, x):
        self.note(bus, a, {"level": "low", "value": [[float(x[0])], [_text(x[1]), 1.0]]})


class WideInt(_Carrier):
    """A Python integer wider than 64 bits."""

    def carry(self, bus, a, x):
        big = int.from_bytes(x.tobytes(), "little")
        self.note(bus, a, {"level": "low", "value": big})


class RoundText(_Carrier):
    def carry(self, bus, a, x):
        self.note(bus, a, {"level": "low", "value": 0.0}, round=_text(x[0]))


class UndeclaredChoice(_Carrier):
    def carry(self, bus, a, x):
        self.note(bus, a, {"level": "low", "value": 0.0}, meta={"flag": _text(x[0])})


class WidensItsSchema(_Carrier):
    """Declares a free field in its class while it runs: the channel was read before."""

    def carry(self, bus, a, x):
        declared = type(self).messages
        type(self).messages = {
            **declared,
            f"{self.name}.free": Message(Record({_text(x[0]): Num()})),
        }
        try:
            self.note(bus, a, {_text(x[0]): 0.0}, kind="free")
        finally:
            type(self).messages = declared


CARRIERS = {
    FullWidth: "message 'carrier_fullwidth.note' field payload/level",
    ArabicIndic: "message 'carrier_arabicindic.note' field meta/flag",
    Underscored: "message 'carrier_underscored.note' field payload/level",
    MetaKeys: "message 'carrier_metakeys.note' field meta/<key>: not a declared name",
    NestedKeys: "message 'carrier_nestedkeys.note' field payload/<key>: not a declared name",
    KindNumbers: "message kind '<kind>' is not a declared kind",
    OutputKeys: "released outputs: not empty, and the protocol declares no schema for it",
    EstimateKeys: "released estimates/<key>: not a declared name",
    HistoryText: "released history: not empty",
    ModeDigits: "released mode: text",
    DeviationUnderscores: "released deviations/0: text",
    DetectionKeys: "released detection: not empty",
    FreeString: "message 'carrier_freestring.note' field payload/value",
    BytesInMeta: "message 'carrier_bytesinmeta.note' field meta/flag",
    BytesPayload: "message 'carrier_bytespayload.mean' field payload",
    UndeclaredMeta: "message 'carrier_undeclaredmeta.note' field meta/extra: not a declared name",
    ReceiverName: "message 'carrier_receivername.note' field receiver",
    SenderName: "message 'carrier_sendername.note' field sender",
    ShapeLength: "message 'carrier_shapelength.mean' field payload: length",
    StringDtype: "message 'carrier_stringdtype.mean' field payload: an array of dtype '<U",
    StructuredDtype: "message 'carrier_structureddtype.mean' field payload",
    DatetimeDtype: "message 'carrier_datetimedtype.mean' field payload",
    NestedList: "message 'carrier_nestedlist.note' field payload",
    WideInt: "message 'carrier_wideint.note' field payload/value: an integer wider than 64 bits",
    RoundText: "message 'carrier_roundtext.note' field round",
    UndeclaredChoice: "message 'carrier_undeclaredchoice.note' field meta/flag",
    WidensItsSchema: "message kind 'carrier_widensitsschema.free' is not a declared kind",
}


def _scenario(name: str, guard: str = "stop"):
    return parse_scenario(two_gaussians(f"typed_{name}", name, f"guard: {guard}"))


@pytest.mark.parametrize("guard", ["stop", "off"])
@pytest.mark.parametrize("cls", list(CARRIERS), ids=lambda c: c.__name__)
def test_every_carrier_is_refused_on_one_line_naming_protocol_kind_and_field(cls, guard):
    # Prepare: the honest run of the same protocol passes (the refusal is the carrier's)
    with registered(cls, PrivateMean):
        # Execute
        with pytest.raises(MessageSchemaError) as err:
            execute(_scenario(cls.name, guard), until="results", write=False)
    # Assert: one line, the protocol, the kind and the field; never the smuggled value
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"protocol '{cls.name}': "), msg
    assert CARRIERS[cls] in msg, msg
    for party_value in ("0.", "e-0"):
        assert party_value not in msg.split(":", 1)[1].replace("'", ""), msg


def test_the_honest_toy_runs_on_the_typed_channel():
    with registered(PrivateMean):
        out = execute(_scenario("toy_private_mean"), until="results", write=False)
    kinds = {e.kind for e in out.exchange.transcript}
    assert kinds == {"toy_private_mean.mean"}


def test_a_protocol_without_a_message_schema_does_not_run(monkeypatch):
    monkeypatch.setattr(PrivateMean, "messages", {})
    with registered(PrivateMean), pytest.raises(MessageSchemaError) as err:
        execute(_scenario("toy_private_mean"), until="results", write=False)
    assert "declares no message schema" in str(err.value)


def _sweep(name: str) -> str:
    return two_gaussians(
        "typed_sweep",
        f"{name}, params: {{}}",
        "sweep:\n  protocol.name: [toy_private_mean, " + name + "]\n",
    )


def test_testbed_run_exits_1_with_the_one_line_refusal(tmp_path, capsys):
    sc = tmp_path / "s.yaml"
    sc.write_text(two_gaussians("typed_cli", BytesInMeta.name))
    with registered(BytesInMeta):
        rc = main(["run", str(sc), "--out", str(tmp_path / "r"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert len(err) == 1, err
    assert err[0].startswith(
        "error: protocol 'carrier_bytesinmeta': message 'carrier_bytesinmeta.note' field "
        "meta/flag: a value of type bytes"
    ), err
    assert not (tmp_path / "r").exists()


def test_a_sweep_keeps_the_cells_it_finished_before_the_refused_one(tmp_path, capsys):
    sc = tmp_path / "s.yaml"
    sc.write_text(_sweep(MetaKeys.name))
    out = tmp_path / "sweep"
    with registered(MetaKeys, PrivateMean):
        rc = main(["run", str(sc), "--out", str(out), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1, err
    assert "protocol 'carrier_metakeys'" in err[0] and "meta/<key>" in err[0], err
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["setting"]["protocol.name"] for r in rows] == ["toy_private_mean"], rows


def test_a_defense_cannot_add_meta_beyond_its_mark():
    from testbed.exchange.bus import Bus
    from testbed.exchange.schema import Channel

    class Marks:
        name = "marks"

        def applies_to(self, env):
            return True

        def on_send(self, env, rng, ledger):
            return env.with_payload(env.payload, defended_by=("marks",), note="0.2098")

    ch = Channel.of(
        PrivateMean(PrivateMean.Config()), ["alice", SERVER], {"alice": 3}, 3, ["marks"]
    )
    bus = Bus([(Marks(), None)])
    bus.channel = ch
    with pytest.raises(MessageSchemaError) as err:
        bus.send("alice", SERVER, "toy_private_mean.mean", np.zeros(3))
    assert "defense 'marks'" in str(err.value) and "meta/note" in str(err.value)
    Marks.on_send = lambda self, env, rng, ledger: env.with_payload(
        env.payload, defended_by="marks"
    )
    assert bus.send("alice", SERVER, "toy_private_mean.mean", np.zeros(3)).defended_by == ("marks",)
