"""The plugin path (issue 11): duplicate names refused naming both origins, a plugin that fails
to import is listed as broken and fails only its users, an exception inside a plugin is one line
naming plugin and phase (--debug adds the traceback), outputs validated at run time."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import numpy as np
import pytest

from testbed.api import Attack, AttackConfig, AttackOutput
from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.registry import ATTACKS

TINY = "scenarios/contract_tiny.yaml"


class Dup(Attack):
    """A third-party attack that reuses a built-in name."""

    protocols = ("fedwad",)

    def run(self, view, public, rng):
        return []


class Dup2(Dup):
    """Another package's attack of the same name."""


def _registry(monkeypatch, eps):
    """The attack registry with these entry points loaded (restored after the test)."""
    ATTACKS.get("fedwad_distributional")  # the built-in this file's Dup collides with, first
    monkeypatch.setattr(ATTACKS, "_broken", dict(ATTACKS._broken))
    monkeypatch.setattr(ATTACKS, "_items", dict(ATTACKS._items))
    monkeypatch.setattr(ATTACKS, "_origins", dict(ATTACKS._origins))
    for ep in eps:
        ATTACKS._load_entry_point(ep)
    return ATTACKS


def test_duplicate_entry_point_is_refused_naming_both_origins(monkeypatch):
    ep = EntryPoint("fedwad_distributional", "tests.test_plugin_path:Dup", "ot_testbed.attacks")
    r = _registry(monkeypatch, [ep])
    why = r.broken()["fedwad_distributional (tests.test_plugin_path:Dup)"]
    assert "attacks.fedwad_distributional.FedWADDistributional" in why
    assert "tests.test_plugin_path:Dup" in why and "the built-in is used" in why
    # the newcomer is refused; the built-in keeps working (an installed package reusing its
    # name used to break it for every scenario)
    assert r.get("fedwad_distributional").__name__ == "FedWADDistributional"
    assert "fedwad_distributional" not in r.broken()


def test_two_packages_with_one_name_break_that_name(monkeypatch):
    eps = [
        EntryPoint("probe_dup_name", "tests.test_plugin_path:Dup", "ot_testbed.attacks"),
        EntryPoint("probe_dup_name", "tests.test_plugin_path:Dup2", "ot_testbed.attacks"),
    ]
    r = _registry(monkeypatch, eps)
    with pytest.raises(TestbedError, match="defined twice"):
        r.get("probe_dup_name")


def test_what_a_plugin_prints_on_import_goes_to_stderr(monkeypatch, capsys):
    ep = EntryPoint("probe_loud", "_loud_plugin:Loud", "ot_testbed.attacks")
    monkeypatch.delitem(__import__("sys").modules, "_loud_plugin", raising=False)
    r = _registry(monkeypatch, [ep])
    out, err = capsys.readouterr()
    assert "LOUD AT IMPORT" not in out and "LOUD AT IMPORT" in err
    assert r.get("probe_loud").__name__ == "Loud"


def test_plugin_that_fails_to_import_is_listed_and_breaks_only_its_users(
    monkeypatch, capsys, tmp_path
):
    ep = EntryPoint("my_broken", "no_such_module_xyz:Attack", "ot_testbed.attacks")
    r = _registry(monkeypatch, [ep])
    assert "ModuleNotFoundError" in r.broken()["my_broken"]
    assert "measure_inversion" in r.names()  # the rest still loads
    with pytest.raises(TestbedError, match="my_broken.*failed to import"):
        r.get("my_broken")
    # listed by `testbed plugins`, fatal only for a scenario using it
    assert main(["plugins"]) == 0
    assert "BROKEN: attack 'my_broken'" in capsys.readouterr().out
    assert main(["validate", TINY]) == 0
    assert main(["validate", _scenario(tmp_path, "my_broken")]) == 2
    assert "failed to import" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["protocol", "attack"])
def test_a_broken_plugin_is_named_with_its_field_and_line(monkeypatch, capsys, tmp_path, kind):
    """validate (and run, which validates first) names the scenario's line that uses a plugin
    whose entry point fails to import, like an unknown name: one line, exit 2, no directory."""
    from testbed.registry import PROTOCOLS

    reg = {"protocol": PROTOCOLS, "attack": ATTACKS}[kind]
    reg.names()
    for attr in ("_broken", "_items", "_origins"):
        monkeypatch.setattr(reg, attr, dict(getattr(reg, attr)))
    reg._load_entry_point(EntryPoint("my_broken", "no_such_module_xyz:P", f"ot_testbed.{kind}s"))
    text = open(TINY).read()
    if kind == "protocol":
        text, line, field = text.replace("name: fedwad", "name: my_broken"), 17, "protocol.name"
    else:
        text, line, field = text + "attacks:\n  - name: my_broken\n", 22, "attacks[0].name"
    sc = tmp_path / "s.yaml"
    sc.write_text(text)
    assert main(["validate", str(sc)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {sc}:{line}: {field}: {kind} 'my_broken': entry point 'my_broken' "
        "(no_such_module_xyz:P) failed to import: ModuleNotFoundError: No module named "
        "'no_such_module_xyz'\n"
    )
    assert main(["run", str(sc), "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == err
    assert not (tmp_path / "r").exists()


def _with_attack(monkeypatch, cls):
    monkeypatch.setitem(ATTACKS._items, cls.name, cls)
    monkeypatch.setitem(ATTACKS._origins, cls.name, f"{cls.__module__}.{cls.__qualname__}")


class Boom(Attack):
    """Divides by zero."""

    name = "boom_attack"
    protocols = ("fedwad",)

    class Config(AttackConfig):
        pass

    def run(self, view, public, rng):
        return [1 / 0]


class WrongDim(Boom):
    """Returns points of the wrong dimension."""

    name = "wrong_dim_attack"

    def run(self, view, public, rng):
        return [AttackOutput(kind="points", target="alice", points=np.zeros((3, 7)))]


class ReturnsNone(Boom):
    """Forgets to return its outputs."""

    name = "returns_none_attack"

    def run(self, view, public, rng):
        return None


class ReturnsDict(Boom):
    """Returns a mapping of target to output instead of a list."""

    name = "returns_dict_attack"

    def run(self, view, public, rng):
        return {"alice": AttackOutput(kind="points", target="alice", points=np.zeros((3, 3)))}


class TooManyPoints(Boom):
    """Returns a 40^3 grid over the box for the 20-row alice: exact OT of 64,000 rows against
    the target and the population once held the scorer for longer than 15 minutes."""

    name = "too_many_points_attack"

    def run(self, view, public, rng):
        g = np.linspace(-3.0, 3.0, 40)
        grid = np.stack(np.meshgrid(g, g, g), axis=-1).reshape(-1, 3)
        return [AttackOutput(kind="points", target="alice", points=grid)]


class DeepMeta(Boom):
    """Returns an output whose meta nests 3000 levels deep."""

    name = "deep_meta_attack"

    def run(self, view, public, rng):
        meta = {}
        for _ in range(3000):
            meta = {"m": meta}
        return [AttackOutput(kind="points", target="alice", points=np.zeros((3, 3)), meta=meta)]


class ForgedResult(Boom):
    """Writes its own bytes on the result pipe (found on the stack of its process), then exits:
    ``doc`` is the JSON it sends."""

    name = "forged_result_attack"
    doc = ""

    def run(self, view, public, rng):
        import os
        import sys

        f = sys._getframe()
        while "conn" not in f.f_locals:
            f = f.f_back
        msg = self._blob()
        data = memoryview(len(msg).to_bytes(8, "little") + msg)
        while data:
            data = data[os.write(f.f_locals["conn"].fileno(), data) :]
        os._exit(0)

    def _blob(self) -> bytes:
        import io

        buf = io.BytesIO()
        np.savez(buf, __json__=np.frombuffer(self.doc.encode(), dtype=np.uint8))
        return buf.getvalue()


class Deflated(ForgedResult):
    """Sends a valid result beside a deflated member that inflates to 64 MiB of zeros."""

    name = "deflated_attack"

    def _blob(self) -> bytes:
        import io
        import zipfile

        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            doc = '{"__map__": {"ok": [[], []], "isolation": "x"}}'
            with zf.open("__json__.npy", "w") as f:
                np.lib.format.write_array(f, np.frombuffer(doc.encode(), dtype=np.uint8))
            zf.writestr(
                zipfile.ZipInfo("a1.npy"), b"\0" * (64 << 20), compress_type=zipfile.ZIP_DEFLATED
            )
        return buf.getvalue()


class NotAnArchive(ForgedResult):
    """Sends bytes that are no .npz archive."""

    name = "not_an_archive_attack"

    def _blob(self) -> bytes:
        return b"\x80\x04K\x01." * 4


def _forged(cls: str, name: str, doc: str) -> type:
    return type(cls, (ForgedResult,), {"name": name, "doc": doc, "__module__": __name__})


DeepJson = _forged(
    "DeepJson",
    "deep_json_attack",
    '{"ok": [' + "[" * 5000 + "]" * 5000 + ', []], "isolation": "x"}',
)
DeepOutputs = _forged(
    "DeepOutputs",
    "deep_outputs_attack",
    '{"__map__": {"ok": [[' + '{"__tuple__": [' * 150 + "]}" * 150 + '], []], "isolation": "x"}}',
)
ShortError = _forged("ShortError", "short_error_attack", '{"error": ["run", 1]}')
DeepError = _forged(
    "DeepError", "deep_error_attack", '{"error": ["run", ' + "[" * 900 + "]" * 900 + ', "", "x"]}'
)


def _scenario(tmp_path, attack):
    import yaml

    raw = yaml.safe_load(open(TINY))
    raw["attacks"] = [{"name": attack}]
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(raw))
    return str(p)


def test_exception_inside_a_plugin_is_one_line_naming_plugin_and_phase(
    monkeypatch, tmp_path, capsys
):
    # the run is kept: results with a failure row, report, exit code 3 (docs/reference/trust.md)
    _with_attack(monkeypatch, Boom)
    sc = _scenario(tmp_path, "boom_attack")
    assert main(["run", sc, "--out", str(tmp_path / "r")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: attack 'boom_attack' failed in run: ZeroDivisionError: division by zero"]
    assert (tmp_path / "r" / "report.html").is_file()
    assert main(["--debug", "run", sc, "--out", str(tmp_path / "r2")]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err


def test_invalid_attack_output_is_refused_at_run_time_naming_plugin_and_field(
    monkeypatch, tmp_path, capsys
):
    import json

    _with_attack(monkeypatch, WrongDim)
    sc = _scenario(tmp_path, "wrong_dim_attack")
    assert main(["run", sc, "--out", str(tmp_path / "r")]) == 3
    assert capsys.readouterr().err == (
        "error: attack 'wrong_dim_attack' failed in output: run returned an invalid output: "
        "output[0].points: dimension 7 != 3\n"
    )
    (row,) = json.loads((tmp_path / "r" / "results.json").read_text())["attacks"]
    assert row["failed"] == "output" and "dimension 7" in row["reason"]


# testbed attack again on a run or sweep: 70-90 s on 2 busy cores; its first run stays in make test
@pytest.mark.slow
def test_attack_on_a_sweep_directory_and_its_rows_reach_the_report(tmp_path, capsys):
    import csv

    import yaml

    from testbed.report.model import load_rows

    # Prepare: a two-cell sweep that saves its transcripts
    raw = yaml.safe_load(open(TINY))
    raw["sweep"] = {"protocol.params.support_size": [4, 5]}
    raw["output"] = {"save_transcript": True}
    sc = tmp_path / "sweep.yaml"
    sc.write_text(yaml.safe_dump(raw))
    out = tmp_path / "sweep"
    assert main(["run", str(sc), "--out", str(out)]) == 0
    # Execute: re-run an attack under another threat model on every cell
    assert main(["attack", str(out), "--attack", "fedwad_distributional"]) == 0
    said = capsys.readouterr().out
    assert "2 cells" in said
    assert "no row" not in said  # its rows are labelled name@server: they are its rows
    # one block per cell, named by its setting, in the sweep's order (not by cell hash)
    blocks = [ln.split(": ")[0] for ln in said.splitlines() if "attack row(s)" in ln]
    assert blocks == [
        f"{raw['name']} [protocol.params.support_size=4, seed {raw['seed']}]",
        f"{raw['name']} [protocol.params.support_size=5, seed {raw['seed']}]",
    ], said
    assert main(["report", str(out)]) == 0
    # Assert: each cell's row carries the re-run's rows, keyed by their own label
    rows, _ = load_rows(out)
    assert len(rows) == 2
    for r in rows:
        labels = {a.get("label") for a in r["results"]["attacks"]}
        assert "fedwad_distributional@server" in labels
    with open(out / "results.csv") as f:
        sources = {r["source"] for r in csv.DictReader(f)}
    assert "fedwad_distributional@server" in sources, sources


@pytest.mark.parametrize(
    ("cls", "reason"),
    [
        (ReturnsNone, "run returned a NoneType, not a list of AttackOutput"),
        (ReturnsDict, "run returned a dict, not a list of AttackOutput"),
        (DeepMeta, "its outputs nest deeper than 100 levels"),
        (
            TooManyPoints,
            "run returned an invalid output: output[0].points: 64000 rows for 'alice''s 30; a "
            "reconstruction may have 10 per row of its target, and 10000 in any case",
        ),
        (DeepJson, "its process sent a result nested deeper than 100 levels"),
        (DeepOutputs, "its process sent a result nested deeper than 100 levels"),
        (ShortError, "its process sent a malformed result"),
        (DeepError, "its process sent a malformed result"),
        (Deflated, "its process sent a compressed result ('a1.npy' inflates to 67108864 bytes)"),
        (NotAnArchive, "its process sent a result that is not an .npz archive"),
    ],
    ids=lambda v: v.name if isinstance(v, type) else None,
)
def test_an_attack_returning_what_cannot_be_read_fails_alone_in_one_line(
    monkeypatch, tmp_path, capsys, cls, reason
):
    """Whatever an attack's process returns or writes on its result pipe, the driver reads it
    without a traceback: the attack fails with one line naming it, its row says why, the run
    and its report are kept, exit 3."""
    import json

    _with_attack(monkeypatch, cls)
    sc = _scenario(tmp_path, cls.name)
    assert main(["run", sc, "--out", str(tmp_path / "r")]) == 3
    assert capsys.readouterr().err == f"error: attack {cls.name!r} failed in output: {reason}\n"
    (row,) = json.loads((tmp_path / "r" / "results.json").read_text())["attacks"]
    assert (row["failed"], row["reason"]) == ("output", reason)
    assert (tmp_path / "r" / "report.html").is_file()


# testbed attack again on a run or sweep: 70-90 s on 2 busy cores; its first run stays in make test
@pytest.mark.slow
def test_attack_runs_with_other_params_get_their_own_columns(tmp_path, capsys):
    """Two `testbed attack` runs of one attack with other params: each its own label (name plus
    a digest of the params, as two configurations in a scenario get), so the report's columns
    do not collide; without params the label stays the name."""
    import csv

    import yaml

    raw = yaml.safe_load(open(TINY))
    raw["output"] = {"save_transcript": True}
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    assert main(["run", str(sc), "--out", str(out)]) == 0
    for steps in (5, 6):
        arg = f'fedwad_distributional:{{"steps": {steps}}}'
        assert main(["attack", str(out), "--attack", arg]) == 0
    assert main(["attack", str(out), "--attack", "sent_rows"]) == 0
    assert main(["report", str(out)]) == 0
    with open(out / "results.csv") as f:
        sources = {r["source"] for r in csv.DictReader(f)}
    from testbed.scenario.labels import params_digest

    assert {
        f"fedwad_distributional-{params_digest({'steps': 5})}@server",
        f"fedwad_distributional-{params_digest({'steps': 6})}@server",
        "sent_rows@server",
    } <= sources, sources


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["--attack", "sent_rows", "--attack", 'fedwad_distributional:{"mood": 1}'],
            "--attack 'fedwad_distributional' (#2): params.mood: unknown key",
        ),
        (
            ["--attack", "sent_rows", "--observer", "nobody"],
            "the command line (--attack, --observer, --colluders): threat_model.observer: "
            "unknown party 'nobody'",
        ),
        (["--attack", "sent_rows", "--attack", "sent_rows"], "--attack 'sent_rows' is given twice"),
    ],
    ids=["bad-param", "bad-observer", "twice"],
)
def test_bad_attack_arguments_are_named_as_the_user_typed_them(tmp_path, capsys, argv, said):
    """Before: a line number of a YAML text the testbed wrote itself ('resolved.yaml with the
    command line's attacks/threat model:4: attacks[1].params.mood'), or 'attacks[1]: label ...
    already used' for an --attack given twice."""
    import yaml

    raw = yaml.safe_load(open(TINY))
    raw["output"] = {"save_transcript": True}
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    assert main(["run", str(sc), "--out", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["attack", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and err.count("\n") == 1, err
