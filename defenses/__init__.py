"""Built-in defenses. Importing this package registers them in ``testbed.registry.DEFENSES``."""

from defenses._base import Defense, DefenseConfig
from defenses.distillation import DPSGDTeachers, NoisySoftLabels, PateAggregation

__all__ = ["DPSGDTeachers", "Defense", "DefenseConfig", "NoisySoftLabels", "PateAggregation"]
