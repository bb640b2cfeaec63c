"""The declared plugin contract (issue 49, point 2): every optional hook is a member of its base
class; a misspelt one is refused at registration and by the contract kit, with a suggestion;
the library reads hooks through the declarations only; plugin authors import testbed.api."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attacks._base import Attack
from defenses._base import Defense
from protocols._base import Protocol
from testbed.contract import MisspeltHookError, check_hooks, declared_hooks, provides
from testbed.data.datasets import DatasetPlugin
from testbed.registry import ATTACKS, DATASETS, DEFENSES, PROTOCOLS, Registry

ROOT = Path(__file__).resolve().parents[1]


class _P(Protocol):
    def run(self, parties, bus, rng):  # pragma: no cover - never run
        raise NotImplementedError

    def reference(self, parties):  # pragma: no cover - never run
        return {}


@pytest.mark.parametrize(
    "base, name, hook",
    [
        (_P, "knob_param", "knob_params"),
        (_P, "client_release", "client_releases"),
        (_P, "central_cluster", "central_clusters"),
        (_P, "sends_measure", "sends_measures"),
        (_P, "barycentric_push_checks", "barycentric_push_check"),
        (_P, "headline_acuracy", "headline_accuracy"),
        (Defense, "check_release", "check_releases"),
        (Defense, "asumptions", "assumptions"),
        (Attack, "output_kind", "output_kinds"),
        (DatasetPlugin, "fresh_row", "fresh_rows"),
    ],
)
def test_a_misspelt_hook_is_refused_with_the_suggestion(base, name, hook):
    cls = type("Misspelt", (base,), {name: None, "__module__": __name__})
    with pytest.raises(MisspeltHookError, match=rf"{name!r} is not a hook.*did you mean {hook!r}"):
        check_hooks(cls, base, "x")
    # the registries call the same check: nothing is registered
    reg = {_P: PROTOCOLS, Defense: DEFENSES, Attack: ATTACKS, DatasetPlugin: DATASETS}[base]
    with pytest.raises(MisspeltHookError):
        reg.register(cls, name="misspelt_hook_probe")
    assert "misspelt_hook_probe" not in reg._items


def test_the_right_spelling_and_helpers_of_ones_own_register():
    reg = Registry("protocol", "ot_testbed.none", "protocols", "protocols._base:Protocol")

    class Good(_P):
        knob_params = {"support_size": "k"}  # the hook, spelt right
        solver_cache = None  # a helper of its own, far from any hook

        def _knob_param(self):  # private: never a hook
            return None

    assert reg.register(Good, name="good_probe") is Good


def test_every_builtin_plugin_passes_the_hook_check():
    for reg in (PROTOCOLS, ATTACKS, DEFENSES, DATASETS):
        for _name, cls in reg.items():
            check_hooks(cls, reg.base(), reg.kind)


def test_the_contract_kit_flags_a_misspelt_hook():
    from testbed.testing.checks import check_no_misspelt_hooks

    bad = type("Bad", (Attack,), {"output_kind": ("points",), "__module__": __name__})
    with pytest.raises(AssertionError, match="did you mean 'output_kinds'"):
        check_no_misspelt_hooks(bad)
    check_no_misspelt_hooks(ATTACKS.get("sent_rows"))


def test_provides_tells_an_override_from_the_default():
    fedwad, gaussians, digits = (
        PROTOCOLS.get("fedwad"),
        DATASETS.get("gaussians"),
        DATASETS.get("digits"),
    )
    assert provides(fedwad, "client_releases") and provides(fedwad, "barycentric_push_check")
    assert not provides(PROTOCOLS.get("sinkhorn_distillation"), "central_clusters")
    assert provides(gaussians, "fresh_rows") and not provides(digits, "fresh_rows")
    assert provides(DEFENSES.get("gaussian_measure_noise"), "multiplier")
    assert not provides(DEFENSES.get("small_support"), "multiplier")
    with pytest.raises(AttributeError, match="declares no hook"):
        provides(fedwad, "no_such_hook")


def test_the_defaults_of_optional_hooks_mean_not_provided():
    p = _P()
    assert p.client_releases(["a", "b"]) is None
    assert p.central_clusters(np.zeros((2, 2))) is None
    assert _P.barycentric_push_check({}, 0.5, {"a": 3}) is None
    assert _P.knob_params == {} and _P.sends_measures is False
    assert DatasetPlugin().fresh_rows(np.random.default_rng(0), None, 3) is None


def _hook_names() -> set[str]:
    names = set()
    for base in (Protocol, Attack, Defense, DatasetPlugin):
        names |= declared_hooks(base)
    return names - {"name"}  # a class's display name, read with a fallback on any object


def test_the_library_reads_no_hook_through_getattr():
    """A hook read with ``getattr(plugin, "hook", default)`` ignores a misspelling; every hook is
    declared, so the library reads it directly (or through ``provides``)."""
    hooks = _hook_names()
    found = []
    for folder in ("testbed", "protocols", "attacks", "defenses"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr")
                    and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in hooks
                    and not (isinstance(node.args[0], ast.Name) and node.args[0].id == "self")
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.args[1].value}")
    # config fields of the same name as a hook are not hooks: none today
    assert found == []


def test_api_names_import_and_import_nothing_heavy():
    import testbed.api as api

    assert 15 <= len(api.__all__) <= 40  # 25 plugin names and the message-schema language
    for name in api.__all__:
        assert getattr(api, name) is not None
    code = (
        "import sys, testbed.api; "
        "print(sorted(m for m in ('ot', 'torch', 'sklearn', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


_OWN = {"testbed.api", "numpy", "pydantic", "__future__", "collections.abc", "math", "typing"}


def _imports(code: str) -> set[str]:
    out = set()
    for line in code.splitlines():
        m = re.match(r"\s*(?:from\s+(\S+)\s+import|import\s+(\S+))", line)
        if m:
            out.add((m.group(1) or m.group(2)).split(" as ")[0])
    return out


def test_the_plugin_guide_and_the_scaffold_import_only_the_public_module():
    text = (ROOT / "docs/guide/plugins.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    # the templates the scaffold writes: the string constants of its module
    tree = ast.parse((ROOT / "testbed/plugins/scaffold.py").read_text())
    scaffold = "\n".join(
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )
    assert "from testbed.api import" in scaffold
    testbed_imports = {
        m
        for b in blocks
        for m in _imports(b)
        if m.split(".")[0] in ("testbed", "attacks", "protocols", "defenses")
    }
    assert testbed_imports == {"testbed.api"}
    for mod in (
        "attacks",
        "protocols",
        "defenses",
        "testbed.measure",
        "testbed.registry",
        "testbed.testing",
        "testbed.exchange.bus",
    ):
        assert f"from {mod} import" not in scaffold, mod
