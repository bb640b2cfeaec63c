"""The plugin author's module: everything a protocol, attack, defense or dataset plugin and its
tests import, in one place (``from testbed.api import Protocol, ProtocolResult, ...``).

A name here keeps its meaning across releases; anything else in the testbed may change. The
names are imported on first use (PEP 562): ``import testbed.api`` loads none of their modules.

Every optional capability of a plugin is a member of its base class, with a default
(docs/guide/plugins.md, "The contract"); a class that defines a name close to one of them but not
equal (``knob_param``) is refused when it registers, with the suggestion
(:mod:`testbed.contract`).
"""

from testbed.registry import lazy_exports

_EXPORTS = {
    # protocols
    **dict.fromkeys(["Protocol", "ProtocolResult"], "protocols._base"),
    **dict.fromkeys(["SERVER", "Bus", "View", "PublicInfo"], "testbed.exchange.bus"),
    "Measure": "testbed.measure",
    "iter_arrays": "testbed.exchange.payload",
    # the typed channel: what a protocol declares it sends and releases
    **dict.fromkeys(
        [
            "Array",
            "Choice",
            "Maybe",
            "MeasureOf",
            "Message",
            "Num",
            "Parties",
            "Party",
            "PerParty",
            "Record",
        ],
        "testbed.exchange.schema",
    ),
    # attacks
    **dict.fromkeys(
        ["Attack", "AttackConfig", "AttackOutput", "observed", "prior_points"], "attacks._base"
    ),
    # defenses
    **dict.fromkeys(["Defense", "DefenseConfig", "MEASURE_PROTOCOLS"], "defenses._base"),
    # datasets and partitions
    **dict.fromkeys(["DatasetPlugin", "Dataset", "PartyData"], "testbed.data.datasets"),
    "PartitionerPlugin": "testbed.data.partitions",
    # every plugin's parameters, and the errors a plugin raises for its user
    **dict.fromkeys(["PluginConfig", "check_parties"], "testbed.registry"),
    "TestbedError": "testbed.errors",
    # the contract kit
    **dict.fromkeys(["check_plugin", "check_protocol"], "testbed.testing"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
