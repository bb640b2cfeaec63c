"""The attack tutorial of docs/guide/plugins.md works as written: its attack module, scenario and
contract test, taken verbatim from the page and put in a scaffolded package (on sys.path and
registered through the registry's API, as its entry point would be), run, pass the kit and give
the report the columns the page names."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from testbed.cli.main import main
from testbed.registry import ATTACKS
from tests._outside import outside_package

DOC = Path(__file__).resolve().parents[1] / "docs" / "guide" / "plugins.md"
NAME = "nearest_support"


def _block(lang: str, marker: str) -> str:
    text = DOC.read_text().split("# Writing a protocol plugin")[0]
    return next(b for b in re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S) if marker in b)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """`testbed new-attack nearest_support DIR`, then the page's attack.py, scenario and test."""
    root = tmp_path_factory.mktemp("tutorial") / NAME
    assert main(["new-attack", NAME, str(root)]) == 0
    (root / "src" / NAME / "attack.py").write_text(_block("python", "class NearestSupport"))
    (root / "my_membership.yaml").write_text(_block("yaml", "name: my_membership"))
    (root / "tests" / f"test_{NAME}.py").write_text(_block("python", "def test_contract"))
    with outside_package(root, f"{NAME}.attack", "NearestSupport", ATTACKS) as cls:
        yield root, cls


# the page's run on digits, 7 s on an idle core; the page's contract test stays in make test
@pytest.mark.slow
def test_the_tutorial_attack_runs_and_its_columns_are_the_ones_the_page_names(
    package, tmp_path, monkeypatch
):
    root, _ = package
    monkeypatch.chdir(root.parent)  # the page's commands run from the package's parent
    out = tmp_path / "mine"
    assert main(["run", f"{NAME}/my_membership.yaml", "--out", str(out), "-q"]) == 0
    rows = json.loads((out / "results.json").read_text())["attacks"]
    ours = [r for r in rows if r["attack"] == NAME]
    assert {r["target"] for r in ours} == {"alice", "bob"}
    assert all(r["baseline_auc"] == 0.5 for r in ours)  # the inherited chance baseline
    with open(out / "results.csv") as f:
        columns = {r["column"] for r in csv.DictReader(f)}
    page = DOC.read_text()
    named = set(re.findall(r"`(nearest_support[\w<>-]*\[alice\]\.auc)`", page))
    assert named, "the page names no column"
    for col in named:
        pattern = re.escape(col).replace(re.escape("<digest>"), "[0-9a-f]{6}")
        assert any(re.fullmatch(pattern, c) for c in columns), (col, sorted(columns))


def test_the_tutorial_contract_test_passes_from_any_directory(package, tmp_path, monkeypatch):
    root, cls = package
    from testbed.testing.checks import resolve_contract_scenario

    monkeypatch.chdir(tmp_path)  # not the package: the scenario is found beside pyproject.toml
    assert resolve_contract_scenario(cls, cls.contract_scenario) == root / "my_membership.yaml"
    ns: dict = {}
    exec(compile(_block("python", "def test_contract"), "test_contract", "exec"), ns)
    ns["test_contract"]()  # check_plugin raises AssertionError listing every failed check
