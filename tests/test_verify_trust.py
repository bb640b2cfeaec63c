"""Trust defects an auditor found in run directories: files a reader uses that escape the
manifest, re-signing a tampered run, keys checked late, another scenario's run taken as --out,
symlinks. Each test takes the attacker's steps and expects one line naming the file (exit 2)."""

from __future__ import annotations

import json
import shutil

import pytest
from test_verify import TRIANGLE, _fails

from testbed.cli.main import main
from testbed.run.execute import execute
from testbed.run.manifest import keygen, write_manifest
from testbed.run.verify import attack_file_digests, verify_run
from testbed.scenario.loading import parse_scenario


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("trust") / "run"
    execute(parse_scenario(TRIANGLE, "t.yaml", "."), out)
    return out


@pytest.fixture
def run(saved_run, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(saved_run, d)
    return d


def _forge_attacks_file(d, name: str):
    """Rows the attacker made up, with the unkeyed digests recomputed and the run's own
    transcript/results digests copied: a file testbed attack could have written."""
    results = json.loads((d / "results.json").read_text())
    rows = [{"attack": "forged", "label": "forged", "leakage": 0.0, "source": name}]
    doc = {"rows": rows, "digests": attack_file_digests(results, rows)}
    (d / name).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize("name", ["attacks-testbed-forged.json", "attacks-forged.json"])
def test_a_forged_attacks_file_with_a_temp_like_name_is_refused(run, tmp_path, capsys, name):
    key, pub = keygen(tmp_path / "k")
    write_manifest(run, key)  # a signed run
    _forge_attacks_file(run, name)
    _fails(run, rf"{name}: not a file testbed attack writes", capsys, pubkey=pub)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert name in err and err.count("\n") == 1
    assert not (run / "report.html").exists()


def test_a_file_named_like_a_temp_file_but_not_one_is_listed(run, tmp_path):
    key, pub = keygen(tmp_path / "k")
    write_manifest(run, key)
    (run / "notes-testbed-x.json").write_text("{}")
    _fails(run, r"notes-testbed-x.json: not listed in manifest.json", pubkey=pub)
    (run / "notes-testbed-x.json").unlink()
    (run / ".results.json.testbed-ab12_x9.tmp").write_text("half-written")  # a real temp name
    verify_run(run, pubkey=pub)
