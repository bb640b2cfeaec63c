"""Feature transforms applied to every party's data before the protocol runs (e.g. the OTDD
label augmentation). A transform is fitted on each party's own data only: it never pools rows."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from testbed.data.datasets import PartyData
from testbed.data.otdd import augment
from testbed.registry import TRANSFORMS, Plugin, PluginConfig

__all__ = ["OtddAugment", "Scale", "Transform"]


class Transform(Plugin):
    """Base class: ``apply(party) -> PartyData`` with new features."""

    #: the transform reads the labels: ``testbed validate`` refuses it on a dataset without
    needs_labels: ClassVar[bool] = False
    #: ``apply`` needs numpy only (see :attr:`testbed.data.datasets.DatasetPlugin.light`)
    light: ClassVar[bool] = False

    def apply(self, party: PartyData) -> PartyData:  # pragma: no cover - abstract
        """The party's data with new features (required)."""
        raise NotImplementedError


class ScaleConfig(PluginConfig):
    factor: float = 1.0
    clip_norm: float | None = None
    mode: Literal["multiply"] = "multiply"


@TRANSFORMS.register
class Scale(Transform):
    """Multiply features by a public constant, optionally clipping each row to a public L2 norm."""

    name = "scale"
    Config = ScaleConfig
    light = True

    def apply(self, party: PartyData) -> PartyData:
        X = np.array(party.X, dtype=np.float64) * self.config.factor
        if self.config.clip_norm is not None:
            norms = np.linalg.norm(X, axis=1, keepdims=True)
            X = X * np.minimum(1.0, self.config.clip_norm / np.maximum(norms, 1e-300))
        X.setflags(write=False)
        return PartyData(party.name, X, party.y, party.source_index)


class OtddAugmentConfig(PluginConfig):
    covariance: Literal["diagonal", "full"] = Field(
        "diagonal", description="append diag(Sigma_y^1/2) (width 3d) or all of it (width 2d + d^2)"
    )


@TRANSFORMS.register
class OtddAugment(Transform):
    """OTDD label augmentation [x; m_y; vec(Sigma_y^1/2)], statistics from the party's own rows."""

    name = "otdd_augment"
    needs_labels = True
    Config = OtddAugmentConfig

    def apply(self, party: PartyData) -> PartyData:
        X = augment(party.X, party.y, self.config.covariance)
        X.setflags(write=False)
        return PartyData(party.name, X, party.y, party.source_index)
