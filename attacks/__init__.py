"""Built-in attacks. Importing this package registers them in ``testbed.registry.ATTACKS``."""

from attacks._base import (
    Attack,
    AttackConfig,
    AttackOutput,
    AttackOutputError,
    observed,
    prior_points,
    validate_outputs,
)
from attacks.distillation import LabelDistributionInference, SoftLabelMembership
from attacks.fedwad_distributional import FedWADDistributional
from attacks.marketplace_trilateration import MarketplaceTrilateration
from attacks.measure_inversion import MeasureInversion
from attacks.projection_inversion import ProjectionInversion
from attacks.word2vec_retrieval import Word2VecRetrieval

__all__ = [
    "Attack",
    "AttackConfig",
    "AttackOutput",
    "AttackOutputError",
    "FedWADDistributional",
    "LabelDistributionInference",
    "MarketplaceTrilateration",
    "MeasureInversion",
    "ProjectionInversion",
    "SoftLabelMembership",
    "Word2VecRetrieval",
    "observed",
    "prior_points",
    "validate_outputs",
]
