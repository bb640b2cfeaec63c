"""Built-in attacks. Importing this package registers them in ``testbed.registry.ATTACKS``."""

from attacks._base import Attack, AttackOutput

__all__ = ["Attack", "AttackOutput"]
