"""The plugin reference cannot drift: ``testbed plugins NAME`` reads a plugin's parameters from
its Config, and the generated tables of docs/reference/attacks.md and docs/reference/protocols.md (plugin tables,
what each observer sees) must equal what the registry and the contract runs give now."""

from __future__ import annotations

import json
from pathlib import Path

from attacks._base import Attack, AttackConfig
from testbed.cli.main import main
from testbed.plugins.reference import stale_blocks
from testbed.registry import ATTACKS, BUILTIN

ROOT = Path(__file__).resolve().parents[1]


def test_generated_docs_match_the_registry():
    # Execute
    stale = stale_blocks(ROOT)
    # Assert
    assert stale == [], f"regenerate with `python -m testbed.plugins.reference`: {stale}"


def test_an_attack_added_without_regenerating_makes_the_docs_stale(monkeypatch):
    # Prepare: a new built-in attack the committed table does not list
    class ZzProbe(Attack):
        """Probe attack of the reference test."""

        name = "zz_probe"
        protocols = ("fedwad",)

        class Config(AttackConfig):
            steps: int = 3

        def run(self, view, public, rng):
            return []

    monkeypatch.setitem(ATTACKS._items, "zz_probe", ZzProbe)
    monkeypatch.setitem(BUILTIN["attack"], "zz_probe", "tests.test_plugin_reference:ZzProbe")
    # Execute
    stale = stale_blocks(ROOT)
    # Assert
    assert "docs/reference/attacks.md: attacks" in stale
    assert "docs/reference/protocols.md: protocols" in stale  # fedwad's "attacks that apply"


def test_plugins_name_shows_parameters_and_what_it_applies_to(capsys):
    # Execute
    rc = main(["plugins", "word2vec_retrieval"])
    out = capsys.readouterr().out
    # Assert
    assert rc == 0
    assert out.startswith("word2vec_retrieval (attack, attacks.word2vec_retrieval.")
    assert "  topk: int = 10, > 0\n      ranked words kept per point (precision@k)" in out
    assert "protocols: fedwad, triangle_wad, triangle_wad_marketplace, fedbary" in out
    assert "threat models: server, each party, eavesdropper" in out


def test_plugins_name_json(capsys):
    # Execute
    rc = main(["plugins", "fedwad", "--json"])
    rec = json.loads(capsys.readouterr().out)
    # Assert
    assert rc == 0
    assert rec["kind"] == "protocol"
    params = {p["name"]: p for p in rec["params"]}
    assert params["support_size"]["default"] == 10
    assert params["support_size"]["type"] == "int"
    assert params["support_size"]["constraints"] == ["> 0"]
    assert params["mode"]["type"] == '"paper" | "accurate"'
    assert "fedwad.xi_final" in rec["applies_to"]["message_kinds"]
    assert "fedwad_distributional" in rec["applies_to"]["attacks"]


def test_plugins_unknown_name_is_one_line_with_a_suggestion(capsys):
    # Execute
    rc = main(["plugins", "word2vec_retrievl"])
    err = capsys.readouterr().err
    # Assert
    assert rc == 2
    assert err.strip().count("\n") == 0
    assert "did you mean 'word2vec_retrieval'?" in err
