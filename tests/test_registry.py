"""Registries and package exports."""

from __future__ import annotations

import importlib

import pytest

from testbed.errors import TestbedError, UnknownPluginError
from testbed.registry import DATASETS, PROTOCOLS, Plugin, Registry


def test_unknown_name_lists_known_names():
    with pytest.raises(UnknownPluginError) as info:
        PROTOCOLS.get("fedwat")
    assert "fedwad" in str(info.value)
    assert "unknown protocol 'fedwat'" in str(info.value)


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


@pytest.mark.parametrize("package", ["testbed", "protocols", "attacks", "defenses"])
def test_every_name_in_all_exists(package):
    mod = importlib.import_module(package)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{package}.__all__ lists {name!r} which does not exist"
