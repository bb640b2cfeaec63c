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
from attacks.blind_mask_inversion import BlindMaskInversion
from attacks.clustering_inversion import ClusteringInversion
from attacks.distillation import LabelDistributionInference, SoftLabelMembership
from attacks.fedbary_inversion import FedBaryInversion
from attacks.fedwad_applications import (
    ClusteredFLLabelInference,
    CoresetInversion,
    CoresetLabelInference,
)
from attacks.fedwad_distributional import FedWADDistributional
from attacks.marketplace_trilateration import MarketplaceTrilateration
from attacks.measure_inversion import MeasureInversion
from attacks.moments_sampling import MomentsSampling
from attacks.projection_inversion import ProjectionInversion
from attacks.reconstruction_membership import ReconstructionMembership
from attacks.sent_rows import SentRows
from attacks.support_membership import SupportMembership
from attacks.word2vec_retrieval import Word2VecRetrieval

__all__ = [
    "Attack",
    "AttackConfig",
    "AttackOutput",
    "AttackOutputError",
    "BlindMaskInversion",
    "ClusteredFLLabelInference",
    "ClusteringInversion",
    "CoresetInversion",
    "CoresetLabelInference",
    "FedBaryInversion",
    "FedWADDistributional",
    "LabelDistributionInference",
    "MarketplaceTrilateration",
    "MeasureInversion",
    "MomentsSampling",
    "ProjectionInversion",
    "ReconstructionMembership",
    "SentRows",
    "SoftLabelMembership",
    "SupportMembership",
    "Word2VecRetrieval",
    "observed",
    "prior_points",
    "validate_outputs",
]
