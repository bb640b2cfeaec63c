"""Reconstruction from released moments (the attack shipped with ``dp_gaussian_moments``).

The server receives each client's noisy mean and second moments; the most a reconstruction can
take from two moments is the Gaussian they define. The attack post-processes a release exactly as
the server does (:func:`protocols.dp_moments.moments_from_release`) and draws as many rows as the
target holds (``public.extra["sizes"]``) from :math:`\\mathcal N(\\hat m, \\hat\\Sigma)`. Its leakage is
distributional (how much closer that Gaussian is to the data than the public prior) and bounded by
the DP claim; record-level coverage should stay at the prior's level.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from attacks._base import Attack, AttackConfig, AttackOutput, observed
from protocols.dp_moments import moments_from_release
from testbed.exchange.bus import PublicInfo, View
from testbed.registry import ATTACKS

__all__ = ["MomentsSampling"]


@ATTACKS.register
class MomentsSampling(Attack):
    """Sample the target's rows from the Gaussian of its released (noisy) moments."""

    name = "moments_sampling"
    Config = AttackConfig
    protocols = ("dp_gaussian_moments",)
    output_kinds = ("points",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        me = {view.observer, *view.colluders}
        out = []
        for e in observed(view, "dp_gaussian_moments.moments"):
            p = e.payload
            if e.sender in me or e.sender not in public.parties or not isinstance(p, Mapping):
                continue
            if not all(np.all(np.isfinite(np.asarray(p[k]))) for k in ("mean", "second")):
                continue
            m, cov = moments_from_release(p, int(public.dim))
            n = int(public.extra.get("sizes", {}).get(e.sender, 100))
            pts = rng.multivariate_normal(m, cov, size=n, method="eigh")
            out.append(AttackOutput(kind="points", target=e.sender, points=pts))
        return out
