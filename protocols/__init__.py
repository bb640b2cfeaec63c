"""Built-in protocols. Each registers itself in ``testbed.registry.PROTOCOLS`` when its module is
imported, which the registry does when the protocol is used (``PROTOCOLS.get``). The names
below are imported on first use (PEP 562): ``import protocols`` imports none of the modules."""

from testbed.registry import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["Protocol", "ProtocolResult"], "protocols._base"),
    **dict.fromkeys(["DPJLOT", "DPSlicedWasserstein"], "protocols.dp_baselines"),
    "DPGaussianMoments": "protocols.dp_moments",
    "FedBary": "protocols.fedbary",
    "FedWAD": "protocols.fedwad",
    "FedWADClusteredFL": "protocols.fedwad_clustered_fl",
    "FedWADClustering": "protocols.fedwad_clustering",
    "FedWADCoreset": "protocols.fedwad_coreset",
    "SinkhornDistillation": "protocols.sinkhorn_distillation",
    **dict.fromkeys(["TriangleWad", "TriangleWadMarketplace"], "protocols.triangle_wad"),
}
__getattr__, __dir__ = lazy_exports(
    __name__, _EXPORTS, moved=frozenset({"Protocol", "ProtocolResult"})
)
__all__ = sorted(_EXPORTS)
