"""Built-in attacks. Importing this package registers them in ``testbed.registry.ATTACKS``."""

from attacks._base import (
    Attack,
    AttackConfig,
    AttackOutput,
    AttackOutputError,
    prior_points,
    validate_outputs,
)
from attacks.fedwad_distributional import FedWADDistributional

__all__ = [
    "Attack",
    "AttackConfig",
    "AttackOutput",
    "AttackOutputError",
    "FedWADDistributional",
    "prior_points",
    "validate_outputs",
]
