"""Registries and package exports."""

from __future__ import annotations

import importlib

import pytest

from testbed.errors import TestbedError, UnknownPluginError
from testbed.registry import DATASETS, PROTOCOLS, Plugin, Registry


def test_unknown_name_suggests_the_closest_or_lists_known_names():
    with pytest.raises(UnknownPluginError) as info:
        PROTOCOLS.get("fedwat")
    assert str(info.value).startswith("unknown protocol 'fedwat'; did you mean 'fedwad'? (")
    assert "entry point in group 'ot_testbed.protocols'" in str(info.value)
    with pytest.raises(UnknownPluginError) as info:
        PROTOCOLS.get("zzz_nothing_like_it")
    assert "; known: " in str(info.value) and "fedbary, fedwad" in str(info.value)
    assert "\n" not in str(info.value)


def test_an_entry_point_that_is_not_a_plugin_class_is_broken_not_fatal():
    """An entry point naming a class of the wrong kind (or not a class) is listed as broken,
    with what to subclass; the other plugins still list."""
    from importlib.metadata import EntryPoint

    from testbed.registry import ATTACKS

    ATTACKS.names()
    saved = {a: dict(getattr(ATTACKS, a)) for a in ("_broken", "_items", "_origins")}
    try:
        for ep_name, target in [
            ("not_a_plugin", "tests.test_registry:NotAPlugin"),
            ("a_protocol", "protocols.fedwad:FedWAD"),
            ("a_function", "tests.test_registry:not_a_class"),
        ]:
            ATTACKS._load_entry_point(EntryPoint(ep_name, target, "ot_testbed.attacks"))
        broken = ATTACKS.broken()
        assert broken["not_a_plugin"] == (
            "entry point 'not_a_plugin' (tests.test_registry:NotAPlugin): NotAPlugin is not an "
            "attack plugin: subclass attacks.Attack"
        )
        assert "FedWAD is not an attack plugin" in broken["a_protocol"]
        assert "a function is not an attack plugin" in broken["a_function"]
        assert "fedwad_distributional" in dict(ATTACKS.listing())
        with pytest.raises(TestbedError, match="NotAPlugin is not an attack plugin"):
            ATTACKS.get("not_a_plugin")
    finally:
        for a, v in saved.items():
            setattr(ATTACKS, a, v)


def test_an_entry_point_must_use_its_class_name():
    from importlib.metadata import EntryPoint

    from testbed.registry import ATTACKS

    ATTACKS.names()
    saved = {a: dict(getattr(ATTACKS, a)) for a in ("_broken", "_items", "_origins")}
    try:
        ep = EntryPoint("other_name", "tests.test_registry:Named", "ot_testbed.attacks")
        ATTACKS._load_entry_point(ep)
        assert "its class Named is named 'named_probe'" in ATTACKS.broken()["other_name"]
        assert Named.name == "named_probe"  # not renamed behind its author's back
    finally:
        for a, v in saved.items():
            setattr(ATTACKS, a, v)


class NotAPlugin:
    name = "not_a_plugin"


def not_a_class():
    return None


def _named():
    from testbed.api import Attack

    class Named(Attack):
        """Registered under another name than its own."""

        name = "named_probe"
        protocols = ("fedwad",)

        def run(self, view, public, rng):
            return []

    return Named


Named = _named()


def test_duplicate_registration_is_refused():
    reg = Registry("thing", "ot_testbed.things_test", "testbed")

    @reg.register
    class A(Plugin):
        name = "a_thing"

    with pytest.raises(TestbedError, match="already registered"):

        @reg.register
        class B(Plugin):
            name = "a_thing"


def test_names_must_be_snake_case():
    reg = Registry("thing", "ot_testbed.things_test", "testbed")
    with pytest.raises(TestbedError, match="snake_case"):

        @reg.register
        class C(Plugin):
            name = "BadName"


def test_builtin_datasets_are_registered():
    assert {
        "gaussians",
        "digits",
        "wine",
        "breast_cancer",
        "iris",
        "diabetes",
        "csv",
        "npy",
    } <= set(DATASETS.names())


@pytest.mark.parametrize("package", ["testbed", "testbed.api", "protocols", "attacks", "defenses"])
def test_every_name_in_all_exists(package):
    import warnings

    mod = importlib.import_module(package)
    for name in mod.__all__:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert hasattr(mod, name), f"{package}.__all__ lists {name!r} which does not exist"
        # the plugin API's old homes still answer, pointing at its new one
        moved = [str(w.message) for w in seen if issubclass(w.category, DeprecationWarning)]
        assert not moved or (package != "testbed.api" and "testbed.api" in moved[0]), moved
