"""OT privacy testbed: run federated optimal-transport protocols over a logged message bus,
attack what an observer saw, and report leakage against accuracy."""

from testbed.errors import (
    DataError,
    OTSolverError,
    PrivacyGuardError,
    ScenarioError,
    TestbedError,
    UnknownPluginError,
)
from testbed.exchange.bus import SERVER, Bus, Envelope, PrivacyGuard, PublicInfo, Transcript, View
from testbed.measure import Measure
from testbed.registry import (
    ATTACKS,
    DATASETS,
    DEFENSES,
    PARTITIONERS,
    PROTOCOLS,
    TRANSFORMS,
    PluginConfig,
)
from testbed.scenario.loading import load_scenario
from testbed.scenario.schema import Scenario

__version__ = "0.1.0"

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
