"""Built-in attacks. Importing this package registers them in ``testbed.registry.ATTACKS``."""

from attacks._base import (
    Attack,
    AttackConfig,
    AttackOutput,
    AttackOutputError,
    prior_points,
    validate_outputs,
)
from attacks.distillation import LabelDistributionInference, SoftLabelMembership
from attacks.fedwad_distributional import FedWADDistributional

__all__ = [
    "Attack",
    "AttackConfig",
    "AttackOutput",
    "AttackOutputError",
    "FedWADDistributional",
    "LabelDistributionInference",
    "SoftLabelMembership",
    "prior_points",
    "validate_outputs",
]
