"""Error types. Every user-facing error is a :class:`TestbedError`; the CLI prints its message
on one line and exits with code 2 (bad input), or 1 for a :class:`PluginFault` (a plugin's own
fault at run time) or an :class:`EngineFault` (a node or worker of the engine died)."""

from __future__ import annotations


class TestbedError(Exception):
    """A user-facing error: bad input, unknown plugin, invalid data. One line, no traceback."""

    __test__ = False  # not a pytest test class


class PluginFault(TestbedError):
    """A plugin failed at run time (raised, exited, returned what the testbed cannot use): not
    bad input, so the command exits 1 (:attr:`exit_code`)."""

    exit_code = 1


class EngineCallError(PluginFault):
    """A call a plugin made through the engine failed there, for what the plugin did: a worker
    process holding its party died, or an argument or a result cannot cross between processes.
    :class:`~testbed.registry.plugin_phase` names the plugin in front of the engine's line."""


class EngineFault(TestbedError):
    """The engine itself failed at run time: a Ray node, raylet or actor process died. Not bad
    input and no plugin's fault: the command exits 1 with the engine's line (what died, which
    parties it held)."""

    exit_code = 1


class DriverReadError(PluginFault):
    """A protocol's driver code reached for a party's private rows through its handle.
    :class:`~testbed.registry.plugin_phase` names the protocol in front of the line."""


class ScenarioError(TestbedError):
    """The scenario file is malformed or refers to something that does not exist."""


class DataError(TestbedError):
    """A dataset is invalid (NaN/inf, empty party, dimension mismatch, too few points)."""


class UnknownPluginError(TestbedError):
    """A plugin name is not registered; the message lists the known names."""


class PrivacyGuardError(PluginFault):
    """The bus guard found a row of a party's private data in an outgoing payload: the
    protocol's fault at run time, not bad input (exit 1)."""


class OTSolverError(TestbedError):
    """POT's exact solver did not reach optimality (numItermax reached) or failed."""
