"""Built-in defenses. Importing this package registers them in ``testbed.registry.DEFENSES``."""

from defenses._base import Defense, DefenseConfig
from defenses.distillation import DPSGDTeachers, NoisySoftLabels, PateAggregation
from defenses.gaussian_measure_noise import GaussianMeasureNoise, GaussianMeasureNoiseConfig
from defenses.knobs import DistancesAtEnd, KnobDefense, LargeT, RandomT, SmallSupport
from defenses.secret_mask import SecretIsometryMask, SecretIsometryMaskConfig
from defenses.subsample_support import SubsampleSupport, SubsampleSupportConfig

__all__ = [
    "DPSGDTeachers",
    "Defense",
    "DefenseConfig",
    "DistancesAtEnd",
    "GaussianMeasureNoise",
    "GaussianMeasureNoiseConfig",
    "KnobDefense",
    "LargeT",
    "NoisySoftLabels",
    "PateAggregation",
    "RandomT",
    "SecretIsometryMask",
    "SecretIsometryMaskConfig",
    "SmallSupport",
    "SubsampleSupport",
    "SubsampleSupportConfig",
]
