"""The privacy guard catches near-copies of private rows: relative to the data's scale, in any
dtype, shape or in message metadata; `guard: record` keeps violations as findings."""

from __future__ import annotations

import numpy as np
import pytest
from _scenarios import gaussians
from sklearn.datasets import load_digits

from testbed.cli.main import main
from testbed.errors import PrivacyGuardError
from testbed.exchange.bus import Bus, Envelope
from testbed.exchange.guard import PrivacyGuard
from testbed.run.execute import execute
from testbed.scenario.loading import parse_scenario

RNG = np.random.default_rng(0)
DIGITS = load_digits().data[:300]  # integer-valued rows, norms ~ 50
SCALED = DIGITS / 16.0 * 3.0 + 0.05  # not integer-valued
GAMMA = RNG.normal(size=DIGITS.shape)

NEAR = {
    "exact rows": SCALED[:7],
    "TriangleWad push with t = 1e-8": (1 - 1e-8) * SCALED + 1e-8 * GAMMA,
    "raw rows + noise of 1e-9": SCALED + 1e-9 * RNG.normal(size=SCALED.shape),
    "rows cast to int": SCALED.astype(int),
    "rows cast to float32": SCALED.astype(np.float32),
    "transposed block": np.ascontiguousarray(SCALED[10:20].T),
    "flattened block": SCALED[5:9].ravel(),
    "flattened at an offset": np.concatenate([[0.1, 0.2, 0.3], SCALED[5:9].ravel()]),
    "one row inside a mapping": {"inner": {"deep": SCALED[42:43]}},
    "sub-block of rows": SCALED[100:103],
}
FAR = {
    "push with t = 0.3": 0.7 * SCALED + 0.3 * GAMMA,
    "offset of 1e-4 x the scale": SCALED + 1e-4 * np.median(np.linalg.norm(SCALED, axis=1)),
    "public Gaussian sample": RNG.normal(size=(50, 64)),
    "per-row means": SCALED.mean(axis=1),
}


@pytest.fixture(scope="module")
def guard():
    return PrivacyGuard({"alice": SCALED, "bob": SCALED[:0] + 100.0})


@pytest.mark.parametrize("case", list(NEAR))
def test_near_copies_are_found(guard, case):
    payload = NEAR[case] if isinstance(NEAR[case], dict) else {"x": NEAR[case]}
    hit = guard.find(payload)
    assert hit is not None and hit[0] == "alice"
    assert hit[3] <= guard.thresholds["alice"]


@pytest.mark.parametrize("case", list(FAR))
def test_what_is_not_a_near_copy_passes(guard, case):
    assert guard.find({"x": FAR[case]}) is None


def test_rows_in_meta_are_found(guard):
    assert guard.find(1.0, meta={"debug": SCALED[3].tolist()})[1].startswith("meta/debug")


def test_threshold_follows_the_data_scale():
    # the same relative perturbation is caught at any scale, and a fixed absolute one is not
    for scale in (1e-6, 1.0, 1e6):
        X = SCALED * scale
        g = PrivacyGuard({"a": X})
        assert g.find({"x": X * (1 + 1e-8)}) is not None
        assert g.find({"x": X * (1 + 1e-4)}) is None


def test_integer_valued_data_cast_to_int_is_found():
    g = PrivacyGuard({"a": DIGITS})
    assert g.find({"x": (DIGITS[:4] + 0.4).astype(np.int16)}) is not None


def test_exempt_rows_are_not_guarded():
    g = PrivacyGuard({"alice": SCALED}, exempt=[SCALED[:1]])
    assert g.find({"a": SCALED[:1]}) is None
    assert g.find({"a": SCALED[1:2]})[:3] == ("alice", "a", 0)


def _env(payload, meta=None):
    return Envelope.make(
        seq=0,
        round=3,
        sender="alice",
        receiver="server",
        kind="toy.step",
        payload=payload,
        meta=meta,
    )


def test_stop_mode_names_sender_receiver_kind_and_round():
    bus = Bus(guard=PrivacyGuard({"alice": SCALED}))
    with pytest.raises(PrivacyGuardError) as exc:
        bus.guard.check(_env({"x": NEAR["TriangleWad push with t = 1e-8"]}))
    msg = str(exc.value)
    assert "\n" not in msg
    for word in ("toy.step", "alice", "server", "round 3"):
        assert word in msg


def test_record_mode_keeps_findings_and_goes_on():
    g = PrivacyGuard({"alice": SCALED}, mode="record")
    g.check(_env({"x": SCALED[:2]}))
    g.check(_env({"x": FAR["push with t = 0.3"]}))
    s = g.summary()
    assert s["violations"] == 1 and s["messages_checked"] == 2
    assert s["findings"][0]["party"] == "alice" and s["rows_checked"] > 0


def _triangle(t: float, mode: str) -> str:
    return gaussians(
        "guard_triangle",
        f"guard: {mode}",
        seed=3,
        components=((30, 0.0), (20, 2.0)),
        protocol="triangle_wad",
        params=f"{{t: {t}, support_size: 5}}",
        transform=None,
    )


def test_triangle_wad_with_tiny_t_is_stopped_with_one_line(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(_triangle(1e-8, "stop"))
    code = main(["run", str(f), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1
    assert "triangle_wad." in err and "near-copy" in err


def test_triangle_wad_with_tiny_t_is_a_finding_in_record_mode(tmp_path):
    sc = parse_scenario(_triangle(1e-8, "record"))
    res = execute(sc, tmp_path / "run").results
    assert res["guard"]["mode"] == "record" and res["guard"]["violations"] >= 1
    assert res["guard"]["findings"][0]["kind"].startswith("triangle_wad.")


def test_triangle_wad_with_a_real_t_passes_and_says_what_was_checked(tmp_path):
    sc = parse_scenario(_triangle(0.4, "stop"))
    res = execute(sc, tmp_path / "run").results
    g = res["guard"]
    assert g["violations"] == 0 and g["messages_checked"] > 0 and g["rows_checked"] > 0
    assert set(g["thresholds"]) == {"alice", "bob"}


PUBLIC = """\
name: guard_public
seed: 1
data:
  dataset: {{name: gaussians, params: {{d: 3, components: [{{n: 30, mean: 0.0}}, {{n: 20, mean: 2.0}}]}}}}
  partition: {{name: class_subsets, params: {{classes: [[0], [1]]}}}}
  parties: [alice, bob]
  public: [{public}]
protocol: {{name: fedwad}}
"""


def test_the_scenario_marks_data_public_and_the_guard_follows():
    from testbed.run.exchange import world_guard
    from testbed.run.roster import build_world

    world = build_world(parse_scenario(PUBLIC.format(public="bob")))
    guard = world_guard(world)
    assert world.public_data == ("bob",) and set(guard.thresholds) == {"alice"}
    assert guard.find({"x": world.parties["bob"].X[:3]}) is None
    assert guard.find({"x": world.parties["alice"].X[:3]})[0] == "alice"
    # unset, it changes no configuration hash; a name that is not a party is refused
    base = parse_scenario(PUBLIC.format(public="").replace("  public: []\n", ""))
    assert "public" not in execute(base, until="world").world.rs.as_json()["data"]
    with pytest.raises(Exception, match="public: unknown party 'carol'"):
        parse_scenario(PUBLIC.format(public="carol"))
