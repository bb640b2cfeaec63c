"""Built-in defenses. Importing this package registers them in ``testbed.registry.DEFENSES``."""

from defenses._base import Defense, DefenseConfig

__all__ = ["Defense", "DefenseConfig"]
