"""The run pipeline's structure: no import circles, stages import only earlier stages, the
protocol's driver code holds party handles, not rows."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import numpy as np
import pytest
from _scenarios import tiny

from testbed.data.datasets import PartyData
from testbed.errors import TestbedError
from testbed.run.roster import PartyHandle, Roster


@pytest.fixture
def tiny_scenario():
    from testbed.scenario.loading import parse_scenario

    return parse_scenario(tiny("arch"), "tiny.yaml", ".")


ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("testbed", "protocols", "attacks", "defenses", "bench")
#: top-level packages of the checkout that are not installed with the library (``bench/``: the
#: benchmarks and the research studies); they sit in LAYERS under their own name
CHECKOUT_ONLY = ("bench",)

#: the stage modules of testbed/run in pipeline order (DESIGN.md, "One data path")
STAGES = [
    "testbed.run.scenario",
    "testbed.run.roster",
    "testbed.run.exchange",
    "testbed.run.evaluate",
    "testbed.run.view",
    "testbed.run.attack",
    "testbed.run.score",
    "testbed.run.results",
    "testbed.run.execute",
]


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = p
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> project modules it imports (at module level or inside functions). Importing
    ``a.b`` also runs package ``a``'s ``__init__``, which is not an edge of the module itself."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[: len(pkg) - node.level + 1]
                    base = ".".join([*pkg, base] if base else pkg)
                targets = [f"{base}.{a.name}" for a in node.names]
                if base in mods and not any(t in mods for t in targets):
                    targets = [base]
            for t in targets:
                if t in mods and t != name:
                    graph[name].add(t)
    return graph


#: the folders of testbed/ in the order a run needs them (docs/development.md, "Layout"): a
#: folder imports only folders before it, and the core modules (layer 0)
LAYERS = [
    (
        "core",
        (
            "contract",
            "errors",
            "measure",
            "ot",
            "plugin_source",
            "registry",
            "seeding",
            "sigint",
            "threads",
        ),
    ),
    ("data", ()),
    ("exchange", ()),
    ("scenario", ()),
    ("sandbox", ()),
    ("scoring", ()),
    ("run", ()),
    ("testing", ()),
    ("report", ()),
    ("plugins", ()),
    ("bench", ()),  # the top-level bench/ package (CHECKOUT_ONLY): only cli/ imports it
    ("cli", ()),
]
#: the package root, ``python -m testbed`` and the import path kept for older plugins sit on top
TOP = {"testbed", "testbed.__main__", "testbed.api", "testbed.bus"}


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] in CHECKOUT_ONLY:
        return next(i for i, (folder, _) in enumerate(LAYERS) if folder == parts[0])
    if parts[0] != "testbed" or module in TOP:
        return None
    for i, (folder, core) in enumerate(LAYERS):
        if parts[1] == folder or parts[1] in core:
            return i
    raise AssertionError(f"{module} is in no layer of LAYERS: add its folder to the list")


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for a, targets in graph.items():
        la = layer_of(a)
        for b in targets:
            lb = layer_of(b)
            if la is not None and lb is not None and lb > la:
                bad.append(f"{a} ({LAYERS[la][0]}) imports {b} ({LAYERS[lb][0]})")
    return sorted(bad)


def test_folders_import_only_earlier_folders():
    assert layer_violations(import_graph()) == []


def test_the_layer_check_finds_an_arrow_back_up():
    graph = {"testbed.data.datasets": {"testbed.run.sweep"}, "testbed.run.sweep": set()}
    assert layer_violations(graph) == [
        "testbed.data.datasets (data) imports testbed.run.sweep (run)"
    ]


def checkout_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a CHECKOUT_ONLY package by an installed module other than the CLI's thin
    entries: an installed testbed (a wheel) has no bench/ to import."""
    return sorted(
        f"{a} imports {b}"
        for a, targets in graph.items()
        for b in targets
        if b.split(".")[0] in CHECKOUT_ONLY
        and a.split(".")[0] not in CHECKOUT_ONLY
        and not a.startswith("testbed.cli.")
    )


def test_only_the_cli_imports_the_benchmarks():
    assert checkout_imports(import_graph()) == []
    graph = {"protocols.fedwad": {"bench.data"}, "testbed.cli.bench": {"bench.main"}}
    assert checkout_imports(graph) == ["protocols.fedwad imports bench.data"]


def test_top_level_stays_small():
    top = [p for p in (ROOT / "testbed").glob("*.py")]
    assert len(top) <= 15, sorted(p.name for p in top)
    folders = {p.name for p in (ROOT / "testbed").iterdir() if (p / "__init__.py").exists()}
    assert folders == {f for f, _ in LAYERS[1:]} - set(CHECKOUT_ONLY), folders


def test_no_import_circles():
    try:
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import circle: {' -> '.join(exc.args[1])}")


def test_the_cycle_check_finds_a_circle():
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter({"a": {"b"}, "b": {"c"}, "c": {"a"}}).static_order())


def test_stages_import_only_earlier_stages():
    graph = import_graph()
    for i, stage in enumerate(STAGES):
        later = set(STAGES[i + 1 :])
        assert not graph[stage] & later, f"{stage} imports a later stage: {graph[stage] & later}"
        # nor anything that imports a later stage
        reach, todo = set(), [t for t in graph[stage] if t not in STAGES]
        while todo:
            m = todo.pop()
            if m in reach:
                continue
            reach.add(m)
            todo.extend(graph.get(m, ()))
        assert not reach & later, f"{stage} reaches a later stage through {sorted(reach & later)}"


def test_attack_stage_holds_no_ground_truth():
    graph = import_graph()
    stage = graph["testbed.run.attack"]
    assert "testbed.scoring.truth" not in stage and "testbed.run.score" not in stage
    assert not {m for m in stage if m.startswith("testbed.scoring.")}


def test_roster_hands_out_no_rows():
    X = np.arange(6.0).reshape(3, 2)
    roster = Roster.of({"alice": PartyData("alice", X), "bob": PartyData("bob", X + 1)})
    assert list(roster) == ["alice", "bob"] and len(roster) == 2
    h = roster["alice"]
    assert (h.name, h.n, h.dim) == ("alice", 3, 2)
    for attr in ("X", "y", "source_index"):
        with pytest.raises(TestbedError, match=f"private `{attr}`.*bus.local"):
            getattr(h, attr)
    assert not any(isinstance(v, np.ndarray) for v in vars(h).values())
    with pytest.raises(KeyError, match="no party 'carol'"):
        roster["carol"]
    # nothing on the roster leads to rows: no placement(), no data attribute
    assert not hasattr(roster, "placement")
    assert not any(isinstance(v, (np.ndarray, PartyData)) for v in vars(roster).values())
    assert all(isinstance(v, PartyHandle) for v in roster._handles.values())


def test_protocol_run_receives_the_roster(monkeypatch, tiny_scenario):
    """execute() gives the protocol a Roster (handles), and the bus hosts the data."""
    from testbed.run import execute

    seen = {}
    world = execute(tiny_scenario, until="world").world
    proto = world.protocol
    original = type(proto).run

    def spy(self, parties, bus, rng):
        seen["type"] = type(parties)
        seen["rows"] = [bus.local(p, lambda d: d.n) for p in parties]
        return original(self, parties, bus, rng)

    monkeypatch.setattr(type(proto), "run", spy)
    out = execute(tiny_scenario, world=world, until="results", write=False)
    assert seen["type"] is Roster
    assert seen["rows"] == [d.n for d in world.parties.values()]
    assert out.results["estimates"]


# ----------------------------------------------------------------------------- no giants
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 120
#: giants another branch is splitting right now; each entry must still be over a limit (a
#: stale entry fails the test), so the list only shrinks
BEING_SPLIT: dict[str, str] = {}


def size_violations(root: Path, packages=PACKAGES) -> list[str]:
    """Library modules over MAX_MODULE_LINES lines and functions (methods, nested functions)
    over MAX_FUNCTION_LINES lines, as ``path: what`` lines relative to ``root``."""
    bad = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            text = path.read_text()
            n = len(text.splitlines())
            if n > MAX_MODULE_LINES:
                bad.append(f"{rel}: module of {n} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        bad.append(f"{rel}:{node.lineno}: {node.name}() of {length} lines")
    return bad


def test_no_giant_modules_or_functions():
    bad = size_violations(ROOT)
    pending = {b for b in bad if b.split(":")[0] in BEING_SPLIT}
    assert sorted(set(bad) - pending) == []
    stale = set(BEING_SPLIT) - {b.split(":")[0] for b in pending}
    assert not stale, f"no longer over a limit, drop from BEING_SPLIT: {sorted(stale)}"


def test_the_size_check_finds_a_long_function_and_a_long_module(tmp_path):
    def body(lines: int, indent: str) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(lines))

    pkg = tmp_path / "lib"
    pkg.mkdir()
    # a function of exactly MAX_FUNCTION_LINES lines (def + body) and a module of MAX_MODULE_LINES
    (pkg / "fine.py").write_text("def f():\n" + body(MAX_FUNCTION_LINES - 1, "    "))
    (pkg / "ok.py").write_text(body(MAX_MODULE_LINES, ""))
    # one line more each; the method is nested in a class
    (pkg / "long.py").write_text("class A:\n    def g(self):\n" + body(MAX_FUNCTION_LINES, " " * 8))
    (pkg / "big.py").write_text(body(MAX_MODULE_LINES + 1, ""))
    assert size_violations(tmp_path, ("lib",)) == [
        f"lib/big.py: module of {MAX_MODULE_LINES + 1} lines",
        f"lib/long.py:2: g() of {MAX_FUNCTION_LINES + 1} lines",
    ]
