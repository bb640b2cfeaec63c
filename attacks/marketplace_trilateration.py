"""Marketplace trilateration on TriangleWad's multi-seller protocol (paper Sec. 3.4, eq. 11).

In the marketplace variant the buyer sends its interpolant :math:`\\eta_\\mu(t_0)` (m points it
knows) to every seller, and seller i returns the cost matrices
:math:`C_i(s_j)_{ab} = \\|\\eta_{\\nu_i}(s_j)_a - \\eta_\\mu(t_0)_b\\|^2` for the ratios
:math:`s_j` the buyer asks for. Each row of :math:`C_i(s_j)` is the list of squared distances from
one unknown point to m known anchors: with m >= d + 1 anchors in general position it pins the
point down (trilateration; a linear least-squares problem in :math:`(z, \\|z\\|^2)`). So the buyer
recovers :math:`\\eta_{\\nu_i}(s_j)` exactly, and since the barycentric interpolant is affine in
s, :math:`\\eta(s) = \\nu + s\\,(b - \\nu)`, two or more ratios give :math:`\\nu = \\eta(0)` by a
line fit per point — without knowing gamma. With a single ratio the plugin inverts the push
toward gamma instead (:func:`attacks.measure_inversion.invert_barycentric_push`).

Messages read: ``triangle_wad_marketplace.cost_matrices`` (seller to buyer, an array
``(B_s, n_i, m)`` of squared distances at the public nodes ``public.params["s_nodes"]``) with the
buyer's own ``triangle_wad_marketplace.eta_buyer`` as anchors; also the generic form
``triangle_wad.cost*`` = ``{"s": s_j, "cost": C}`` (an optional ``"metric": "euclidean"`` marks
unsquared distances) with the buyer's ``triangle_wad.eta*``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from attacks._base import Attack, AttackConfig, AttackOutput, observed
from attacks.measure_inversion import _as_measure, find_gamma, invert_barycentric_push
from testbed.exchange.bus import PublicInfo, View
from testbed.measure import Measure
from testbed.registry import ATTACKS

__all__ = [
    "MarketplaceTrilateration",
    "extrapolate_to_zero",
    "trilaterate",
]


def trilaterate(anchors: np.ndarray, sq_dists: np.ndarray) -> np.ndarray:
    """Points z (one per row of ``sq_dists``) with :math:`\\|z - a_k\\|^2 = C_k` for anchors a.

    Solves :math:`[-2a_k^\\top,\\ 1]\\,[z;\\ \\|z\\|^2] = C_k - \\|a_k\\|^2` by least squares for
    all rows at once; needs m >= d + 1 anchors not on one hyperplane.
    """
    A = np.asarray(anchors, dtype=np.float64)
    C = np.atleast_2d(np.asarray(sq_dists, dtype=np.float64))
    m, d = A.shape
    if C.shape[1] != m:
        raise ValueError(f"{C.shape[1]} distances per point for {m} anchors")
    if m < d + 1:
        raise ValueError(f"trilateration in dimension {d} needs >= {d + 1} anchors, got {m}")
    center = A.mean(axis=0)  # solving about the anchors' centroid keeps the system well scaled
    A = A - center
    M = np.hstack([-2.0 * A, np.ones((m, 1))])
    rhs = (C - np.sum(A**2, axis=1)[None, :]).T  # (m, n)
    sol, *_ = np.linalg.lstsq(M, rhs, rcond=None)
    return sol[:d].T + center


def extrapolate_to_zero(s: Sequence[float], points: Sequence[np.ndarray]) -> np.ndarray:
    """Per-point least-squares line through ``(s_j, points_j)``, evaluated at s = 0."""
    s = np.asarray(s, dtype=np.float64)
    P = np.stack([np.asarray(p, dtype=np.float64) for p in points])  # (J, n, d)
    if len(np.unique(s)) < 2:
        raise ValueError("extrapolation needs at least two distinct ratios s")
    S = np.vstack([np.ones_like(s), s]).T  # (J, 2)
    coef, *_ = np.linalg.lstsq(S, P.reshape(len(s), -1), rcond=None)
    return coef[0].reshape(P.shape[1:])


def _cost_blocks(payload, nodes) -> list[tuple[float, np.ndarray]]:
    """``(s_j, squared-distance matrix)`` pairs from either message form."""
    if isinstance(payload, Mapping) and "cost" in payload and "s" in payload:
        C = np.asarray(payload["cost"], dtype=np.float64)
        return [(float(payload["s"]), C**2 if payload.get("metric") == "euclidean" else C)]
    if isinstance(payload, np.ndarray) and payload.ndim == 3 and nodes is not None:
        if len(nodes) == payload.shape[0]:
            return [(float(s), np.asarray(C, dtype=np.float64)) for s, C in zip(nodes, payload)]
    return []


@ATTACKS.register
class MarketplaceTrilateration(Attack):
    """Buyer recovers each seller's data from the TriangleWad cost matrices it receives."""

    name = "marketplace_trilateration"
    Config = AttackConfig
    protocols = ("triangle_wad_marketplace", "triangle_wad")
    output_kinds = ("points",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        me = view.observer
        out = []
        nodes = public.params.get("s_nodes")
        by_seller: dict[str, list] = {}
        for proto in ("triangle_wad", "triangle_wad_marketplace"):
            for e in observed(view, f"{proto}.cost*"):
                if e.receiver == me and e.sender != me:
                    by_seller.setdefault(e.sender, []).append((proto, e))
        for seller, envs in by_seller.items():
            s_vals, etas = [], []
            for proto, e in envs:
                sent = [x for x in observed(view, f"{proto}.eta*") if x.sender == me]
                to_seller = [x for x in sent if x.receiver == seller] or sent
                anchors = _as_measure(to_seller[-1].payload) if to_seller else None
                if anchors is None:
                    continue
                for s, C in _cost_blocks(e.payload, nodes):
                    if C.ndim == 2 and C.shape[1] == anchors.n:
                        s_vals.append(s)
                        etas.append(trilaterate(anchors.support, C))
            if not etas:
                continue
            if len(set(s_vals)) >= 2:
                pts, how = extrapolate_to_zero(s_vals, etas), "extrapolated"
            else:
                gamma = find_gamma(view, public, "triangle_wad")
                if gamma is None:
                    pts, how = etas[0], "interpolant"
                else:
                    pts = invert_barycentric_push(Measure(etas[0]), gamma, s_vals[0])
                    how = "inverted"
            out.append(
                AttackOutput(
                    kind="points",
                    target=seller,
                    points=pts,
                    meta={"method": how, "ratios": sorted(set(s_vals))},
                )
            )
        return out
