"""`testbed new-attack NAME DIR` scaffolds a plugin that installs, is listed by `testbed plugins`,
passes the contract kit and shows up in a run's results.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.plugins.scaffold import new_attack

BIN = Path(sys.executable).parent


def _run(*cmd, cwd=None):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


@pytest.mark.slow  # pip install -e and five CLI subprocesses: 30-80 s on a loaded machine
def test_scaffold_installs_lists_and_reports(tmp_path, scenarios_dir):
    # Prepare: scaffold with the CLI, install editable into this venv
    name = "scaffold_probe_attack"
    pkg = tmp_path / "plugin"
    assert main(["new-attack", name, str(pkg)]) == 0
    r = _run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "-e",
        str(pkg),
        "--no-deps",
        "--no-build-isolation",
    )
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr  # src layout: no warning
    try:
        # Execute: list plugins, run its own contract test, run a scenario that names it
        listed = _run(str(BIN / "testbed"), "plugins")
        kit = _run(
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pkg / "tests")
        )
        sc = yaml.safe_load((scenarios_dir / "contract_tiny.yaml").read_text())
        sc["attacks"] = [{"name": name}]
        sc_path = tmp_path / "with_plugin.yaml"
        sc_path.write_text(yaml.safe_dump(sc))
        out = tmp_path / "run"
        ran = _run(str(BIN / "testbed"), "run", str(sc_path), "--out", str(out), "-q")
        # Assert
        assert listed.returncode == 0 and name in listed.stdout
        assert kit.returncode == 0, kit.stdout + kit.stderr
        assert ran.returncode == 0, ran.stderr
        rows = json.loads((out / "results.json").read_text())["attacks"]
        assert {r["attack"] for r in rows} == {name}
        assert {r["target"] for r in rows} == {"alice", "bob"}
        assert all(r["w2"] >= 0 and "w2_ratio" in r for r in rows)
    finally:
        _run(
            sys.executable,
            "-m",
            "pip",
            "uninstall",
            "-y",
            "-q",
            f"ot-testbed-{name.replace('_', '-')}",
        )
    assert name not in _run(str(BIN / "testbed"), "plugins").stdout


def test_scaffold_refuses_bad_input(tmp_path):
    with pytest.raises(TestbedError, match="snake_case"):
        new_attack("Bad-Name", tmp_path / "x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    with pytest.raises(TestbedError, match="not empty"):
        new_attack("ok_name", tmp_path / "full")


@pytest.mark.parametrize(
    "name, says",
    [
        ("class", "'class' is a Python keyword"),
        ("match", "'match' is a Python keyword"),
        ("sent_rows", "'sent_rows' is already the name of a registered attack"),
        ("json", "'json' is already an importable module ("),
        ("numpy", "'numpy' is already an importable module ("),
        ("a" * 300, "NAME has 300 characters, at most 64"),  # once: File name too long, half
    ],  # a package written
    ids=["class", "match", "sent_rows", "json", "numpy", "too-long"],
)
def test_scaffold_refuses_a_name_the_package_could_not_carry(tmp_path, capsys, name, says):
    """A keyword (its import fails), a registered attack's name (the registry refuses a second)
    or a module Python already finds (the package would shadow it): one line, exit 2, nothing
    written."""
    assert main(["new-attack", name, str(tmp_path / "pkg")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "pkg").exists()


def test_new_protocol_refuses_a_registered_protocols_name(tmp_path, capsys):
    assert main(["new-protocol", "fedwad", str(tmp_path / "pkg")]) == 2
    assert "'fedwad' is already the name of a registered protocol" in capsys.readouterr().err
