"""Built-in protocols. Importing this package registers them in ``testbed.registry.PROTOCOLS``."""

from protocols._base import Protocol, ProtocolResult
from protocols.fedwad import FedWAD
from protocols.sinkhorn_distillation import SinkhornDistillation

__all__ = ["FedWAD", "Protocol", "ProtocolResult", "SinkhornDistillation"]
