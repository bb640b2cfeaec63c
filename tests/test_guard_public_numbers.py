"""The privacy guard and the public configuration: a window of a message's loose numbers made
only of numbers the scenario itself configures is counted, not a finding (TriangleWad's announced
gamma params on small-integer data were stopped as a leak); anything else still is one, however a
hostile protocol mixes a private row with public numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from testbed.cli.main import main
from testbed.exchange.guard import PrivacyGuard

# small-integer rows, as a CSV of counts gives: (4, 0), (0, 1) and (1, 2) are among them
ALICE = np.array([[4.0, 0.0], [0.0, 1.0], [1.0, 2.0], [3.0, 5.0], [1.0, 3.7]])
PUBLIC = [4.0, 0.0, 1.0, 2.0]  # support_size, gamma_mean, gamma_std, dim
ANNOUNCE = {"seed": 1234567, "support_size": 4, "mean": 0.0, "std": 1.0, "dim": 2}


def _guard(public=PUBLIC) -> PrivacyGuard:
    return PrivacyGuard({"alice": ALICE}, mode="record", worker=False, public_numbers=public)


def test_an_announcement_of_public_numbers_is_counted_not_found():
    assert _guard(public=()).find(ANNOUNCE)[:3] == ("alice", "numbers", 1)  # the false positive
    g = _guard()
    assert g.find(ANNOUNCE) is None
    assert g.public_match_count == 3
    assert [m["values"] for m in g.public_matches] == [[4.0, 0.0], [0.0, 1.0], [1.0, 2.0]]
    assert g.summary()["public_number_matches"]["count"] == 3
    assert "public_number_matches" not in _guard().summary()  # absent when none
    # numbers written in a string: a released note "for k = 1 ... (fact 2)" reads (1, 2)
    note = ("equals W only for k = 1; see fact 2",)
    assert _guard(public=()).find(note)[:2] == ("alice", "0.text")
    assert _guard().find(note) is None
    assert _guard().find(("rows: 3.0, 5.0",))[:2] == ("alice", "0.text")  # a row as text


@pytest.mark.parametrize(
    ("payload", "path", "start"),
    [
        # a private row after the public numbers: the search goes on past them
        ({**ANNOUNCE, "x": 3.0, "y": 5.0}, "numbers", 5),
        # a row mixing a public number and a private value
        ({"std": 1.0, "z": 3.7}, "numbers", 0),
        # public numbers as an array (not loose numbers): read as rows, as always
        ({"gamma": np.array([[1.0, 2.0]])}, "gamma", 0),
        # in meta-like nesting, a row split across keys among public numbers
        ({"a": {"support_size": 4, "b": [3.0]}, "c": 5.0}, "numbers", 1),
    ],
    ids=["after", "mixed", "array", "split"],
)
def test_a_private_row_among_public_numbers_is_still_found(payload, path, start):
    hit = _guard().find(payload)
    assert hit is not None and hit[:3] == ("alice", path, start), hit


def test_triangle_wad_on_small_integer_csv_runs_with_the_guard_on(tmp_path):
    rng = np.random.default_rng(1)
    rows = rng.integers(0, 6, size=(80, 2))
    text = "x,y,c\n" + "".join(f"{a},{b},{i % 2}\n" for i, (a, b) in enumerate(rows))
    (tmp_path / "ints.csv").write_text(text)
    f = tmp_path / "s.yaml"
    f.write_text(
        "name: tri_int\nseed: 3\ndata:\n"
        "  dataset: {name: csv, params: {path: ints.csv, label_column: c}}\n"
        "  partition: {name: iid}\n  parties: [alice, bob]\n"
        "protocol: {name: triangle_wad, params: {support_size: 4}}\n"
    )
    out = tmp_path / "run"
    assert main(["run", str(f), "--out", str(out), "-q"]) == 0
    guard = json.loads((out / "results.json").read_text())["guard"]
    assert guard["violations"] == 0 and guard["mode"] == "stop"
    assert guard["public_number_matches"]["count"] >= 1
