"""Membership inference from any reconstruction attack (our attack; applies wherever one does).

Runs a reconstruction attack (``reconstruction``: its registered name, ``params``: its config) on
the same view, then scores each public membership candidate (``public.extra["candidates"]``: an
array of rows, or a mapping target -> rows; issue 11's candidate pool) by how much closer it is
to the reconstruction than to the public prior sample:

.. math:: s(c) = \\log\\big(\\epsilon + d(c, \\text{prior})\\big) - \\log\\big(\\epsilon + d(c, \\hat X)\\big)

with :math:`d(c, A)` the distance to the nearest row of :math:`A` and :math:`\\epsilon` a
thousandth of the prior's median nearest-neighbour distance (an exact hit scores high without an
infinity). Dividing by the prior distance calibrates away candidates that are close to everything
(dense regions). Its baseline scores candidates by the prior alone (no message), i.e. chance.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field, model_validator

from attacks._base import (
    Attack,
    AttackConfig,
    AttackOutput,
)
from attacks._base import (
    membership_candidates as _candidates,
)
from testbed.exchange.bus import PublicInfo, View
from testbed.registry import ATTACKS

__all__ = ["ReconstructionMembership", "ReconstructionMembershipConfig", "membership_scores"]

#: reconstruction attacks it can wrap (each names the protocols it applies to)
RECONSTRUCTIONS = (
    "fedbary_inversion",
    "clustering_inversion",
    "measure_inversion",
    "projection_inversion",
    "fedwad_distributional",
    "blind_mask_inversion",
    "moments_sampling",
    "coreset_inversion",
)


def _nn(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    from sklearn.neighbors import NearestNeighbors  # sklearn: validate imports attack modules

    return NearestNeighbors(n_neighbors=1).fit(B).kneighbors(A)[0][:, 0]


def membership_scores(candidates: np.ndarray, recon: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """:math:`\\log(\\epsilon + d(c, \\text{prior})) - \\log(\\epsilon + d(c, \\hat X))` per candidate."""
    C = np.asarray(candidates, dtype=np.float64)
    P = np.asarray(prior, dtype=np.float64)
    scale = float(np.median(_nn(P, P[::-1]))) if len(P) > 1 else 1.0
    eps = 1e-3 * (scale if scale > 0 else 1.0)
    return np.log(eps + _nn(C, P)) - np.log(eps + _nn(C, np.asarray(recon, dtype=np.float64)))


class ReconstructionMembershipConfig(AttackConfig):
    reconstruction: str = Field(
        "fedbary_inversion", description=f"reconstruction attack to run first: {RECONSTRUCTIONS}"
    )
    params: dict[str, Any] = Field(default_factory=dict, description="its parameters")

    @model_validator(mode="after")
    def _known(self):
        if self.reconstruction not in RECONSTRUCTIONS:
            raise ValueError(
                f"reconstruction must be one of {list(RECONSTRUCTIONS)}, got {self.reconstruction!r}"
            )
        return self


@ATTACKS.register
class ReconstructionMembership(Attack):
    """Membership scores of public candidates: closer to a reconstruction than to the prior."""

    name = "reconstruction_membership"
    Config = ReconstructionMembershipConfig
    protocols = (
        "fedbary",
        "fedwad_clustering",
        "triangle_wad",
        "triangle_wad_marketplace",
        "dp_sliced_wasserstein",
        "dp_jl_ot",
        "fedwad",
        "dp_gaussian_moments",
        "fedwad_coreset",
    )
    output_kinds = ("scores",)
    contract_scenario = "contract_tiny_fedbary_membership.yaml"

    def _inner(self) -> Attack:
        cls = ATTACKS.get(self.config.reconstruction)
        return cls(cls.Config(**self.config.params))

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        inner = self._inner()
        if public.prior is None or not inner.applies_to(public.protocol):
            return []
        out = []
        for rec in inner.run(view, public, rng):
            cand = _candidates(public, rec.target)
            if rec.kind != "points" or cand is None:
                continue
            out.append(
                AttackOutput(
                    kind="scores",
                    target=rec.target,
                    scores=membership_scores(cand, rec.points, public.prior),
                    meta={"candidates": cand, "reconstruction": inner.name},
                )
            )
        return out
