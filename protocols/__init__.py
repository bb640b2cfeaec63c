"""Built-in protocols. Importing this package registers them in ``testbed.registry.PROTOCOLS``."""

from protocols._base import Protocol, ProtocolResult
from protocols.fedwad import FedWAD

__all__ = ["FedWAD", "Protocol", "ProtocolResult"]
