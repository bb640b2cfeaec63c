"""Public test utilities for plugin authors: the contract-check kit (see :mod:`.checks`)."""

from testbed.testing.checks import (
    ATTACK_CHECKS,
    DEFENSE_CHECKS,
    PluginFixture,
    attack_fixture,
    check_plugin,
    plugin_checks,
    poison_payload,
)

__all__ = [
    "ATTACK_CHECKS",
    "DEFENSE_CHECKS",
    "PluginFixture",
    "attack_fixture",
    "check_plugin",
    "plugin_checks",
    "poison_payload",
]
