"""OT privacy testbed: run federated optimal-transport protocols over a logged message bus,
attack what an observer saw, and report leakage against accuracy."""

from importlib import import_module

__version__ = "0.1.0"

#: public name -> module that defines it, imported on first use (PEP 562): ``import testbed``
#: (every ``testbed`` command starts with it) loads none of them, so ``testbed --version`` and
#: ``testbed plugins`` answer without numpy, scipy or the bus
_LAZY = {
    **dict.fromkeys(
        [
            "DataError",
            "OTSolverError",
            "PrivacyGuardError",
            "ScenarioError",
            "TestbedError",
            "UnknownPluginError",
        ],
        "testbed.errors",
    ),
    **dict.fromkeys(
        ["SERVER", "Bus", "Envelope", "PrivacyGuard", "PublicInfo", "Transcript", "View"],
        "testbed.exchange.bus",
    ),
    "Measure": "testbed.measure",
    **dict.fromkeys(
        [
            "ATTACKS",
            "DATASETS",
            "DEFENSES",
            "PARTITIONERS",
            "PROTOCOLS",
            "TRANSFORMS",
            "PluginConfig",
        ],
        "testbed.registry",
    ),
    "Scenario": "testbed.scenario.schema",
    "load_scenario": "testbed.scenario.loading",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'testbed' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ATTACKS",
    "DATASETS",
    "DEFENSES",
    "PARTITIONERS",
    "PROTOCOLS",
    "SERVER",
    "TRANSFORMS",
    "Bus",
    "DataError",
    "Envelope",
    "Measure",
    "OTSolverError",
    "PluginConfig",
    "PrivacyGuard",
    "PrivacyGuardError",
    "PublicInfo",
    "Scenario",
    "ScenarioError",
    "TestbedError",
    "Transcript",
    "UnknownPluginError",
    "View",
    "load_scenario",
]
