"""Built-in protocols. Importing this package registers them in ``testbed.registry.PROTOCOLS``."""

from protocols._base import Protocol, ProtocolResult
from protocols.dp_baselines import DPJLOT, DPSlicedWasserstein
from protocols.dp_moments import DPGaussianMoments
from protocols.fedbary import FedBary
from protocols.fedwad import FedWAD
from protocols.fedwad_clustered_fl import FedWADClusteredFL
from protocols.fedwad_clustering import FedWADClustering
from protocols.fedwad_coreset import FedWADCoreset
from protocols.sinkhorn_distillation import SinkhornDistillation
from protocols.triangle_wad import TriangleWad, TriangleWadMarketplace

__all__ = [
    "DPGaussianMoments",
    "DPJLOT",
    "DPSlicedWasserstein",
    "FedBary",
    "FedWAD",
    "FedWADClusteredFL",
    "FedWADClustering",
    "FedWADCoreset",
    "Protocol",
    "ProtocolResult",
    "SinkhornDistillation",
    "TriangleWad",
    "TriangleWadMarketplace",
]
