"""Plugins are listed without importing their modules (issue 23, Build 4): the built-in table
is what importing the packages registers, names and descriptions come from it and from the
entry points' metadata, and a plugin's module is imported only when the plugin is used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from testbed.api import Attack, AttackOutput
from testbed.registry import (
    ATTACKS,
    BUILTIN,
    DATASETS,
    DEFENSES,
    PARTITIONERS,
    PROTOCOLS,
    TRANSFORMS,
)

ROOT = Path(__file__).resolve().parents[1]
REGISTRIES = [PROTOCOLS, ATTACKS, DEFENSES, DATASETS, PARTITIONERS, TRANSFORMS]


def test_the_builtin_table_is_what_the_packages_register():
    for reg in REGISTRIES:
        got = {
            n: f"{c.__module__}:{c.__qualname__}"
            for n, c in reg.items()
            if not c.__module__.startswith("tests")  # toys other tests register
        }
        assert got == BUILTIN[reg.kind], reg.kind


def test_listing_from_source_equals_the_classes_own_descriptions():
    """What `testbed plugins` shows (a fresh process: read from the source, nothing imported)
    is each class's own one-line description, a whole sentence."""
    fresh = _fresh(
        "import json\nfrom testbed.registry import "
        + ", ".join(r.kind.upper() + "S" for r in REGISTRIES)
        + "\nprint(json.dumps({r.kind: dict(r.listing()) for r in ["
        + ", ".join(r.kind.upper() + "S" for r in REGISTRIES)
        + "]}))"
    )
    for reg in REGISTRIES:
        want = {n: c.describe() for n, c in reg.items() if n in BUILTIN[reg.kind]}
        listed = {n: d for n, d in fresh[reg.kind].items() if n in BUILTIN[reg.kind]}
        assert listed == want, reg.kind
        for name, text in want.items():
            assert text.endswith((".", ")")), f"{reg.kind} {name}: {text!r} is not a sentence"


def _fresh(code: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


PLUGIN_MODULES = ["protocols", "attacks", "defenses", "ot", "torch", "sklearn", "testbed.data"]
HEAVY = [*PLUGIN_MODULES, "scipy"]
#: what `testbed validate` must not import (seconds of a command that reads a YAML file)
LIBRARIES = ["torch", "ot", "sklearn", "scipy"]


def test_names_and_listing_import_no_plugin_module():
    got = _fresh(
        "import json, sys\n"
        "from testbed.registry import PROTOCOLS, ATTACKS, DEFENSES, DATASETS\n"
        "names = {r.kind: r.names() for r in (PROTOCOLS, ATTACKS, DEFENSES, DATASETS)}\n"
        "listed = {r.kind: r.listing() for r in (PROTOCOLS, ATTACKS, DEFENSES, DATASETS)}\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(json.dumps({'names': names, 'listed': listed, 'heavy': heavy,\n"
        "                  'fedwad': 'fedwad' in PROTOCOLS}))\n"
    )
    assert got["heavy"] == []
    assert "fedwad" in got["names"]["protocol"] and got["fedwad"]
    assert "sent_rows" in got["names"]["attack"]
    assert dict(map(tuple, got["listed"]["protocol"]))["fedwad"].startswith("FedWAD")


def test_using_a_plugin_imports_its_kind_only():
    got = _fresh(
        "import json, sys\n"
        "from testbed.registry import PROTOCOLS\n"
        "cls = PROTOCOLS.get('fedwad')\n"
        "print(json.dumps({'cls': cls.__name__, 'attacks': 'attacks' in sys.modules,\n"
        "                  'defenses': 'defenses' in sys.modules}))\n"
    )
    assert got == {"cls": "FedWAD", "attacks": False, "defenses": False}


def test_version_flag_answers_without_a_command():
    from importlib.metadata import version

    proc = subprocess.run(
        [sys.executable, "-m", "testbed", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"testbed {version('ot-testbed')}"


def test_plugins_command_lists_every_builtin_without_importing_them():
    got = _fresh(
        "import contextlib, io, json, sys\n"
        "from testbed.cli.main import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    code = main(['plugins'])\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(json.dumps({'code': code, 'out': buf.getvalue(), 'heavy': heavy}))\n"
    )
    assert got["code"] == 0 and got["heavy"] == []
    lines = got["out"].splitlines()
    for kind, names in BUILTIN.items():
        for name in names:
            assert any(ln.split()[:1] == [name] for ln in lines), (kind, name)


def test_validate_imports_no_numerical_library_for_any_shipped_scenario():
    """A deterministic proxy for `testbed validate` answering at once (issue 23: within 5x a
    bare `import numpy, yaml, pydantic`, measured by `testbed bench`): every shipped scenario
    validates, each plugin's own module imported for its parameters, and neither torch, POT,
    scikit-learn nor scipy is loaded (they are imported where a plugin computes)."""
    got = _fresh(
        "import contextlib, io, json, sys\n"
        "from pathlib import Path\n"
        "from testbed.cli.main import main\n"
        "codes = {}\n"
        "for f in sorted(Path('scenarios').glob('*.yaml')):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        codes[f.name] = main(['validate', str(f)])\n"
        f"heavy = [m for m in {LIBRARIES!r} if m in sys.modules]\n"
        "used = sorted(m for m in sys.modules if m.split('.')[0] == 'protocols')\n"
        "print(json.dumps({'codes': codes, 'heavy': heavy, 'used': used}))\n"
    )
    assert len(got["codes"]) >= 40 and set(got["codes"].values()) == {0}, got["codes"]
    assert got["heavy"] == []
    assert {"protocols.fedwad", "protocols.fedbary", "protocols.sinkhorn_distillation"} <= set(
        got["used"]
    )


def test_a_plugin_package_imports_a_module_only_for_the_name_asked():
    got = _fresh(
        "import json, sys\n"
        "import protocols, attacks, defenses\n"
        "before = sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "                ('protocols', 'attacks', 'defenses'))\n"
        "cls = protocols.FedWAD\n"
        "from protocols import _distill\n"  # a submodule, not an export: still importable
        "print(json.dumps({'before': before, 'cls': cls.__module__, 'dir': 'FedWAD' in\n"
        "                  dir(protocols), 'fedbary': 'protocols.fedbary' in sys.modules,\n"
        "                  'torch': 'torch' in sys.modules}))\n"
    )
    assert got == {
        "before": ["attacks", "defenses", "protocols"],
        "cls": "protocols.fedwad",
        "dir": True,
        "fedbary": False,
        "torch": True,
    }


def test_only_commands_that_run_plugins_limit_blas_and_load_pot():
    from testbed.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    light = {name for name, p in sub.choices.items() if not p.get_default("computes")}
    assert light == {
        "validate",
        "plugins",
        "new-attack",
        "new-protocol",
        "new-defense",
        "keygen",
        "report",
        "transcript",
    }


def _dist(folder: Path, name: str, entry: str) -> None:
    info = folder / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[ot_testbed.attacks]\n{entry} = {name}:Toy\n")


def test_entry_points_are_read_again_when_a_distribution_is_installed(tmp_path, monkeypatch):
    """The installed entry points are read once per state of sys.path (one read for the 13
    questions of `testbed plugins`), and again after an install or a new path entry."""
    assert "toy_one" not in ATTACKS.names()
    monkeypatch.syspath_prepend(str(tmp_path))
    _dist(tmp_path, "toy_dist_one", "toy_one")
    assert "toy_one" in ATTACKS.names()  # a new path entry
    _dist(tmp_path, "toy_dist_two", "toy_two")  # installed into a folder already on the path
    assert {"toy_one", "toy_two"} <= set(ATTACKS.names())
    monkeypatch.undo()
    assert not {"toy_one", "toy_two"} & set(ATTACKS.names())


class _WhatIsLoaded(Attack):
    """Reports which plugin modules and libraries its process had before it ran."""

    name = "what_is_loaded"
    protocols = ("fedwad",)

    def run(self, view, public, rng):
        import numpy as np

        mods = [*ATTACKS.modules(), *PROTOCOLS.modules(), *DEFENSES.modules(), "ot", "torch"]
        meta = {"missing": ",".join(m for m in mods if m not in sys.modules)}
        return [
            AttackOutput(
                kind="points", target=public.parties[0], points=np.zeros((1, public.dim)), meta=meta
            )
        ]


def test_the_attacks_forkserver_has_every_plugin_module_and_pot_loaded(tiny_observed):
    """The packages import nothing, so the forkserver that every attack forks from imports each
    built-in module and POT by name: no attack pays for those imports (under its time limit,
    inside its sandbox)."""
    from testbed.sandbox.isolation import AttackLimits, run_isolated
    from testbed.seeding import component_rng

    obs = tiny_observed
    rng = component_rng(0, "test")
    got = run_isolated(_WhatIsLoaded, {}, obs.view, obs.public, rng, rng, AttackLimits())
    assert got.outputs[0].meta["missing"] == ""
