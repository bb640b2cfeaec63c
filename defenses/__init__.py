"""Built-in defenses. Each registers itself in ``testbed.registry.DEFENSES`` when its module is
imported, which the registry does when the defense is used (``DEFENSES.get``). The names below
are imported on first use (PEP 562): ``import defenses`` imports none of the modules."""

from testbed.registry import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["MEASURE_PROTOCOLS", "Defense", "DefenseConfig"], "defenses._base"),
    **dict.fromkeys(
        ["DPSGDTeachers", "NoisySoftLabels", "PateAggregation"], "defenses.distillation"
    ),
    **dict.fromkeys(
        ["GaussianMeasureNoise", "GaussianMeasureNoiseConfig"], "defenses.gaussian_measure_noise"
    ),
    **dict.fromkeys(
        ["DistancesAtEnd", "KnobDefense", "LargeT", "RandomT", "SmallSupport"], "defenses.knobs"
    ),
    **dict.fromkeys(["SecretIsometryMask", "SecretIsometryMaskConfig"], "defenses.secret_mask"),
    **dict.fromkeys(["SubsampleSupport", "SubsampleSupportConfig"], "defenses.subsample_support"),
}
__getattr__, __dir__ = lazy_exports(
    __name__, _EXPORTS, moved=frozenset({"Defense", "DefenseConfig", "MEASURE_PROTOCOLS"})
)
__all__ = sorted(_EXPORTS)
