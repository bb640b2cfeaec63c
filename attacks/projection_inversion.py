"""Invert the noisy random projections released by the DP baselines (the strongest linear attack).

``dp_sliced_wasserstein`` and ``dp_jl_ot`` release :math:`Y = \\bar X U + Z` with a public
projection :math:`U` (its seed is announced or in the public params) and noise
:math:`Z \\sim \\mathcal N(0, \\sigma^2 I)` whose :math:`\\sigma = z\\cdot 2C\\|U\\|_{op}` anyone can
recompute from public parameters. With the public Gaussian prior
:math:`x \\sim \\mathcal N(m, \\Sigma)` the Bayes-optimal linear reconstruction of each row is the
LMMSE (Wiener) estimate

.. math:: \\hat x = m + \\Sigma U\\,(U^\\top \\Sigma U + \\sigma^2 I)^{-1}(y - U^\\top m).

Without noise and with :math:`k \\ge d` independent directions it is the exact inverse
:math:`Y U^+` (the non-private limit leaks every row); with :math:`k < d` the component of each
row outside the span of :math:`U` falls back to the prior. Output: one reconstructed row per
released row (record-level coverage applies).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from pydantic import Field

from attacks._base import Attack, AttackConfig, AttackOutput, observed
from protocols.dp_baselines import projection_matrix, projection_sensitivity
from testbed.exchange.bus import PublicInfo, View
from testbed.exchange.ledger import calibrated_multiplier
from testbed.registry import ATTACKS

__all__ = ["ProjectionInversion", "ProjectionInversionConfig", "lmmse_inverse"]

PROTOCOLS = ("dp_sliced_wasserstein", "dp_jl_ot")


def lmmse_inverse(
    Y: np.ndarray, U: np.ndarray, sigma: float, mean: np.ndarray, cov: np.ndarray
) -> np.ndarray:
    """Rows :math:`m + \\Sigma U (U^\\top\\Sigma U + \\sigma^2 I)^{-1}(y - U^\\top m)`; with
    ``sigma = 0`` the pseudo-inverse is used so that a rank-deficient system still resolves."""
    Y = np.asarray(Y, dtype=np.float64)
    S = np.asarray(cov, dtype=np.float64)
    A = U.T @ S @ U + (sigma**2) * np.eye(U.shape[1])
    G = S @ U @ np.linalg.pinv(A, hermitian=True)
    return mean + (Y - mean @ U) @ G.T


class ProjectionInversionConfig(AttackConfig):
    prior_ridge: float = Field(
        1e-6, ge=0, description="added to the prior covariance (constant features are singular)"
    )


@ATTACKS.register
class ProjectionInversion(Attack):
    """LMMSE inversion of the DP baselines' noisy random projections (exact when noise-free)."""

    name = "projection_inversion"
    Config = ProjectionInversionConfig
    protocols = PROTOCOLS
    output_kinds = ("points",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        proto = public.protocol
        if proto not in PROTOCOLS or not public.dim:
            return []
        p = public.params
        d = int(public.dim)
        seed = p.get("directions_seed")
        for e in observed(view, f"{proto}.directions"):
            if isinstance(e.payload, Mapping) and "seed" in e.payload:
                seed = int(e.payload["seed"])
        if seed is None:
            return []
        kind = "sphere" if proto == "dp_sliced_wasserstein" else "jl"
        U = projection_matrix(kind, d, int(p["projections"]), int(seed))
        z = p.get("noise_multiplier")
        if z is None:
            z = calibrated_multiplier(float(p["target_epsilon"]), float(p["target_delta"]), 1)
        sigma = float(z) * projection_sensitivity(U, float(p["clip_norm"]))
        mean, cov = self._prior(public, d)
        me = {view.observer, *view.colluders}
        out = []
        for e in observed(view, f"{proto}.projections"):
            if e.sender in me or e.sender not in public.parties:
                continue
            Y = np.asarray(e.payload, dtype=np.float64)
            if Y.ndim != 2 or Y.shape[1] != U.shape[1] or not np.all(np.isfinite(Y)):
                continue
            pts = lmmse_inverse(Y, U, sigma, mean, cov)
            out.append(
                AttackOutput(
                    kind="points",
                    target=e.sender,
                    points=pts,
                    meta={"sigma": sigma, "k": U.shape[1]},
                )
            )
        return out

    def _prior(self, public: PublicInfo, d: int) -> tuple[np.ndarray, np.ndarray]:
        mean = public.extra.get("prior_mean")
        cov = public.extra.get("prior_cov")
        if mean is None and public.prior is not None:
            mean, cov = public.prior.mean(axis=0), np.cov(public.prior, rowvar=False)
        if mean is None:
            mean, cov = np.zeros(d), np.eye(d)
        cov = np.atleast_2d(np.asarray(cov, dtype=np.float64))
        return np.asarray(mean, dtype=np.float64), cov + self.config.prior_ridge * np.eye(d)
