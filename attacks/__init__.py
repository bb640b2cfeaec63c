"""Built-in attacks. Each registers itself in ``testbed.registry.ATTACKS`` when its module is
imported, which the registry does when the attack is used (``ATTACKS.get``). The names below
are imported on first use (PEP 562): ``import attacks`` imports none of the modules."""

from testbed.registry import lazy_exports

_EXPORTS = {
    **dict.fromkeys(
        [
            "Attack",
            "AttackConfig",
            "AttackOutput",
            "AttackOutputError",
            "chance_scores",
            "membership_candidates",
            "observed",
            "prior_points",
            "validate_outputs",
        ],
        "attacks._base",
    ),
    "BlindMaskInversion": "attacks.blind_mask_inversion",
    "ClusteringInversion": "attacks.clustering_inversion",
    **dict.fromkeys(["LabelDistributionInference", "SoftLabelMembership"], "attacks.distillation"),
    "FedBaryInversion": "attacks.fedbary_inversion",
    **dict.fromkeys(
        ["ClusteredFLLabelInference", "CoresetInversion", "CoresetLabelInference"],
        "attacks.fedwad_applications",
    ),
    "FedWADDistributional": "attacks.fedwad_distributional",
    "MarketplaceTrilateration": "attacks.marketplace_trilateration",
    "MeasureInversion": "attacks.measure_inversion",
    "MomentsSampling": "attacks.moments_sampling",
    "ProjectionInversion": "attacks.projection_inversion",
    "ReconstructionMembership": "attacks.reconstruction_membership",
    **dict.fromkeys(["ReleaseMembership", "ReleasePoints"], "attacks.release"),
    "SentRows": "attacks.sent_rows",
    "SupportMembership": "attacks.support_membership",
    "Word2VecRetrieval": "attacks.word2vec_retrieval",
}
__getattr__, __dir__ = lazy_exports(
    __name__,
    _EXPORTS,
    moved=frozenset({"Attack", "AttackConfig", "AttackOutput", "observed", "prior_points"}),
)
__all__ = sorted(_EXPORTS)
