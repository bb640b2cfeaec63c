"""Blind inversion of masked TriangleWad interpolants (the attack shipped with
``secret_isometry_mask``; it does not know the mask).

The server receives :math:`\\eta' = Q\\eta + b` with an unknown orthogonal :math:`Q` and shift
:math:`b`, and knows :math:`\\gamma`, :math:`t` and the public prior (a Gaussian with the pooled
data's moments and a sample of it). It simulates what an unmasked interpolant looks like — the
prior sample pushed toward :math:`\\gamma` exactly as the protocol pushes (eq. 8), a *proxy* — and
estimates the mask by Wasserstein–Procrustes alignment of the masked measures with the proxy:

1. centre both (the shift is then the difference of the means);
2. start from the alignment of principal axes (eigenvectors of both covariances, each axis's sign
   chosen so that the third moments agree);
3. alternate an exact OT matching between the masked atoms and the rotated proxy (POT) with the
   orthogonal Procrustes solution (SVD) of the matched pairs, ``iterations`` times;
4. unmask, :math:`\\hat\\eta = Q^\\top(\\eta' - b)`, and invert the push
   (:func:`attacks.measure_inversion.invert_barycentric_push`).

``proxy: candidates`` builds the proxy from the public candidate rows instead (real rows of the
same domain; an attacker with such a sample aligns far better: on digits, k = 1, 600 held-out
rows, coverage@r 0.54–0.62 against 0.00 with the Gaussian prior — docs/findings/frontier.md).

``pool: true`` (default) estimates one mask from every masked measure the observer saw — right
against ``mode: shared``, where all clients share the mask and their union looks like the pooled
prior; ``pool: false`` estimates one mask per sender (right against ``per_party``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np
from pydantic import Field

from attacks._base import Attack, AttackConfig, AttackOutput, observed
from attacks.measure_inversion import _as_measure, find_gamma, invert_barycentric_push
from testbed import ot as tot
from testbed.exchange.bus import PublicInfo, View
from testbed.measure import Measure
from testbed.registry import ATTACKS

__all__ = ["BlindMaskInversion", "BlindMaskInversionConfig", "procrustes_align"]


def _skew(Z: np.ndarray) -> np.ndarray:
    return np.mean(Z**3, axis=0)


def procrustes_align(
    target: np.ndarray, proxy: np.ndarray, iterations: int = 20
) -> tuple[np.ndarray, np.ndarray, float]:
    """``(Q, b, cost)`` with ``target ≈ proxy @ Q.T + b`` as measures (uniform weights): principal
    axes with third-moment signs, then OT matching / orthogonal Procrustes alternations."""
    T = np.asarray(target, dtype=np.float64)
    P = np.asarray(proxy, dtype=np.float64)
    mt, mp = T.mean(axis=0), P.mean(axis=0)
    Tc, Pc = T - mt, P - mp
    _, Vt = np.linalg.eigh(np.cov(Tc, rowvar=False))
    _, Vp = np.linalg.eigh(np.cov(Pc, rowvar=False))
    s = np.sign(_skew(Tc @ Vt)) * np.sign(_skew(Pc @ Vp))
    s[s == 0] = 1.0
    a = np.full(len(Tc), 1.0 / len(Tc))
    w = np.full(len(Pc), 1.0 / len(Pc))
    best = (np.eye(Tc.shape[1]), np.inf)
    # two starts: the principal-axes alignment, and "no mask" (the identity); keep the cheaper
    for Q in (Vt @ np.diag(s) @ Vp.T, np.eye(Tc.shape[1])):
        cost = np.inf
        for _ in range(iterations):
            G, cost = tot.emd_plan(a, w, tot.cost_matrix(Tc, Pc @ Q.T))
            U, _, Vh = np.linalg.svd(Tc.T @ G @ Pc)
            Q = U @ Vh
        cost = tot.emd_plan(a, w, tot.cost_matrix(Tc, Pc @ Q.T))[1]
        if cost < best[1]:
            best = (Q, cost)
    Q, cost = best
    return Q, mt - Q @ mp, float(cost)


class BlindMaskInversionConfig(AttackConfig):
    pool: bool = Field(True, description="one mask for all senders (shared) or one per sender")
    iterations: int = Field(20, gt=0, description="OT matching / Procrustes alternations")
    proxy_size: int = Field(600, gt=1, description="rows of the public sample used as the proxy")
    proxy: Literal["prior", "candidates"] = Field(
        "prior",
        description="public rows pushed to build the proxy: the Gaussian prior sample, or the "
        "public candidate rows (real rows of the domain, as the membership threat model grants)",
    )


@ATTACKS.register
class BlindMaskInversion(Attack):
    """Estimate a secret isometry by Wasserstein-Procrustes against a prior proxy, unmask, invert."""

    name = "blind_mask_inversion"
    Config = BlindMaskInversionConfig
    protocols = ("triangle_wad",)
    output_kinds = ("points",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        t = public.params.get("t")
        if not isinstance(t, (int, float)) or isinstance(t, bool) or public.prior is None:
            return []
        me = {view.observer, *view.colluders}
        latest = {}
        for e in observed(view, "triangle_wad.eta"):
            if e.sender not in me and e.sender in public.parties:
                latest[e.sender] = e
        etas = {}
        for s, e in latest.items():
            m = _as_measure(e.payload)
            if m is not None and np.all(np.isfinite(m.support)):
                etas[s] = m
        if not etas:
            return []
        gamma = find_gamma(view, public, "triangle_wad")
        if gamma is None:
            return []
        prior = self._proxy_rows(public)
        if prior is None:
            return []
        proxy = tot.interpolate_barycentric(Measure(prior), gamma, float(t), side="first").support
        groups = [list(etas)] if self.config.pool else [[s] for s in etas]
        out = []
        for group in groups:
            masked = np.vstack([etas[s].support for s in group])
            Q, b, cost = procrustes_align(masked, proxy, self.config.iterations)
            for s in group:
                eta_hat = Measure((etas[s].support - b) @ Q, etas[s].weights)
                pts = invert_barycentric_push(eta_hat, gamma, float(t))
                out.append(
                    AttackOutput(
                        kind="points",
                        target=s,
                        points=pts,
                        weights=np.array(etas[s].weights),
                        meta={"alignment_cost": cost, "pooled": len(group)},
                    )
                )
        return out

    def _proxy_rows(self, public: PublicInfo) -> np.ndarray | None:
        rows = public.prior
        if self.config.proxy == "candidates":
            cand = public.extra.get("candidates")
            if isinstance(cand, Mapping):
                cand = [np.asarray(v) for v in cand.values()]
                cand = np.vstack(cand) if cand else None
            rows = cand
        if rows is None:
            return None
        rows = np.asarray(rows, dtype=np.float64)
        return rows[: self.config.proxy_size] if rows.ndim == 2 and len(rows) > 1 else None
