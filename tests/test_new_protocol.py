"""`testbed new-protocol NAME DIR` scaffolds a protocol package that, written outside the repo
(put on sys.path and registered through the registry's API, as an entry point would), runs in a
scenario, passes its own contract kit and appears in the report with its own columns."""

from __future__ import annotations

import csv
import json

import pytest

from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.plugins.scaffold import new_protocol
from testbed.registry import PROTOCOLS
from tests._outside import installed_scaffold, outside_package, run_quietly

NAME = "probe_anchor_sketch"


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """The scaffolded package on sys.path, its protocol registered, for this module only."""
    root = tmp_path_factory.mktemp("plugin") / NAME
    assert main(["new-protocol", NAME, str(root)]) == 0
    with outside_package(root, f"{NAME}.protocol", "ProbeAnchorSketch", PROTOCOLS) as cls:
        yield root, cls


def test_scaffold_has_entry_point_example_kit_test_and_scenario(package):
    root, _ = package
    assert '[project.entry-points."ot_testbed.protocols"]' in (root / "pyproject.toml").read_text()
    assert f'{NAME} = "{NAME}.protocol:ProbeAnchorSketch"' in (root / "pyproject.toml").read_text()
    src = (root / "src" / NAME / "protocol.py").read_text()
    assert "bus.send(" in src and "bus.local(" in src and "def reference(" in src
    assert "check_protocol(ProbeAnchorSketch)" in (root / "tests" / f"test_{NAME}.py").read_text()


def test_the_outside_protocol_passes_its_kit(package):
    from testbed.testing import check_protocol

    _, cls = package
    assert set(check_protocol(cls).values()) == {"passed"}


# ~85 s on 2 busy cores; the scaffolded protocol's kit test stays in make test
@pytest.mark.slow
def test_the_outside_protocol_runs_in_a_scenario_and_reaches_the_report(package, tmp_path):
    root, _ = package
    out = tmp_path / "run"
    # Execute: the package's own scenario (with the any-protocol attack); `run` writes the report
    assert main(["run", str(root / f"{NAME}_tiny.yaml"), "--out", str(out), "-q"]) == 0
    # Assert: its estimate against its reference, its messages, its columns in the report
    res = json.loads((out / "results.json").read_text())
    assert res["protocol"]["name"] == NAME
    assert res["accuracy"]["wasserstein"]["relative_error"] < 0.05
    assert set(res["transcript"]["by_kind"]) == {f"{NAME}.anchor", f"{NAME}.sketch"}
    assert {a["attack"] for a in res["attacks"]} == {"sent_rows"}
    with open(out / "results.csv") as f:
        table = {r["column"]: r for r in csv.DictReader(f)}
    assert {r["protocol"] for r in table.values()} == {NAME}
    assert float(table["wasserstein.relative_error"]["value"]) < 0.05
    assert any(r["source"] == "sent_rows" for r in table.values())
    assert NAME in (out / "report.md").read_text()


def test_new_protocol_refuses_a_file_or_a_non_empty_directory(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(TestbedError, match="is a file"):
        new_protocol("ok_name", f)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(TestbedError, match="not empty"):
        new_protocol("ok_name", tmp_path / "full")
    with pytest.raises(TestbedError, match="snake_case"):
        new_protocol("Bad-Name", tmp_path / "y")
    # the CLI: one line, exit 2
    assert main(["new-protocol", "ok_name", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: new-protocol: {f} is a file, not a directory"]
    assert main(["new-attack", "ok_name", str(f)]) == 2  # the attack scaffold too


@pytest.mark.slow  # pip install -e and CLI subprocesses: 30-90 s on a loaded machine
def test_installed_protocol_is_listed_passes_its_own_kit_and_has_a_scorecard(tmp_path):
    name = "probe_installed_protocol"
    with installed_scaffold("protocol", name, tmp_path) as (_, bin_, listed, kit):
        card = run_quietly(
            str(bin_ / "testbed"), "scorecard", name, "-o", str(tmp_path / "sc"), "-q"
        )
        assert listed.returncode == 0 and name in listed.stdout
        assert kit.returncode == 0, kit.stdout + kit.stderr
        assert card.returncode == 0, card.stderr
        data = json.loads((tmp_path / "sc" / "scorecard.json").read_text())
        assert data["protocol"] == name and "sent_rows" in data["applicable_attacks"]


def test_the_tutorial_shows_the_scaffolded_protocol_verbatim():
    import re
    from pathlib import Path

    from testbed.plugins.scaffold import PROTOCOL

    doc = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "plugins.md").read_text()
    block = next(
        b for b in re.findall(r"```python\n(.*?)```", doc, flags=re.S) if "AnchorSketch(" in b
    )
    src = PROTOCOL.format(name="anchor_sketch", cls="AnchorSketch", dist="anchor-sketch")
    assert block.strip() == src[src.index("from __future__") :].strip()
