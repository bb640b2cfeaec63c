"""Hostile inputs and faults (issue 12): every case ends in one clear line, no traceback.

Scenario cases run ``testbed validate`` in-process; each must exit 2 with ``error: FILE:LINE:``
and a message naming what is wrong. CLI flag cases must be refused by the parser (exit 2).
Run-directory cases feed corrupt files to ``report`` / ``transcript`` and must end in one line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _results import run_results
from _scenarios import tiny

from testbed.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
BASE = tiny("t", "threat_model:\n  observer: server")


def _sub(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new, 1)


# (id, text, substring the one-line message must contain)
SCENARIOS = [
    # not a scenario at all
    ("empty", "", "1: the file holds no scenario (empty, or only comments)"),
    ("only-comments", "# to do\n", "1: the file holds no scenario"),
    ("a-list", "- name: x\n", "1: the scenario must be a YAML mapping (name: ..., data: ..., "),
    # a run directory named <name>-<hash8> past a file system's 255 bytes: "File name too long"
    ("long-name", BASE.replace("name: t\n", "name: " + "a" * 101 + "\n", 1), "name: String should"),
    # switches that pydantic's lax mode read as false: the guard silently off
    ("guard-no", BASE + 'guard: "no"\n', "guard: Input should be 'stop', 'record' or 'off' (got"),
    ("guard-zero", BASE + "guard: 0\n", "guard: Input should be 'stop', 'record' or 'off' (got 0)"),
    (
        "save-transcript-no",
        BASE + 'output: {save_transcript: "no"}\n',
        "output.save_transcript: Input should be a valid boolean (got 'no')",
    ),
    (
        "rel-tol-true",
        BASE + "guard_rel_tol: true\n",
        "guard_rel_tol: Input should be a valid number",
    ),
    ("rel-tol-quoted", BASE + "guard_rel_tol: '1e-6'\n", "guard_rel_tol: Input should be a valid"),
    (
        "defense-bool-no",
        BASE + 'defenses: [{name: gaussian_measure_noise, params: {noise_distances: "no"}}]\n',
        "defenses[0].params.noise_distances: expected true or false, got 'no'",
    ),
    # nine levels of nine aliases: 9^9 values from ten lines (walked once, it hung validate)
    (
        "alias-bomb",
        'a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]\n'
        + "".join(
            f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")
        )
        + "name: bomb\n",
        "7: its aliases expand the scenario to more than 1,000,000 values; write the values out",
    ),
    # coercion of bool / str into numbers
    ("seed-true", _sub("seed: 7", "seed: true"), "seed"),
    ("seed-false", _sub("seed: 7", "seed: false"), "seed"),
    ("seed-str", _sub("seed: 7", "seed: '7'"), "seed"),
    ("seed-float", _sub("seed: 7", "seed: 7.5"), "seed"),
    ("seed-neg", _sub("seed: 7", "seed: -1"), "seed"),
    ("seed-list", _sub("seed: 7", "seed: [1]"), "seed"),
    ("seed-null-str", _sub("seed: 7", "seed: 'null'"), "seed"),
    ("support-true", _sub("support_size: 5", "support_size: true"), "support_size"),
    ("support-false", _sub("support_size: 5", "support_size: false"), "support_size"),
    ("support-str", _sub("support_size: 5", "support_size: '5'"), "support_size"),
    ("support-zero", _sub("support_size: 5", "support_size: 0"), "support_size"),
    ("support-neg", _sub("support_size: 5", "support_size: -3"), "support_size"),
    ("support-huge", _sub("support_size: 5", "support_size: 100000000000"), "support_size"),
    ("mean-sci-huge", _sub("mean: 0.0", "mean: 1e400"), "finite"),
    ("mean-sci-quoted", _sub("mean: 0.0", "mean: '1e-8'"), "quoted"),
    ("support-float", _sub("support_size: 5", "support_size: 5.5"), "support_size"),
    ("iter-true", _sub("iterations: 4", "iterations: true"), "iterations"),
    ("iter-str", _sub("iterations: 4", "iterations: '4'"), "iterations"),
    ("iter-billion", _sub("iterations: 4", "iterations: 1000000000"), "iterations"),
    ("iter-zero", _sub("iterations: 4", "iterations: 0"), "iterations"),
    ("iter-list", _sub("iterations: 4", "iterations: [4]"), "iterations"),
    ("iter-map", _sub("iterations: 4", "iterations: {a: 1}"), "iterations"),
    ("d-true", _sub("d: 3", "d: true"), "d"),
    ("d-str", _sub("d: 3", "d: 'three'"), "d"),
    ("d-huge", _sub("d: 3", "d: 99999999999"), "d"),
    ("d-zero", _sub("d: 3", "d: 0"), "d"),
    ("n-true", _sub("{n: 40,", "{n: true,"), "n"),
    ("n-str", _sub("{n: 40,", "{n: '30',"), "n"),
    ("n-huge", _sub("{n: 40,", "{n: 1000000000000,"), "n"),
    ("n-zero", _sub("{n: 40,", "{n: 0,"), "n"),
    # non-finite floats
    ("mean-nan", _sub("mean: 0.0", "mean: .nan"), "finite"),
    ("mean-inf", _sub("mean: 0.0", "mean: .inf"), "finite"),
    ("mean-neginf", _sub("mean: 0.0", "mean: -.inf"), "finite"),
    ("mean-NaN", _sub("mean: 0.0", "mean: .NaN"), "finite"),
    ("mean-Inf", _sub("mean: 0.0", "mean: +.Inf"), "finite"),
    ("guard-tol-nan", BASE + "guard_rel_tol: .nan\n", "finite"),
    ("guard-tol-zero", BASE + "guard_rel_tol: 0\n", "guard_rel_tol"),
    ("guard-tol-two", BASE + "guard_rel_tol: 2\n", "guard_rel_tol"),
    # duplicate keys, both lines named
    ("dup-top", BASE + "seed: 3\n", "duplicate key 'seed' (first at line 2)"),
    ("dup-name", BASE + "name: u\n", "duplicate key 'name'"),
    ("dup-nested", _sub("      d: 3\n", "      d: 3\n      d: 4\n"), "duplicate key 'd'"),
    ("dup-flow", _sub("support_size: 5,", "support_size: 5, support_size: 6,"), "duplicate key"),
    ("dup-protocol", BASE + "protocol: {name: fedwad}\n", "duplicate key 'protocol'"),
    # tags other than plain data
    ("tag-set", _sub("parties: [alice, bob]", "parties: !!set {alice, bob}"), "!!set"),
    ("tag-python", _sub("name: t", "name: !!python/object:os.system x"), "not allowed"),
    ("tag-omap", _sub("parties: [alice, bob]", "parties: !!omap [a: 1]"), "not allowed"),
    ("tag-pairs", _sub("parties: [alice, bob]", "parties: !!pairs [a: 1]"), "not allowed"),
    ("tag-binary", _sub("name: t", "name: !!binary aGVsbG8="), "not allowed"),
    ("tag-timestamp", _sub("seed: 7", "seed: !!timestamp 2001-12-14"), "not allowed"),
    ("tag-custom", _sub("name: t", "name: !mine t"), "not allowed"),
    ("tag-python-name", _sub("name: t", "name: !!python/name:os.system"), "not allowed"),
    # deep nesting (no RecursionError)
    ("deep-flow-seq", BASE + "description: " + "[" * 5000 + "]" * 5000 + "\n", "nested"),
    ("deep-flow-map", BASE + "description: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", "nested"),
    (
        "deep-block",
        BASE + "".join("  " * i + "k:\n" for i in range(200)) + "  " * 200 + "v\n",
        "nested",
    ),
    ("deep-unclosed", BASE + "description: " + "[" * 5000 + "\n", "nested"),
    # syntax and shape
    ("syntax-tab", BASE + "\tx: 1\n", "YAML"),
    ("syntax-colon", BASE + "a: b: c\n", "YAML"),
    ("syntax-unclosed", BASE + "x: [1, 2\n", "YAML"),
    ("not-mapping-list", "- a\n- b\n", "mapping"),
    ("not-mapping-scalar", "hello\n", "mapping"),
    ("empty", "", "mapping"),
    ("only-comment", "# nothing\n", "mapping"),
    ("alias-bomb", "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", ""),
    # schema
    ("unknown-top", BASE + "colour: red\n", "colour"),
    ("unknown-protocol", _sub("name: fedwad", "name: fedwadd"), "fedwadd"),
    (
        "unknown-param",
        _sub("iterations: 4}", "iterations: 4, iteratons: 5}"),
        "protocol.params.iteratons: unknown key; did you mean 'iterations'?",
    ),
    ("unknown-dataset", _sub("name: gaussians", "name: gausians"), "gausians"),
    ("bad-name", _sub("name: t", "name: 'a b/c'"), "name"),
    ("name-int", _sub("name: t", "name: [1]"), "name"),
    ("observer-unknown", _sub("observer: server", "observer: mallory"), "mallory"),
    ("guard-bad", BASE + "guard: sometimes\n", "guard"),
    ("defense-unknown", BASE + "defenses: [{name: nope}]\n", "nope"),
    ("attack-unknown", BASE + "attacks: [{name: nope}]\n", "nope"),
    ("parties-true", _sub("parties: [alice, bob]", "parties: true"), "parties"),
    ("seeds-dup", BASE + "seeds: [1, 1]\n", "unique"),
    ("parties-huge", _sub("parties: [alice, bob]", "parties: 10000000"), "parties"),
    ("parties-zero", _sub("parties: [alice, bob]", "parties: 0"), "parties"),
    ("parties-dup", _sub("parties: [alice, bob]", "parties: [alice, alice]"), "unique"),
    # more coercions and odd numbers
    ("iter-float-int", _sub("iterations: 4", "iterations: 4.0"), "whole number"),
    ("support-1e40", _sub("support_size: 5", "support_size: " + "1" + "0" * 40), "limit"),
    ("support-negzero", _sub("support_size: 5", "support_size: -0"), "support_size"),
    ("std-negzero", _sub("{n: 40, mean: 0.0}", "{n: 40, mean: 0.0, std: -0.0}"), "std"),
    ("seeds-str", BASE + "seeds: ['1']\n", "seeds"),
    ("seeds-bool", BASE + "seeds: [true]\n", "seeds"),
    ("seeds-neg", BASE + "seeds: [-1]\n", "seeds"),
    ("seeds-empty", BASE + "seeds: []\n", "seeds"),
    # names and text
    ("unicode-name", _sub("name: t", "name: tëst"), "name"),
    ("name-empty", _sub("name: t", "name: ''"), "name"),
    ("name-null", _sub("name: t", "name:"), "name"),
    ("name-formula", _sub("name: t", "name: '=1+2'"), "name"),
    ("name-html", _sub("name: t", "name: '<b>x</b>'"), "name"),
    ("label-formula", BASE + "attacks: [{name: fedwad_distributional, label: '=x'}]\n", "label"),
    ("label-html", BASE + "attacks: [{name: fedwad_distributional, label: '<i>'}]\n", "label"),
    # read as an option on a command line (`testbed report -x`, `--attack -A1`), or hidden
    ("label-dash", BASE + "attacks: [{name: fedwad_distributional, label: '-A1'}]\n", "label"),
    ("name-dash", BASE.replace("name: t\n", "name: -t\n", 1), "name: String should match"),
    ("name-dot", BASE.replace("name: t\n", "name: .t\n", 1), "name: String should match"),
    ("party-html", _sub("parties: [alice, bob]", "parties: [alice, '<b>']"), "party"),
    ("party-formula", _sub("parties: [alice, bob]", "parties: [alice, '@bob']"), "party"),
    ("desc-list", BASE + "description: [1]\n", "description"),
    # line endings and indentation
    ("crlf-dup", (BASE + "seed: 3\n").replace("\n", "\r\n"), "duplicate key 'seed'"),
    ("tab-indent", _sub("      d: 3\n", "\t  d: 3\n"), "YAML"),
    ("merge-key", BASE + "x: &a {b: 1}\ny: {<<: *a}\n", "unknown key"),
    # sweeps
    ("sweep-empty", BASE + "sweep: []\n", "sweep"),
    ("sweep-novals", BASE + "sweep: {protocol.params.iterations: []}\n", "no values"),
    ("sweep-badpath", BASE + "sweep: {'a..b': [1]}\n", "bad sweep path"),
    ("sweep-seed", BASE + "sweep: {seed: [1, 2]}\n", "cannot be swept"),
    ("sweep-badval", BASE + "sweep: {protocol.params.iterations: [2, true]}\n", "sweep cell"),
    ("sweep-str", BASE + "sweep: hello\n", "sweep"),
    (
        "sweep-repeat",  # ran as two cells and counted as two seeds of one setting
        BASE + "sweep: {protocol.params.iterations: [2, 3, 2]}\n",
        "sweep: protocol.params.iterations: 2 is listed twice (items 0 and 2)",
    ),
    (
        "sweep-too-many",
        BASE + "limits: {max_cells: 3}\nsweep:\n  protocol.params.iterations: [1, 2, 3, 4]\n",
        "4 cells, above the limit 3",
    ),
    (
        "sweep-default-limit",
        BASE + "seeds: [" + ", ".join(map(str, range(10001))) + "]\n",
        "seeds: the sweep has 10001 cells",
    ),
    # threat model, engine, guard, output, membership
    ("observer-int", _sub("observer: server", "observer: 5"), "observer"),
    ("colluders-unknown", _sub("observer: server", "observer: server\n  colluders: [eve]"), "eve"),
    (
        "colluder-is-observer",
        _sub("observer: server", "observer: alice\n  colluders: [alice]"),
        "threat_model.colluders: 'alice' is the observer",
    ),
    (
        "colluder-twice",
        _sub("observer: server", "observer: server\n  colluders: [alice, alice]"),
        "threat_model.colluders: 'alice' is listed twice",
    ),
    ("membership-zero", BASE + "membership: {members: 0}\n", "members"),
    ("engine-bad", BASE + "engine: spark\n", "engine"),
    ("engine-param", BASE + "engine_params: {foo: 1}\n", "foo"),
    ("guard-int", BASE + "guard: 2\n", "guard"),
    ("output-list", BASE + "output: {dir: [1]}\n", "output.dir"),
    ("no-data", "name: t\nprotocol: {name: fedwad}\n", "data"),
    (
        "noise-eve",
        _sub(
            "  parties: [alice, bob]",
            "  parties: [alice, bob]\n  noise: [{party: eve, kind: labels, rate: 0.1}]",
        ),
        "eve",
    ),
    (
        "noise-rate",
        _sub(
            "  parties: [alice, bob]",
            "  parties: [alice, bob]\n  noise: [{party: alice, kind: labels, rate: 2}]",
        ),
        "rate",
    ),
    # defense filters checked against the protocol's senders and message kinds
    (
        "def-sender",
        BASE + "defenses: [{name: gaussian_measure_noise, params: {senders: [alcie]}}]\n",
        "'alcie' is not a sender of protocol fedwad; known: alice, bob, server",
    ),
    (
        "def-sender-eaves",
        BASE + "defenses: [{name: gaussian_measure_noise, params: {senders: [eavesdropper]}}]\n",
        "senders[0]",
    ),
    (
        "def-sender-2nd",
        BASE + "defenses: [{name: gaussian_measure_noise, params: {senders: [alice, Bob]}}]\n",
        "senders[1]",
    ),
    (
        "def-kind",
        BASE + "defenses: [{name: gaussian_measure_noise, params: {kinds: [fedwad.xii]}}]\n",
        "kinds[0]: 'fedwad.xii'",
    ),
    (
        "def-kind-glob",
        BASE + "defenses: [{name: gaussian_measure_noise, params: {kinds: ['fedbary.*']}}]\n",
        "fedwad.xi_final",
    ),
    (
        "def-kind-case",
        BASE + "defenses: [{name: gaussian_measure_noise, params: {kinds: [FEDWAD.xi]}}]\n",
        "FEDWAD.xi",
    ),
    (
        "def-kind-empty",
        BASE + "defenses: [{name: gaussian_measure_noise, params: {kinds: ['']}}]\n",
        "kinds[0]",
    ),
    (
        "def-kind-int",
        BASE + "defenses: [{name: gaussian_measure_noise, params: {kinds: [5]}}]\n",
        "kinds[0]",
    ),
    (
        "def-kind-2nd",
        BASE
        + "defenses: [{name: gaussian_measure_noise, params: {kinds: ['fedwad.xi*', fedwad.distanse]}}]\n",
        "kinds[1]",
    ),
    (
        "def-kind-sweep",
        BASE
        + "defenses: [{name: gaussian_measure_noise, params: {kinds: ['fedwad.*']}}]\nsweep:\n  defenses[0].params.kinds: [['fedwad.xi'], [fedwad.x]]\n",
        "fedwad.x",
    ),
    # the limits block
    ("lim-mem-str", BASE + "limits: {memory_gb: '4'}\n", "limits.memory_gb"),
    ("lim-mem-neg", BASE + "limits: {memory_gb: -1}\n", "limits.memory_gb"),
    ("lim-mem-nan", BASE + "limits: {memory_gb: .nan}\n", "finite"),
    ("lim-cell-zero", BASE + "limits: {cell_seconds: 0}\n", "limits.cell_seconds"),
    ("lim-cells-bool", BASE + "limits: {max_cells: true}\n", "limits.max_cells"),
    ("lim-cells-float", BASE + "limits: {max_cells: 2.5}\n", "limits.max_cells"),
    ("lim-allow-str", BASE + "limits: {allow_large: 'yes'}\n", "limits.allow_large"),
    ("lim-unknown", BASE + "limits: {memroy_gb: 4}\n", "memroy_gb: unknown key; did you mean"),
    ("lim-list", BASE + "limits: [1]\n", "limits"),
    ("lim-data-zero", BASE + "limits: {data_file_mb: 0}\n", "limits.data_file_mb"),
]


# a misspelt key at every level of a scenario: (id, text, the key's field, the suggestion)
MISSPELT = [
    ("top", BASE + "threat_modle: {observer: server}\n", "threat_modle", "'threat_model'"),
    ("top-sweep", BASE + "swep: {seed: [1]}\n", "swep", "'sweep'"),
    ("data", _sub("  parties: [alice, bob]", "  partys: [alice, bob]"), "data.partys", "'parties'"),
    (
        "dataset",
        _sub("    name: gaussians\n", "    nme: gaussians\n"),
        "data.dataset.nme",
        "'name'",
    ),
    ("dataset-params", _sub("      d: 3\n", "      dd: 3\n      d: 3\n"), "params.dd", "'d'"),
    ("component", _sub("{n: 40, mean: 0.0}", "{n: 40, maen: 0.0}"), "components[0].maen", "'mean'"),
    ("partition", _sub("{classes: [[0], [1]]}", "{clases: [[0], [1]]}"), "clases", "'classes'"),
    (
        "protocol",
        _sub("iterations: 4}", "iterations: 4, iteratons: 5}"),
        "iteratons",
        "'iterations'",
    ),
    (
        "protocol-spec",
        _sub("  params: {support", "  parms: {support"),
        "protocol.parms",
        "'params'",
    ),
    (
        "threat",
        _sub("observer: server", "observer: server\n  coluders: []"),
        "coluders",
        "'colluders'",
    ),
    (
        "defense",
        BASE + "defenses: [{name: gaussian_measure_noise, params: {clipnorm: 2.0}}]\n",
        "defenses[0].params.clipnorm",
        "'clip_norm'",
    ),
    (
        "attack",
        BASE + "attacks: [{name: fedwad_distributional, params: {step: 3}}]\n",
        "attacks[0].params.step",
        "'steps'",
    ),
    ("attack-spec", BASE + "attacks: [{name: sent_rows, lable: x}]\n", "lable", "'label'"),
    ("membership", BASE + "membership: {member: 5}\n", "membership.member", "'members'"),
    ("output", BASE + "output: {save_transcipt: true}\n", "save_transcipt", "'save_transcript'"),
    ("limits", BASE + "limits: {memroy_gb: 4}\n", "limits.memroy_gb", "'memory_gb'"),
    ("engine", BASE + "engine_params: {worker: 2}\n", "engine_params.worker", "'workers'"),
    (
        "noise",
        _sub(
            "  parties: [alice, bob]",
            "  parties: [alice, bob]\n  noise: [{party: alice, rat: 0.1}]",
        ),
        "data.noise[0].rat",
        "'rate'",
    ),
    (
        "sweep-cell",
        BASE + "sweep: {protocol.params: [{support_size: 5, iteratons: 2}]}\n",
        "iteratons",
        "'iterations'",
    ),
]


@pytest.mark.parametrize("text,field,hint", [c[1:] for c in MISSPELT], ids=[c[0] for c in MISSPELT])
def test_a_misspelt_key_gets_a_suggestion_at_its_line(tmp_path, capsys, text, field, hint):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    assert main(["validate", str(f)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert re.match(rf"error: {re.escape(str(f))}:\d+: ", line), line
    assert f"{field}: unknown key; did you mean {hint}" in line, line


def test_every_unknown_key_of_the_hostile_cases_gets_a_suggestion(tmp_path, capsys):
    """No "unknown key" ends the line bare: a close key is named, or the keys known there."""
    seen = 0
    for _, text, _ in SCENARIOS:
        f = tmp_path / "s.yaml"
        f.write_text(text)
        main(["validate", str(f)])
        err = capsys.readouterr().err
        if "unknown key" in err:
            seen += 1
            assert "unknown key; did you mean" in err or "unknown key; known keys here: " in err
    assert seen >= 4


@pytest.mark.parametrize(
    "text,needle", [(t, n) for _, t, n in SCENARIOS], ids=[i for i, _, _ in SCENARIOS]
)
def test_bad_scenario_one_line_exit_2(tmp_path, capsys, text, needle):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {f}"), err
    assert needle in lines[0], err


def test_base_scenario_is_valid(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    assert main(["validate", str(f)]) == 0


def test_floats_with_an_exponent_are_numbers_as_yaml_1_2_reads_them(tmp_path):
    """PyYAML reads `1e3` and `1e-5` as text; a scenario reads them as numbers, so the fields
    that refuse text take them (before: `limits: {memory_gb: 1e3}` was refused)."""
    from testbed.scenario.loading import parse_scenario

    sc = parse_scenario(BASE + "guard_rel_tol: 1e-5\nlimits: {memory_gb: 1e3}\n")
    assert (sc.guard_rel_tol, sc.limits.memory_gb) == (1e-5, 1000.0)


@pytest.mark.parametrize(
    "raw",
    [b"name: t\xff\xfe\n", b"\x00\x01\x02", b"\xef\xbb\xbfname: [\n"],
    ids=["latin1", "binary", "bom-broken"],
)
def test_bad_bytes_scenario(tmp_path, capsys, raw):
    f = tmp_path / "s.yaml"
    f.write_bytes(raw)
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_scenario_path_is_directory(tmp_path, capsys):
    assert main(["validate", str(tmp_path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_scenario_missing(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "not found" in capsys.readouterr().err


FLAGS = [
    ["audit", "s.yaml", "--party", "alice", "--delta", "2"],
    ["audit", "s.yaml", "--party", "alice", "--delta", "0"],
    ["audit", "s.yaml", "--party", "alice", "--delta", "-1e-5"],
    ["audit", "s.yaml", "--party", "alice", "--delta", "nan"],
    ["audit", "s.yaml", "--party", "alice", "--delta", "inf"],
    ["audit", "s.yaml", "--party", "alice", "--delta", "abc"],
    ["audit", "s.yaml", "--party", "alice", "--delta", "1"],
    ["audit", "s.yaml", "--party", "alice", "--trials", "0"],
    ["audit", "s.yaml", "--party", "alice", "--trials", "-5"],
    ["audit", "s.yaml", "--party", "alice", "--trials", "1.5"],
    ["audit", "s.yaml", "--party", "alice", "--trials", "10000000000"],
    ["run", "s.yaml", "--jobs", "-5"],
    ["run", "s.yaml", "--jobs", "0"],
    ["run", "s.yaml", "--jobs", "x"],
    ["run", "s.yaml", "--jobs", "2000000"],
    ["run", "s.yaml", "-j", "-1"],
    ["transcript", "r", "--limit", "0"],
    ["transcript", "r", "--limit", "-1"],
    ["transcript", "r", "--limit", "ten"],
    ["transcript", "r", "--all", "--limit", "3"],  # --limit was ignored
    ["run", "s.yaml", "--out", ""],  # fell back to runs/ silently
    ["audit", "s.yaml", "--out", " "],
    ["bench", "--out", ""],
    ["bench", "--scaling", "--audit"],  # ran the scaling section only
    ["scorecard", "fedwad", "-o", ""],
    ["nosuchcommand"],
    [],
]


@pytest.mark.parametrize("argv", FLAGS, ids=[" ".join(a) or "empty" for a in FLAGS])
def test_bad_flags_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as ei:
        main(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: testbed") and err.count("\n") == 1, err  # no usage block
    assert err.endswith(" -h` lists the options)\n")


def _run_dir(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    return d


CORRUPT = [
    ("results.json", b""),
    ("results.json", b"{"),
    ("results.json", b"[]"),
    ("results.json", b"\xff\xfe\x00"),
    ("results.json", b"[" * 100000 + b"]" * 100000),
    ("run_info.json", b"{"),
    ("run_info.json", b"[" * 100000),
    ("envelopes.jsonl", b"{\n"),
    ("envelopes.jsonl", b"[" * 100000 + b"]" * 100000 + b"\n"),
    ("envelopes.jsonl", b"\xff\xfe\n"),
    ("envelopes.jsonl", b'"just a string"\n'),
    ("payloads.npz", b"PK\x03\x04garbage"),
    ("payloads.npz", b""),
]


@pytest.mark.parametrize("cmd", ["report", "transcript", "attack"])
@pytest.mark.parametrize(
    "fname,content", CORRUPT, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CORRUPT)]
)
def test_corrupt_run_dir_one_line(tmp_path, capsys, cmd, fname, content):
    d = _run_dir(tmp_path)
    (d / fname).write_bytes(content)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    rc = main([cmd, str(d)])
    err = capsys.readouterr().err
    assert rc in (1, 2), err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    # the user's (corrupt) files are left as they were
    for name, data in before.items():
        assert (d / name).read_bytes() == data


def test_run_dir_missing(tmp_path, capsys):
    for cmd in ("report", "transcript"):
        rc = main([cmd, str(tmp_path / "nope")])
        err = capsys.readouterr().err
        assert rc in (1, 2) and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_new_attack_path_is_file(tmp_path, capsys):
    f = tmp_path / "file.txt"
    f.write_text("mine")
    rc = main(["new-attack", "my_attack", str(f)])
    err = capsys.readouterr().err
    assert rc in (1, 2) and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f.read_text() == "mine"


@pytest.mark.parametrize(
    "exc", [RuntimeError("boom\nsecond line"), ValueError("bad"), MemoryError(), RecursionError()]
)
def test_runtime_fault_exit_1_one_line(monkeypatch, capsys, exc):
    import testbed.cli.plugins as plugins_cmd

    def boom(args):
        raise exc

    monkeypatch.setattr(plugins_cmd, "run", boom)
    assert main(["plugins"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["plugins", "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_output_dir_is_file(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    blocker = tmp_path / "blocker"
    blocker.write_text("user file")
    rc = main(["run", str(f), "--out", str(blocker)])
    err = capsys.readouterr().err
    assert rc in (1, 2) and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert blocker.read_text() == "user file"


def test_output_dir_under_missing_file_parent(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    blocker = tmp_path / "blocker"
    blocker.write_text("user file")
    rc = main(["run", str(f), "--out", str(blocker / "sub" / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and err == (
        f"error: {blocker}: is a file, so {blocker / 'sub' / 'run'} cannot be made; choose "
        "another --out\n"
    )
    assert blocker.read_text() == "user file"


@pytest.mark.parametrize(
    "argv, says",
    [
        (["audit", "{s}", "--out", "afile"], "afile: exists and is not a directory"),
        (["bench", "--out", "afile"], "afile: exists and is not a directory"),
        (["bench", "--scaling", "--out", "afile/x"], "afile: is a file, so afile/x cannot be"),
        (["run", "{s}"], "runs: is a file, so runs/t-"),  # ./runs is a file
        (["run", "{s}", "--out", "/proc/testbed-x"], "/proc/testbed-x: cannot be made (No such"),
        (["scorecard", "{s}", "-o", "others"], "others: exists and holds no scorecard"),
    ],
    ids=["audit", "bench", "bench-scaling", "run-default", "run-proc", "scorecard"],
)
def test_an_output_folder_that_cannot_be_written_is_refused_before_any_work(
    tmp_path, capsys, monkeypatch, argv, says
):
    """Before: the audit and the bench ran in full, then stopped with exit 1 on 'File exists';
    scorecard -o wrote a run into an existing run directory or any folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(BASE)
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "runs").write_text("mine")
    (tmp_path / "others").mkdir()
    (tmp_path / "others" / "notes.txt").write_text("mine")
    t0 = time.monotonic()
    assert main([a.replace("{s}", "s.yaml") for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("\n") == 1, err
    assert time.monotonic() - t0 < 30  # refused, not measured first (the bench takes minutes)
    assert sorted(p.name for p in (tmp_path / "others").iterdir()) == ["notes.txt"]
    assert (tmp_path / "afile").read_text() == (tmp_path / "runs").read_text() == "mine"


# ----------------------------------------------------------------------------- sweeps
SWEEP = tiny("sw", "sweep:\n  protocol.params.iterations: [2, 3]")


def _trivial_cells(monkeypatch):
    import testbed.run.sweep as sweep

    monkeypatch.setattr(sweep, "_run_cell", lambda rs, cdir: run_results(config_hash=cdir.name))


@pytest.mark.parametrize(
    "user_file",
    [".mine.tmp", ".results.json.abcd1234.tmp", "cells/.x.tmp", "plots/figure.png", "notes.txt"],
)
def test_sweep_leaves_user_files(tmp_path, monkeypatch, user_file):
    from testbed.run.sweep import run_sweep
    from testbed.scenario.loading import parse_scenario

    _trivial_cells(monkeypatch)
    out = tmp_path / "out"
    f = out / user_file
    f.parent.mkdir(parents=True)
    f.write_bytes(b"user data")
    run_sweep(parse_scenario(SWEEP), out)
    run_sweep(parse_scenario(SWEEP), out)  # a restart cleans temps again
    assert f.read_bytes() == b"user data"


def test_sweep_removes_its_own_temp(tmp_path, monkeypatch):
    from testbed.exchange.bus import TEMP_MARK
    from testbed.run.sweep import run_sweep
    from testbed.scenario.loading import parse_scenario

    _trivial_cells(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    left = out / f".results.jsonl.{TEMP_MARK}abc123.tmp"
    left.write_bytes(b"half")
    run_sweep(parse_scenario(SWEEP), out)
    assert not left.exists()


def test_second_sweep_in_same_dir_refused(tmp_path, capsys):
    from testbed.run.rundir import run_dir_lock

    f = tmp_path / "s.yaml"
    f.write_text(SWEEP)
    out = tmp_path / "out"
    with run_dir_lock(out, write=True):  # as a first sweep would hold it
        rc = main(["run", str(f), "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and "another testbed process" in err and len(err.strip().splitlines()) == 1
    assert not (out / "results.jsonl").exists()


def test_sweep_rows_appended_then_grid_order(tmp_path, monkeypatch):
    import testbed.run.sweep as sweep
    from testbed.scenario.loading import parse_scenario

    _trivial_cells(monkeypatch)
    sizes = []
    out = tmp_path / "out"

    def after(cell, n):
        sizes.append(len((out / "results.jsonl").read_text().splitlines()))

    res = sweep.run_sweep(parse_scenario(SWEEP), out, after_cell=after)
    assert sizes == [1, 2]
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1] and res.computed == 2


# ----------------------------------------------------------------------------- more files
@pytest.mark.parametrize(
    "raw,rc",
    [
        (b"\xef\xbb\xbf" + BASE.encode(), 0),
        (b"\xef\xbb\xbf" + (BASE + "seed: 3\n").encode(), 2),
        (BASE.encode("utf-16"), 2),
        (b"   \n\n", 2),
        (BASE.encode().replace(b"\n", b"\r\n"), 0),
    ],
    ids=["bom-ok", "bom-dup", "utf16", "blank", "crlf-ok"],
)
def test_scenario_encodings(tmp_path, capsys, raw, rc):
    f = tmp_path / "s.yaml"
    f.write_bytes(raw)
    assert main(["validate", str(f)]) == rc
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if rc:
        assert len(err.strip().splitlines()) == 1 and str(f) in err


def test_bom_keeps_line_numbers(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_bytes(b"\xef\xbb\xbf" + (BASE + "seed: 3\n").encode())
    assert main(["validate", str(f)]) == 2
    assert "duplicate key 'seed' (first at line 2)" in capsys.readouterr().err


def test_scenario_symlink_to_directory(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    (tmp_path / "link.yaml").symlink_to(tmp_path / "d")
    assert main(["validate", str(tmp_path / "link.yaml")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_dangling_scenario_symlink(tmp_path, capsys):
    (tmp_path / "link.yaml").symlink_to(tmp_path / "gone.yaml")
    assert main(["validate", str(tmp_path / "link.yaml")]) == 2
    assert "not found" in capsys.readouterr().err


MORE_FLAGS = [
    ["run", "s.yaml", "--max-cells", "0"],
    ["run", "s.yaml", "--max-cells", "-3"],
    ["run", "s.yaml", "--max-cells", "many"],
    ["run", "s.yaml", "--max-cells", "1e9"],
    ["validate", "s.yaml", "--max-cells", "0"],
    ["audit", "s.yaml", "--max-cells", "x"],
    ["run", "s.yaml", "--allow-large=yes"],
]


@pytest.mark.parametrize("argv", MORE_FLAGS, ids=[" ".join(a) for a in MORE_FLAGS])
def test_bad_limit_flags_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as ei:
        main(argv)
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: testbed") and err.count("\n") == 1, err


# ----------------------------------------------------------------------------- resources
_N_BIG = _sub("{n: 40,", "{n: 10000000,").replace("d: 3", "d: 5000")
RESOURCE = [
    ("mem-rows", _N_BIG, "data.dataset.params.components"),
    ("mem-dim", _sub("d: 3", "d: 3000000"), "data.dataset.params.d"),
    (
        "mem-support",
        _sub("support_size: 5", "support_size: 9000000"),
        "protocol.params.support_size",
    ),
    ("mem-budget", BASE + "limits: {memory_gb: 0.00001}\n", "limits.memory_gb"),
    (
        "mem-sweep-cell",
        BASE + "sweep:\n  protocol.params.support_size: [5, 9000000]\n",
        "protocol.params.support_size",
    ),
]


@pytest.mark.parametrize("text,needle", [r[1:] for r in RESOURCE], ids=[r[0] for r in RESOURCE])
def test_memory_estimate_stops_before_allocation(tmp_path, capsys, text, needle):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    out = tmp_path / "out"
    assert main(["run", str(f), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert needle in err and "would need about" in err and "--allow-large" in err
    assert err.startswith(f"error: {f}:")
    assert not out.exists()  # nothing allocated, nothing written
    assert main(["validate", str(f)]) == 2  # validate refuses it too, with the same line
    # (the memory available now is read again: it may have moved by 0.1 GiB in between)
    live = re.compile(r"but [0-9.]+ [KMGT]?i?B is available")
    assert live.sub("", capsys.readouterr().err) == live.sub("", err)


def test_memory_overrides(tmp_path):
    from testbed.scenario.loading import parse_scenario
    from testbed.scenario.resources import ResourceLimitError, check_scenario, set_cli_overrides

    tight = parse_scenario(BASE + "limits: {memory_gb: 0.00001}\n")
    with pytest.raises(ResourceLimitError):
        check_scenario(tight)
    set_cli_overrides(allow_large=True)
    try:
        check_scenario(tight)  # --allow-large
    finally:
        set_cli_overrides()
    check_scenario(parse_scenario(BASE + "limits: {memory_gb: 0.00001, allow_large: true}\n"))
    check_scenario(parse_scenario(BASE))  # the tiny scenario fits


def _rows_csv(tmp_path, n: int) -> Path:
    """A CSV of ``n`` rows (no header), 3 columns, the last the label: its rows are counted,
    never parsed, by the memory estimate."""
    data = tmp_path / "rows.csv"
    data.write_text("0.1,0.2,1\n" * n)
    return data


def _sized(data, parties: str, partition: str = "", protocol: str = "fedwad", params=None) -> str:
    params = params or "{support_size: 5, iterations: 2}"
    part = f"  partition: {partition}\n" if partition else ""
    return (
        f"name: sized\nseed: 1\ndata:\n  dataset: {{name: csv, params: {{path: '{data}', "
        f"label_column: 2}}}}\n{part}  parties: {parties}\nprotocol:\n  name: {protocol}\n"
        f"  params: {params}\nlimits: {{memory_gb: 4}}\n"
    )


def _estimate(text: str):
    from testbed.scenario.loading import parse_scenario
    from testbed.scenario.resources import estimate_memory

    est = estimate_memory(parse_scenario(text))
    return sum(e.nbytes for e in est), est


def test_memory_estimate_unequal_parties_is_not_refused(tmp_path):
    """300 000 rows split 299 800 / 200: the reference's OT is 299 800 x 200 (about 1.4 GB),
    not the 150 000 x 150 000 (about 500 GiB) an equal split would need."""
    from testbed.scenario.loading import parse_scenario
    from testbed.scenario.resources import check_scenario

    n, d, big, small, S = 300_000, 3, 299_800, 200, 5
    text = _sized(
        _rows_csv(tmp_path, n),
        "[alice, bob]",
        f"{{name: iid, params: {{sizes: [{big}, {small}]}}}}",
    )
    check_scenario(parse_scenario(text))  # 4 GiB budget: not refused
    total, est = _estimate(text)
    expected = 8.0 * (
        4 * n * d  # the rows, 4 copies
        + 3 * big * small  # cost matrix and plan of the one pair solved
        + (3 * S * big + S * d)  # the larger party against the support, and its atoms
        + 4 * d * d  # covariance
    )
    assert total == pytest.approx(expected, rel=1e-9)
    assert 1.2e9 < total < 1.6e9  # about 1.4 GB
    assert est[0].formula.startswith(f"{big} x {small} pairwise cost matrix")


def test_memory_estimate_equal_split_unchanged(tmp_path):
    """An equal split (iid by default, or the same sizes given) keeps the estimate it had with
    ceil(N / k) rows per party: 24 504 408 bytes for 4000 rows, 4 parties, S = 5."""
    data = _rows_csv(tmp_path, 4000)
    n_party = 4000 // 4
    previous = 8.0 * (4 * 4000 * 3 + 3 * n_party**2 + 3 * 5 * n_party + 5 * 3 + 4 * 3 * 3)
    assert previous == 24_504_408
    for partition in ("", "{name: iid, params: {sizes: [1000, 1000, 1000, 1000]}}"):
        total, est = _estimate(_sized(data, "[a, b, c, d]", partition))
        assert total == previous
        assert est[0].formula.startswith("1000 x 1000 pairwise")


@pytest.mark.parametrize(
    "parties,partition,protocol,params,pair",
    [
        # FedWAD solves its two clients only, not the larger holdout party
        (
            "[a, b, v]",
            "{name: iid, params: {sizes: [3000, 1000, 6000]}}",
            "fedwad",
            None,
            "3000 x 1000",
        ),
        # shared_base: the parties outside holdout hold the same base_size rows
        (
            "[a, b, v]",
            "{name: shared_base, params: {base_size: 4000, holdout: {v: 5000}}}",
            "fedwad",
            None,
            "4000 x 4000",
        ),
        # FedBary: each client against the validation set (and its S = |validation| atoms)
        (
            "[v, c1, c2]",
            "{name: iid, params: {sizes: [6000, 3000, 1000]}}",
            "fedbary",
            "{validation: v}",
            "3000 x 6000",
        ),
        # the coreset against the pooled clients
        (
            "[c1, c2, test]",
            "{name: iid, params: {sizes: [4000, 4000, 2000]}}",
            "fedwad_coreset",
            "{test: test, coreset_size: 10}",
            "8000 x 10",
        ),
    ],
    ids=["fedwad-two-clients", "shared-base", "fedbary-validation", "coreset-pooled"],
)
def test_memory_estimate_pair_follows_partition_and_protocol(
    tmp_path, parties, partition, protocol, params, pair
):
    _, est = _estimate(_sized(_rows_csv(tmp_path, 10_000), parties, partition, protocol, params))
    pairs = [e.formula for e in est if "pairwise" in e.formula]
    assert pairs == [f"{pair} pairwise cost matrix and plan x 8 B x 3"]


def test_memory_estimate_class_subsets_of_known_classes():
    """Gaussians fix each class's rows: class_subsets [[0], [1]] on 40 + 30 rows is 40 x 30."""
    _, est = _estimate(BASE)
    assert [e.formula for e in est if "pairwise" in e.formula] == [
        "40 x 30 pairwise cost matrix and plan x 8 B x 3"
    ]


@pytest.mark.parametrize(
    "parties,partition,protocol,params,pair",
    [
        # an unbalanced three-way split: the two large parties are solved against each other
        # (an equal-split estimate said 100000 x 100000)
        (
            "[a, b, c]",
            "{name: iid, params: {sizes: [149900, 149900, 200]}}",
            "triangle_wad",
            "{setting: known_t, clients: [a, b, c]}",
            "149900 x 149900",
        ),
        # a random split: any two parties may hold all rows between them
        ("[a, b, c, d]", "{name: quantity_skew}", "fedwad", None, "150000 x 150000"),
        ("[a, b, c, d]", "{name: dirichlet}", "fedwad", None, "150000 x 150000"),
        # the marketplace's buyer against the pooled sellers
        ("[buyer, s1, s2, s3]", "", "triangle_wad_marketplace", "{}", "225000 x 75000"),
    ],
    ids=["unbalanced-3", "quantity-skew", "dirichlet", "marketplace"],
)
def test_memory_estimate_too_large_is_refused(
    tmp_path, capsys, parties, partition, protocol, params, pair
):
    f = tmp_path / "s.yaml"
    f.write_text(_sized(_rows_csv(tmp_path, 300_000), parties, partition, protocol, params))
    out = tmp_path / "out"
    assert main(["run", str(f), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {f}:") and "data.dataset.params.path" in err
    assert f"largest: {pair} pairwise cost matrix" in err and "--allow-large" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "name,params,parties,exact",
    [
        ("iid", {}, ["a", "b", "c"], True),
        ("iid", {"sizes": [100, 200, 250]}, ["a", "b", "c"], True),
        ("quantity_skew", {"fractions": [0.5, 0.3, 0.2]}, ["a", "b", "c"], True),
        ("quantity_skew", {}, ["a", "b", "c"], False),
        ("dirichlet", {"alpha": 0.3}, ["a", "b", "c"], False),
        ("class_subsets", {"classes": [[0], [1], [1, 2]]}, ["a", "b", "c"], True),
        ("class_subsets", {"classes": [[0], [1, 2], [2]], "sizes": [50]}, ["a", "b", "c"], True),
        ("shared_base", {"base_size": 100, "holdout": {"c": 50}}, ["a", "b", "c"], True),
        ("distill_split", {}, ["a", "b", "transfer", "test"], False),
        (
            "distill_split",
            {"audit_target": "a", "audit_rows": 3},
            ["a", "b", "transfer", "test", "audit"],
            False,
        ),
    ],
)
def test_party_rows_bound_the_split(name, params, parties, exact):
    """What the memory estimate assumes of a partition, from its params alone, holds for the
    split itself: every party's rows (equal where the params fix them), and every pair's
    n_a x n_b within the bound of :meth:`PartyRows.pair`."""
    import numpy as np

    from testbed.data.datasets import Dataset
    from testbed.registry import PARTITIONERS

    counts = {0: 300, 1: 200, 2: 100}
    y = np.repeat(list(counts), list(counts.values()))
    ds = Dataset(np.zeros((y.size, 2)), y, "t")
    part = PARTITIONERS.get(name).from_params(params)
    rows = part.party_rows(ds.n, parties, counts)
    for seed in range(5):
        got = {p: len(i) for p, i in part.split(ds, parties, np.random.default_rng(seed)).items()}
        if exact:
            assert got == dict(rows.rows)
        assert all(got[p] <= rows.rows[p] for p in parties), (got, rows)
        for i, a in enumerate(parties):
            for b in parties[i + 1 :]:
                na, nb = rows.pair(a, b)
                assert got[a] * got[b] <= na * nb, (a, b, got, rows)


def test_limits_do_not_change_the_config_hash():
    from testbed.scenario.loading import parse_scenario
    from testbed.scenario.resolve import config_hash, resolve

    a = parse_scenario(BASE)
    b = parse_scenario(BASE + "limits: {memory_gb: 2, cell_seconds: 9, max_cells: 5}\n")
    assert config_hash(resolve(a)) == config_hash(resolve(b))


def test_max_cells_flag_overrides(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(
        BASE + "limits: {max_cells: 3}\nsweep:\n  protocol.params.iterations: [1, 2, 3, 4]\n"
    )
    assert main(["validate", str(f)]) == 2
    assert main(["validate", str(f), "--max-cells", "4"]) == 0
    assert "sweep of 4 cells" in capsys.readouterr().out


def test_data_file_size_limit(tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("a,b,c\n" + "1.0,2.0,0\n3.0,4.0,1\n" * 2000)
    text = _csv_scenario(data) + "limits: {data_file_mb: 0.01}\n"
    f = tmp_path / "s.yaml"
    f.write_text(text)
    assert main(["run", str(f), "--out", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "data_file_mb" in err and str(data) in err and len(err.strip().splitlines()) == 1


def _csv_scenario(path) -> str:
    return (
        BASE.split("data:")[0]
        + f"data:\n  dataset: {{name: csv, params: {{path: '{path}', label_column: c}}}}\n"
        + "  parties: [alice, bob]\nprotocol:\n  name: fedwad\n"
        + "  params: {support_size: 5, iterations: 2}\n"
    )


@pytest.mark.parametrize(
    "raw,needle",
    [
        (b"a,b,c\n1.0,2.0,0\n\xff\xfe,1,1\n", "not UTF-8"),
        ("a,b,c\n1.0,2.0,0\n3é,1,1\n".encode("latin-1"), "not UTF-8"),
        (b"a,b,c\n1.0,2.0,0\n=1+2,1,1\n", "non-numeric"),
        (b"a,b,c\n1.0,nan,0\n", "NaN or inf"),
        (b"a,b,c\n1.0,2.0\n", "columns"),
        (b"", "empty"),
    ],
    ids=["bytes", "latin1", "formula", "nan", "ragged", "empty"],
)
def test_bad_data_csv_one_line(tmp_path, capsys, raw, needle):
    data = tmp_path / "d.csv"
    data.write_bytes(raw)
    f = tmp_path / "s.yaml"
    f.write_text(_csv_scenario(data))
    rc = main(["run", str(f), "--out", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert needle in err and "d.csv" in err
    assert data.read_bytes() == raw


def test_csv_with_bom_is_read(tmp_path):
    from testbed.run.roster import build_world
    from testbed.scenario.loading import parse_scenario

    data = tmp_path / "d.csv"
    data.write_bytes(b"\xef\xbb\xbfa,b,c\n" + b"1.0,2.0,0\n3.0,4.0,1\n" * 10)
    w = build_world(parse_scenario(_csv_scenario(data)))
    assert sum(p.n for p in w.parties.values()) == 20


def test_opacus_budget_too_low_one_line(tmp_path, capsys):
    from testbed.errors import TestbedError
    from testbed.exchange.ledger import calibrate_noise_multiplier

    # opacus's RDP search cannot reach it; PLD can (epsilon 0 holds at delta 1e-5 for a small
    # enough mu), so the refusal is the opacus accountant's, named in the scenario
    with pytest.raises(TestbedError, match="target_epsilon 1e-09"):
        calibrate_noise_multiplier(1e-9, 1e-5, 1, accountant="rdp")
    assert calibrate_noise_multiplier(1e-9, 1e-5, 1) > 1e4
    text = (ROOT / "scenarios" / "contract_tiny_dp_gaussian_moments.yaml").read_text()
    f = tmp_path / "s.yaml"
    f.write_text(
        text.replace("noise_multiplier: 0.05", "target_epsilon: 0.000000001, accountant: rdp")
    )
    rc = main(["run", str(f), "--out", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "target_epsilon" in err and "opacus" in err
    # validate refuses it already, naming the file and line (before: only the run, no line)
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    line = next(i for i, t in enumerate(f.read_text().splitlines(), 1) if "target_epsilon" in t)
    assert f"{f}:{line}: protocol.params.target_epsilon: target_epsilon 1e-09" in err, err
    assert not (tmp_path / "out").exists()


def test_uncalibratable_defense_target_refused_at_validate(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(
        BASE + "defenses:\n  - name: gaussian_measure_noise\n"
        "    params: {target_epsilon: 1.0e-300, releases: 100, accountant: rdp}\n"
    )
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "defenses[0].params.target_epsilon: target_epsilon 1e-300" in err, err
    assert "over 100 release(s)" in err
    f.write_text(f.read_text().replace("1.0e-300", "2.0"))
    assert main(["validate", str(f)]) == 0


# ----------------------------------------------------------------------------- output dirs
def test_output_dir_symlink_to_directory_is_followed(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert main(["run", str(f), "--out", str(tmp_path / "link"), "-q"]) == 0
    assert (real / "results.json").is_file() and (tmp_path / "link").is_symlink()


@pytest.mark.parametrize("where", ["dangling-link", "proc", "dev-null"])
def test_output_dir_unwritable_one_line(tmp_path, capsys, where):
    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    if where == "dangling-link":
        out = tmp_path / "link"
        out.symlink_to(tmp_path / "gone" / "deeper")
        (tmp_path / "gone").write_text("user file")
    else:
        out = {"proc": "/proc/testbed-run", "dev-null": "/dev/null"}[where]
    rc = main(["run", str(f), "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert rc in (1, 2) and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    if where == "dangling-link":
        assert (tmp_path / "gone").read_text() == "user file"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_output_dir_read_only(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        rc = main(["run", str(f), "--out", str(ro / "run"), "-q"])
    finally:
        ro.chmod(0o755)
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


# ----------------------------------------------------------------------------- report escaping
CSV_CELLS = [
    ("=1+2", "'=1+2"),
    ("+SUM(A1)", "'+SUM(A1)"),
    ("-cmd|' /C calc'!A0", "'-cmd|' /C calc'!A0"),
    ("@HYPERLINK(x)", "'@HYPERLINK(x)"),
    ("\t=1", "'\t=1"),
    ("\r=1", "'\r=1"),
    ("-0.5", "-0.5"),
    ("-inf", "-inf"),
    ("+1e-8", "+1e-8"),
    ("plain", "plain"),
    (-3.5, -3.5),
    ("", ""),
]


@pytest.mark.parametrize("value,expected", CSV_CELLS, ids=[repr(v) for v, _ in CSV_CELLS])
def test_csv_cell_escaping(value, expected):
    from testbed.report.csv_writer import csv_safe

    assert csv_safe(value) == expected


MD_TEXTS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
    "![x](http://evil/x.png)",
    "| a | b |",
    "# heading\n## injected",
    "`code` and **bold**",
    "a & b",
]


@pytest.mark.parametrize("text", MD_TEXTS, ids=[f"md{i}" for i in range(len(MD_TEXTS))])
def test_markdown_escaping(text):
    from testbed.report.markdown_writer import md_escape

    out = md_escape(text)
    assert "<" not in out and ">" not in out and "\n" not in out
    assert "](" not in out.replace("\\](", "")  # no live link or image
    assert "|" not in out.replace("\\|", "")  # no table cell break


HOSTILE_SWEEP = tiny(
    "hostile",  # a name starting with "-" is refused at validate (test_hostile SCENARIOS)
    'sweep:\n  description: ["=1+2", "<script>alert(1)</script>", "[x](javascript:y) | z"]\n',
)


def test_report_escapes_hostile_names(tmp_path, capsys):
    import csv as _csv

    f = tmp_path / "s.yaml"
    f.write_text(HOSTILE_SWEEP)
    out = tmp_path / "out"
    assert main(["run", str(f), "--out", str(out), "-q"]) == 0
    md = (out / "report.md").read_text()
    html_text = (out / "report.html").read_text()
    # the scenario text is quoted verbatim in a fenced code block (text, never HTML)
    prose, fences = re.subn(r"(?ms)^(`{3,})\n.*?\n\1$", "", md)
    assert fences == 1
    assert "<script>alert" not in prose and "<script>alert" not in html_text
    assert not re.search(r"(?<!\\)\]\(javascript", prose)  # only escaped: \[x\](...) is no link
    with open(out / "results.csv") as fh:
        table = list(_csv.DictReader(fh))
    assert not any(v == "=1+2" for r in table for v in r.values())
    hostile = [r for r in table if r["setting.description"] == "'=1+2"]  # its own column
    # the label names the swept field first, so it cannot start a formula either
    assert hostile and all(r["setting"] == "description==1+2" for r in hostile)


# ----------------------------------------------------------------------------- declared kinds
@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "scenarios").glob("contract_tiny*.yaml")),
    ids=lambda p: p.stem,
)
def test_protocols_declare_every_kind_and_sender_they_send(path):
    from testbed.registry import PROTOCOLS
    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world
    from testbed.scenario.loading import load_scenario

    sc = load_scenario(path)
    world = build_world(sc)
    _out = run_and_evaluate(world)
    tr = _out.transcript
    cls = PROTOCOLS.get(sc.protocol.name)
    assert {e.kind for e in tr} <= set(cls.message_kinds)
    assert {e.sender for e in tr} - set(world.parties) <= set(cls.extra_senders)


# ----------------------------------------------------------------------------- --debug
def test_debug_shows_the_attack_process_traceback(monkeypatch, capsys):
    import testbed.cli.plugins as plugins_cmd
    from testbed.sandbox.isolation import AttackFailedError

    def boom(args):
        err = AttackFailedError("attack 'x' failed in run: KeyError: 'k'")
        err.details = "Traceback (most recent call last):\n  File \"child.py\"\nKeyError: 'k'\n"
        raise err

    monkeypatch.setattr(plugins_cmd, "run", boom)
    assert main(["plugins"]) == 2
    err = capsys.readouterr().err
    assert "child.py" not in err and len(err.strip().splitlines()) == 1
    assert main(["plugins", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "attack's process" in err and 'File "child.py"' in err


# ----------------------------------------------------------------------------- wall clock
def test_cell_budget_stops_the_cell_and_keeps_finished_ones(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(
        BASE + "limits: {cell_seconds: 2}\nsweep:\n  protocol.params.iterations: [2, 3, 300000]\n"
    )
    out = tmp_path / "out"
    rc = main(["run", str(f), "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "limits.cell_seconds = 2 s" in err
    assert len(list(out.glob("cells/*/results.json"))) == 2
    assert len((out / "results.jsonl").read_text().splitlines()) == 2


# ----------------------------------------------------------------------------- signals
def _children(pid: int) -> list[int]:
    out = []
    for st in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = st.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(st.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


SLOW_SWEEP = BASE.replace("iterations: 4", "iterations: 4") + (
    "sweep:\n  protocol.params.iterations: [300000, 300001, 300002]\n"
)


# a sweep started and SIGKILLed in a child, 2 s on an idle core; Ctrl-C of a sweep stays in make
# test (test_interrupt)
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_kill_9_of_the_sweep_ends_its_workers(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(SLOW_SWEEP)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed",
            "run",
            str(f),
            "--out",
            str(tmp_path / "o"),
            "-q",
            "-j",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(workers) < 2:
            assert proc.poll() is None and time.monotonic() < deadline
            workers = [
                k
                for k in _children(proc.pid)
                if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes()
            ]
            time.sleep(0.1)
        time.sleep(1.0)  # the workers are in their initializer or running a cell
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers), "workers outlived the sweep"
    finally:
        for w in workers:  # only the workers this test started
            if _alive(w):
                os.kill(w, signal.SIGKILL)


def _committed_cells(out: Path) -> list[Path]:
    """Finished cells only: a cell is written in a hidden temp directory, which already holds
    results.json before it is swapped in (and is removed when the sweep is interrupted)."""
    return [p for p in out.glob("cells/*/results.json") if not p.parent.name.startswith(".")]


def _wait_for_cells(out: Path, n: int, proc) -> None:
    deadline = time.monotonic() + 240
    while len(_committed_cells(out)) < n:
        assert proc.poll() is None, "the run ended before the signal"
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_sigint_during_a_run_exits_quietly_130(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(_sub("iterations: 4", "iterations: 300000"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed", "run", str(f), "--out", str(tmp_path / "o"), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    deadline = time.monotonic() + 120
    while not (tmp_path / "o" / ".testbed.lock").exists():  # the run has started
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err and err.decode().strip() == "interrupted"
    assert f.read_text() == _sub("iterations: 4", "iterations: 300000")


RESUME = (
    tiny("resumable", "sweep:\n  protocol.params.iterations: [20, 21, 22, 23, 24, 25]\n")
    .replace("{n: 40, mean: 0.0}", "{n: 300, mean: 0.0}")
    .replace("{n: 30, mean: 2.0}", "{n: 300, mean: 2.0}")
    .replace("support_size: 5,", "support_size: 40,")
)


@pytest.mark.slow
def test_sigint_then_resume_is_byte_identical(tmp_path):
    from testbed.run.sweep import run_sweep
    from testbed.scenario.loading import parse_scenario

    f = tmp_path / "s.yaml"
    f.write_text(RESUME)
    out = tmp_path / "interrupted"
    cmd = [sys.executable, "-m", "testbed", "run", str(f), "--out", str(out), "-q"]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    _wait_for_cells(out, 2, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and b"Traceback" not in err, err.decode()
    done = len(_committed_cells(out))
    assert 2 <= done < 6, "the SIGINT must interrupt the sweep"
    rerun = subprocess.run(cmd, capture_output=True, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert f"({6 - done} computed, {done} cached)".encode() in rerun.stdout
    ref = run_sweep(parse_scenario(RESUME), tmp_path / "straight")
    assert (out / "results.jsonl").read_bytes() == (ref.out_dir / "results.jsonl").read_bytes()
    for p in (ref.out_dir / "cells").glob("*/results.json"):
        assert (out / "cells" / p.parent.name / "results.json").read_bytes() == p.read_bytes()


def test_unicode_party_and_huge_seed_run(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(
        _sub("parties: [alice, bob]", "parties: [alice, bøb]").replace(
            "seed: 7", "seed: " + "9" * 30
        )
    )
    out = tmp_path / "out"
    assert main(["run", str(f), "--out", str(out), "-q"]) == 0
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert set(res["parties"]) == {"alice", "bøb"} and res["seed"] == int("9" * 30)


def test_second_writer_of_a_single_run_refused(tmp_path, capsys):
    from testbed.run.rundir import run_dir_lock

    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    out = tmp_path / "out"
    with run_dir_lock(out, write=True):  # as a first run would hold it
        rc = main(["run", str(f), "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and "another testbed process" in err and len(err.strip().splitlines()) == 1
    assert not (out / "results.json").exists()


# ----------------------------------------------------------------------------- defense faults
def _defense_that(mode: str):
    from defenses.gaussian_measure_noise import GaussianMeasureNoise

    class Faulty(GaussianMeasureNoise):
        name = f"test_faulty_{mode}"

        def on_send(self, env, rng, ledger):
            if mode == "raises":
                return 1 / 0
            return env.payload  # not an Envelope

    return Faulty


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("raises", "failed in on_send: ZeroDivisionError: division by zero"),
        (
            "returns",
            "failed in on_send: it must return a new Envelope (env.with_payload(...)), got Measure",
        ),
    ],
)
def test_a_defense_fault_is_the_defenses_not_the_protocols(
    tmp_path, capsys, monkeypatch, mode, said
):
    """Before: a defense that raised read 'protocol 'fedwad' failed in run' (exit 1), and one that
    returned the payload 'must return a new Envelope' with exit 2, the code of bad input."""
    from testbed.registry import DEFENSES

    cls = _defense_that(mode)
    monkeypatch.setitem(DEFENSES._items, cls.name, cls)
    monkeypatch.setitem(DEFENSES._origins, cls.name, f"{__name__}.Faulty")
    f = tmp_path / "s.yaml"
    f.write_text(BASE + f"defenses:\n  - {{name: {cls.name}, params: {{noise_multiplier: 1.0}}}}\n")
    assert main(["run", str(f), "--out", str(tmp_path / "run"), "-q"]) == 1
    err = capsys.readouterr().err
    assert err == f"error: defense {cls.name!r} {said}\n", err


def _toy_scenario(tmp_path, monkeypatch, cls, extra: str = ""):
    """BASE with the toy protocol ``cls`` (registered for this test only) in place of its
    protocol, plus ``extra`` top-level lines; the scenario file's path."""
    from testbed.registry import PROTOCOLS

    monkeypatch.setitem(PROTOCOLS._items, cls.name, cls)
    monkeypatch.setitem(PROTOCOLS._origins, cls.name, f"_toy_protocols.{cls.__name__}")
    f = tmp_path / "s.yaml"
    f.write_text(re.sub(r"protocol:\n(  .*\n)+", f"protocol: {{name: {cls.name}}}\n", BASE) + extra)
    return f


def test_a_guard_stop_is_the_protocols_fault_exit_1(tmp_path, capsys, monkeypatch):
    """A protocol that sends raw rows is stopped by the guard with one line and exit 1 (a
    plugin's fault at run time), not 2, the code of bad input (a walk-through's finding)."""
    from _toy_protocols import LeakyMean

    f = _toy_scenario(tmp_path, monkeypatch, LeakyMean)
    assert main(["run", str(f), "--out", str(tmp_path / "run"), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: privacy guard: message #") and err.count("\n") == 1, err


def test_a_protocol_reading_rows_on_the_driver_is_its_fault_exit_1(tmp_path, capsys, monkeypatch):
    """The handles a protocol's driver holds refuse its rows: one line naming the protocol and
    the phase, exit 1 (the plugin's fault, not bad input), and no results written."""
    from _toy_protocols import DriverReader

    f = _toy_scenario(tmp_path, monkeypatch, DriverReader)
    assert main(["run", str(f), "--out", str(tmp_path / "run"), "-q"]) == 1
    assert capsys.readouterr().err == (
        "error: protocol 'toy_driver_reader' failed in run: it read party 'alice''s private `X` "
        "on the driver; run local work at the party with bus.local('alice', fn, ...)\n"
    )
    assert not (tmp_path / "run" / "results.json").exists()


def test_estimates_that_match_no_reference_key_are_the_protocols_fault(
    tmp_path, capsys, monkeypatch
):
    """Before: exit 0 with an empty accuracy table and `accuracy: {}` in results.json."""
    from _toy_protocols import RenamedEstimate

    f = _toy_scenario(tmp_path, monkeypatch, RenamedEstimate)
    assert main(["run", str(f), "--out", str(tmp_path / "run"), "-q"]) == 1
    assert capsys.readouterr().err == (
        "error: protocol 'toy_renamed_estimate': none of its estimates has a key of its "
        "reference, so its accuracy cannot be measured: it estimated ['distance'], its reference "
        "has ['mean_distance']\n"
    )


def test_a_protocol_that_takes_the_guard_off_its_bus_is_stopped(tmp_path, capsys, monkeypatch):
    """The red team's protocol set `bus.guard = None` and sent raw rows: the run passed with
    `messages_checked: 0`. The testbed keeps its own reference to the guard and compares what
    it checked with what was sent."""
    from _toy_protocols import GuardOff

    f = _toy_scenario(tmp_path, monkeypatch, GuardOff)
    assert main(["run", str(f), "--out", str(tmp_path / "run"), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: protocol 'toy_guard_off': the privacy guard checked ")
    assert "replaced or switched off the testbed's guard" in err and err.count("\n") == 1
    assert not (tmp_path / "run" / "results.json").exists()


@pytest.mark.parametrize(
    "blocked, says",
    [
        ("results.csv", "results.csv: is a directory, so the file cannot be written; move it away"),
        ("report.html", "report.html: is a directory, so the file cannot be written; move it away"),
        ("plots", "plots: is a file, not the folder of figures; move it away"),
    ],
)
def test_a_report_file_blocked_by_a_folder_is_named(tmp_path, capsys, blocked, says):
    """Before: exit 1 naming the writer's temporary file (.results.csv.testbed-....tmp)."""
    import shutil

    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    d = tmp_path / "run"
    assert main(["run", str(f), "--out", str(d), "-q"]) == 0
    capsys.readouterr()
    p = d / blocked
    shutil.rmtree(p) if p.is_dir() else p.unlink()
    p.write_text("x") if blocked == "plots" else p.mkdir()
    assert main(["report", str(d)]) == 2
    assert capsys.readouterr().err == f"error: {d}/{says}\n"


@pytest.mark.parametrize("engine", ["", "engine_params: {workers: 2}\n"], ids=["inprocess", "pool"])
def test_what_a_protocol_prints_goes_to_stderr_not_stdout(tmp_path, capfd, monkeypatch, engine):
    """stdout carries only the testbed's own lines (the run directory, the summary, the paths),
    which scripts read; a protocol's prints, on the driver or at a party (in a pool worker
    too), go to stderr."""
    from _toy_protocols import Chatty

    f = _toy_scenario(tmp_path, monkeypatch, Chatty, engine)
    assert main(["run", str(f), "--out", str(tmp_path / "run")]) == 0
    out, err = capfd.readouterr()
    assert "chatty on" not in out and "chatty at" not in out and "results:" in out, out
    assert "chatty on the driver" in err and "chatty at the party" in err, err


def test_an_audit_of_an_unknown_party_is_refused_before_any_step(tmp_path, capsys):
    """Before: progress lines first, then an error naming no file."""
    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    assert main(["audit", str(f), "--party", "mallory"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (
        f"error: --party 'mallory': not a party of {f} (parties: alice, bob)\n"
    )


def test_a_scenario_file_of_megabytes_is_refused_at_once(tmp_path, capsys):
    """Before: a 60 MB description took 90 s to validate."""
    f = tmp_path / "s.yaml"
    f.write_text(BASE + "description: " + "x" * (5 << 20) + "\n")
    t0 = time.monotonic()
    assert main(["validate", str(f)]) == 2
    assert time.monotonic() - t0 < 5
    assert capsys.readouterr().err == (
        f"error: {f}: 5.0 MiB; a scenario is at most 4 MiB (data belongs in a data file: "
        "dataset: {name: csv, params: {path: ...}})\n"
    )


@pytest.mark.parametrize("command", ["report", "transcript", "attack"])
def test_a_scenario_named_twice_is_refused_by_commands_that_read_its_name(
    tmp_path, capsys, command
):
    """Before: the last `name:` won and the command looked for that scenario's runs."""
    f = tmp_path / "dup.yaml"
    f.write_text("name: x\nname: y\n")
    assert main([command, str(f)]) == 2
    assert capsys.readouterr().err == f"error: {f}:2: duplicate key 'name' (first at line 1)\n"
