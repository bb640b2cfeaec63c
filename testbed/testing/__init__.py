"""Public test utilities for plugin authors: the contract-check kit for attacks and defenses (:mod:`.checks`) and for protocols (:mod:`.protocol_checks`)."""

from testbed.testing.checks import (
    ATTACK_CHECKS,
    DEFENSE_CHECKS,
    PluginFixture,
    attack_fixture,
    check_plugin,
    plugin_checks,
    poison_payload,
)
from testbed.testing.protocol_checks import (
    PROTOCOL_CHECKS,
    ProtocolRun,
    check_protocol,
    private_row_findings,
    protocol_checks,
    protocol_run,
    protocol_scenario,
)

__all__ = [
    "ATTACK_CHECKS",
    "PROTOCOL_CHECKS",
    "ProtocolRun",
    "check_protocol",
    "private_row_findings",
    "protocol_checks",
    "protocol_run",
    "protocol_scenario",
    "DEFENSE_CHECKS",
    "PluginFixture",
    "attack_fixture",
    "check_plugin",
    "plugin_checks",
    "poison_payload",
]
