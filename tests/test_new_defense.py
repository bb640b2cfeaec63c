"""`testbed new-defense NAME DIR` scaffolds a defense package whose entry point names its defense,
whose own contract test passes, whose scenario validates and runs, and which refuses the names
and directories the other scaffolders refuse."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.plugins.scaffold import new_defense
from testbed.registry import DEFENSES
from tests._outside import installed_scaffold, outside_package, run_quietly

NAME, CLS = "probe_grid_rounding", "ProbeGridRounding"


def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads(path.read_text())


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """The scaffolded package on sys.path, its defense registered, for this module only."""
    root = tmp_path_factory.mktemp("plugin") / NAME
    assert main(["new-defense", NAME, str(root)]) == 0
    with outside_package(root, f"{NAME}.defense", CLS, DEFENSES) as cls:
        yield root, cls


def test_scaffold_has_entry_point_defense_kit_test_and_scenario(package):
    root, cls = package
    meta = _toml(root / "pyproject.toml")
    assert meta["project"]["entry-points"] == {
        "ot_testbed.defenses": {NAME: f"{NAME}.defense:{CLS}"}
    }
    assert DEFENSES.group == "ot_testbed.defenses"  # the group the registry reads
    assert meta["project"]["name"] == f"ot-testbed-{NAME.replace('_', '-')}"
    assert cls.name == NAME and "def on_send(" in (root / "src" / NAME / "defense.py").read_text()
    assert f"check_plugin({CLS})" in (root / "tests" / f"test_{NAME}.py").read_text()
    assert f"name: {NAME}" in (root / f"{NAME}_tiny.yaml").read_text()


def test_the_scaffolded_defense_passes_its_kit_and_changes_what_clients_send(package):
    """Its own generated test passes, and on the kit's FedWAD fixture every client measure it
    defends comes out on its grid, marked, while the envelope it was given is left as it was."""
    from testbed.measure import Measure
    from testbed.testing.checks import attack_fixture

    root, cls = package
    ns: dict = {}
    path = root / "tests" / f"test_{NAME}.py"
    exec(compile(path.read_text(), str(path), "exec"), ns)
    ns["test_contract"]()
    defense = cls(cls.Config(step=0.5))
    envs = [e for e in attack_fixture("fedwad").transcript if defense.applies_to(e)]
    assert envs and {e.sender for e in envs} == {"alice", "bob"}
    moved = 0
    for e in envs:
        out = defense.on_send(e, np.random.default_rng(0), None)
        assert out.meta["defended_by"] == (NAME,)
        if isinstance(e.payload, Measure):
            grid = out.payload.support / 0.5
            np.testing.assert_allclose(grid, np.round(grid), atol=1e-9)
            np.testing.assert_array_equal(out.payload.weights, e.payload.weights)
            assert np.all(np.abs(out.payload.support - e.payload.support) < 0.5)
            moved += not np.array_equal(out.payload.support, e.payload.support)
    assert moved  # it changed what was sent


def test_stochastic_rounding_is_unbiased_and_nearest_rounding_is_nearest(package):
    root, _ = package
    mod = importlib.import_module(f"{NAME}.defense")
    rng = np.random.default_rng(3)
    x = np.array([[0.3, -1.1, 2.05]])
    draws = np.vstack([mod.round_to_grid(x, 0.5, rng) for _ in range(4000)])
    assert set(np.unique(draws[:, 0])) == {0.0, 0.5}
    np.testing.assert_allclose(draws.mean(axis=0), x[0], atol=0.02)
    np.testing.assert_allclose(mod.round_to_grid(x, 0.5, None), [[0.5, -1.0, 2.0]])


def test_the_scaffolded_scenario_validates(package, capsys):
    root, _ = package
    assert main(["validate", str(root / f"{NAME}_tiny.yaml")]) == 0
    assert NAME in capsys.readouterr().out


def test_the_entry_point_as_installed_names_the_defense(package, tmp_path, monkeypatch, capsys):
    """What `pip install -e` writes for the pyproject's entry point (a dist-info folder with its
    entry_points.txt), on sys.path: the registry loads the scaffolded class by its name and
    `testbed plugins` lists it under defenses."""
    root, cls = package
    name = "probe_installed_defense"
    pkg = tmp_path / "pkg"
    assert main(["new-defense", name, str(pkg)]) == 0
    eps = _toml(pkg / "pyproject.toml")["project"]["entry-points"]
    info = pkg / "src" / f"ot_testbed_{name}-0.1.0.dist-info"  # beside the package, as on sys.path
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: ot-testbed-{name}\nVersion: 0.1.0\n"
    )
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in table.items())
            for group, table in eps.items()
        )
    )
    monkeypatch.syspath_prepend(str(pkg / "src"))
    monkeypatch.setattr(DEFENSES, "_loaded", False)  # a registry that had loaded every plugin
    try:
        got = DEFENSES.get(name)
        assert got.__module__ == f"{name}.defense" and got.name == name
        assert main(["plugins"]) == 0
        listed = capsys.readouterr().out.split("defenses:\n", 1)[1].split("datasets:", 1)[0]
        line = next(x for x in listed.splitlines() if x.startswith(f"  {name} "))
        assert "to a grid of spacing `step`" in line, line
    finally:
        DEFENSES._items.pop(name, None)
        DEFENSES._origins.pop(name, None)
        DEFENSES._broken.pop(name, None)
        for m in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[m]


@pytest.mark.parametrize(
    "name, says",
    [
        ("subsample_support", "'subsample_support' is already the name of a registered defense"),
        ("lambda", "'lambda' is a Python keyword"),
        ("json", "'json' is already an importable module ("),
        ("Bad-Name", "NAME must be snake_case"),
    ],
)
def test_new_defense_refuses_a_name_it_could_not_carry(tmp_path, capsys, name, says):
    assert main(["new-defense", name, str(tmp_path / "pkg")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: new-defense: ") and says in err[0], err
    assert not (tmp_path / "pkg").exists()


def test_new_defense_refuses_a_file_or_a_non_empty_directory(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["new-defense", "ok_name", str(f)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: new-defense: {f} is a file, not a directory"
    ]
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(TestbedError, match="not empty"):
        new_defense("ok_name", tmp_path / "full")


@pytest.mark.parametrize("command", ["new-defense", "new-attack", "new-protocol"])
def test_a_dir_inside_a_file_is_bad_input(tmp_path, capsys, command):
    """Before, mkdir's NotADirectoryError ended the command with exit code 1, as a failure."""
    f = tmp_path / "file"
    f.write_text("x")
    assert main([command, "ok_name", str(f / "pkg" / "sub")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {command}: {f} is a file, not a directory (DIR {f / 'pkg' / 'sub'} is inside it)"
    ]
    assert f.read_text() == "x"


@pytest.mark.slow  # pip install -e and CLI subprocesses, a three-setting run: 40-100 s
def test_installed_defense_is_listed_passes_its_own_kit_and_runs_its_scenario(tmp_path):
    name = "probe_pip_defense"
    with installed_scaffold("defense", name, tmp_path) as (pkg, bin_, listed, kit):
        out = tmp_path / "run"
        testbed_run = [str(bin_ / "testbed"), "run", f"{name}_tiny.yaml", "--out", str(out)]
        ran = run_quietly(*testbed_run, "-q", cwd=pkg)
    assert listed.returncode == 0 and name in listed.stdout.split("defenses:")[1]
    assert kit.returncode == 0, kit.stdout + kit.stderr
    assert ran.returncode == 0, ran.stderr
    assert f"{name}(step=2)" in ran.stdout and "no defense" in ran.stdout
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(len(r["results"]["defenses"]) for r in rows) == [0, 1, 1]
    assert (out / "report.html").is_file()
