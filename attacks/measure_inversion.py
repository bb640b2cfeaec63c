"""Invert the barycentric push of TriangleWad (and FedBary) interpolating measures.

A party sends :math:`\\eta = \\{(1-t)x_i + t\\,b_i\\}` with weights :math:`a`, where
:math:`b = \\mathrm{diag}(1/a)\\,\\pi^*(\\mu,\\gamma)\\,\\gamma` is the barycentric image of its data
in the shared measure :math:`\\gamma` (TriangleWad eq. 8; FedBary pushes toward the barycenter).
The paper (Sec. 4.2.1) argues the plan :math:`\\pi^*(\\mu,\\gamma)` is private and hard to
approximate. It is not: the geodesic from :math:`x_i` to :math:`b_i` keeps the plan optimal, so
projecting :math:`\\eta` itself onto :math:`\\gamma` gives back :math:`\\bar\\gamma \\approx b`
exactly for every point whose mass the plan does not split (papers/README.md, fact 5), and

.. math:: \\hat\\mu_i = (\\eta_i - t\\,\\bar\\gamma_i)/(1-t).

When ``t`` is hidden (TriangleWad's unknown-t variant) it is estimated: the value on a grid whose
reconstruction's Gaussian moments are closest (Bures–Wasserstein) to the public prior's.

Messages read (``triangle_wad`` and ``triangle_wad_marketplace``):

- ``<protocol>.eta*`` envelopes (``triangle_wad.eta`` to the server, ``triangle_wad.eta_buyer``
  and ``triangle_wad_marketplace.eta_buyer`` to a seller) whose payload is a Measure, or a
  mapping with a Measure under ``"eta"``: the interpolant of the *sender's* data;
- gamma: a ``<protocol>.gamma*`` envelope the observer saw (a Measure, or the ``gamma_params``
  announcement ``{seed, support_size, mean, std, dim}``), else ``public.extra["gamma"]``, else
  regenerated from public params (``support_size``, ``gamma_mean``, ``gamma_std``,
  ``gamma_seed``) exactly as ``protocols.triangle_wad.shared_gamma`` does;
- ``t``: ``public.params["t"]`` when it is a number (or the envelope meta ``t``), else estimated
  (the unknown-t settings drop ``t`` from the public params).

FedBary's messages are FedWAD-style nested interpolants, not a single push toward a known
measure; this attack does not apply to them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from pydantic import Field

from attacks._base import Attack, AttackConfig, AttackOutput, observed
from testbed import ot as tot
from testbed.exchange.bus import PublicInfo, View
from testbed.measure import Measure
from testbed.registry import ATTACKS

__all__ = [
    "MeasureInversion",
    "MeasureInversionConfig",
    "estimate_t",
    "invert_barycentric_push",
    "public_gamma",
]

PROTOCOLS = ("triangle_wad", "triangle_wad_marketplace")


def invert_barycentric_push(eta: Measure, gamma: Measure, t: float) -> np.ndarray:
    """:math:`\\hat\\mu = (\\eta - t\\,\\bar\\gamma)/(1-t)`, :math:`\\bar\\gamma` = barycentric
    projection of eta onto gamma (``diag(1/a) P gamma``). One row per atom of eta."""
    if not 0.0 <= t < 1.0:
        raise ValueError(f"t must be in [0, 1), got {t}")
    P, _ = tot.plan(eta, gamma)
    gbar = tot.barycentric_map(P, eta.weights, gamma.support)
    return (eta.support - t * gbar) / (1.0 - t)


def estimate_t(
    eta: Measure,
    gamma: Measure,
    prior_mean: np.ndarray,
    prior_cov: np.ndarray,
    grid: np.ndarray | None = None,
) -> float:
    """t on ``grid`` whose reconstruction's mean and covariance are closest in Bures–Wasserstein
    distance to the public prior's (the projection is computed once: it does not depend on t)."""
    grid = np.linspace(0.01, 0.95, 189) if grid is None else np.asarray(grid, dtype=float)
    P, _ = tot.plan(eta, gamma)
    gbar = tot.barycentric_map(P, eta.weights, gamma.support)
    ridge = 1e-6 * np.eye(eta.d)  # constant features (e.g. blank digit pixels) are singular
    best, best_t = np.inf, float(grid[0])
    for t in grid:
        rec = (eta.support - t * gbar) / (1.0 - t)
        m = eta.weights @ rec
        c = np.atleast_2d(np.cov(rec, rowvar=False, aweights=eta.weights)) + ridge
        with np.errstate(invalid="ignore"):
            d = tot.gaussian_w2(m, c, prior_mean, prior_cov + ridge)
        if d < best:
            best, best_t = d, float(t)
    return best_t


def public_gamma(params: Mapping, d: int) -> Measure | None:
    """gamma regenerated from public params, or None when its seed is not public.

    Keys as in TriangleWad's config (``support_size``, ``gamma_mean``, ``gamma_std``,
    ``gamma_seed``) or its ``gamma_params`` announcement (``support_size``, ``mean``, ``std``,
    ``seed``); ``gamma_size``/``gamma_scale`` are accepted as aliases. Same generator as
    :func:`protocols.triangle_wad.shared_gamma`.
    """
    seed = params.get("gamma_seed", params.get("seed"))
    k = params.get("support_size", params.get("gamma_size"))
    if seed is None or k is None:
        return None
    mean = params.get("gamma_mean", params.get("mean", 0.0))
    std = params.get("gamma_std", params.get("std", params.get("gamma_scale", 1.0)))
    g = np.random.default_rng(int(seed)).normal(float(mean), float(std), size=(int(k), int(d)))
    return Measure(g)


def _as_measure(p) -> Measure | None:
    if isinstance(p, Measure):
        return p
    if isinstance(p, Mapping):
        for key in ("eta", "gamma", "barycenter", "measure"):
            if isinstance(p.get(key), Measure):
                return p[key]
    if isinstance(p, np.ndarray) and p.ndim == 2:
        return Measure(p)
    return None


def find_gamma(view: View, public: PublicInfo, protocol: str) -> Measure | None:
    """gamma from the view (a Measure, or TriangleWad's ``gamma_params`` announcement of its
    seed and shape, with the public config's mean and std), public extra, or public params, in
    that order."""
    for pattern in (f"{protocol}.gamma*", f"{protocol}.barycenter*"):
        for e in reversed(observed(view, pattern)):
            m = _as_measure(e.payload)
            if m is None and isinstance(e.payload, Mapping) and public.dim:
                # the announced seed and shape; mean and std from the public config
                announced = {**public.params, **e.payload}
                announced["gamma_seed"] = e.payload.get("seed", announced.get("gamma_seed"))
                m = public_gamma(announced, int(e.payload.get("dim", public.dim)))
            if m is not None:
                return m
    g = public.extra.get("gamma")
    if g is not None:
        return _as_measure(np.asarray(g) if not isinstance(g, Measure) else g)
    return public_gamma(public.params, public.dim) if public.dim else None


class MeasureInversionConfig(AttackConfig):
    t: float | None = Field(
        None, ge=0.0, lt=1.0, description="override t (default: public params, else estimated)"
    )


@ATTACKS.register
class MeasureInversion(Attack):
    """Invert TriangleWad/FedBary interpolants: mu_hat = (eta - t gamma_bar)/(1 - t)."""

    name = "measure_inversion"
    Config = MeasureInversionConfig
    protocols = PROTOCOLS
    output_kinds = ("points",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        protocol = public.protocol if public.protocol in PROTOCOLS else None
        out = []
        me = {view.observer, *view.colluders}
        for proto in [protocol] if protocol else list(PROTOCOLS):
            gamma = None
            latest: dict[str, object] = {}
            for e in observed(view, f"{proto}.eta*"):
                if e.sender in me or e.sender not in public.parties:
                    continue
                latest[e.sender] = e  # the last eta each party sent
            for sender, e in latest.items():
                eta = _as_measure(e.payload)
                if eta is None:
                    continue
                gamma = gamma or find_gamma(view, public, proto)
                if gamma is None or gamma.d != eta.d:
                    continue
                t, how = self._t(e, public, eta, gamma)
                pts = invert_barycentric_push(eta, gamma, t)
                out.append(
                    AttackOutput(
                        kind="points",
                        target=sender,
                        points=pts,
                        weights=np.array(eta.weights),
                        meta={"t": t, "t_source": how, "kind": e.kind},
                    )
                )
        return out

    def _t(self, env, public, eta, gamma) -> tuple[float, str]:
        if self.config.t is not None:
            return float(self.config.t), "config"
        for src in (env.meta.get("t"), public.params.get("t")):
            if isinstance(src, (int, float)) and not isinstance(src, bool) and 0 <= src < 1:
                return float(src), "public"
        mean = public.extra.get("prior_mean")
        cov = public.extra.get("prior_cov")
        if mean is None and public.prior is not None:
            mean, cov = public.prior.mean(axis=0), np.cov(public.prior, rowvar=False)
        if mean is None:
            return 0.5, "default"
        return estimate_t(eta, gamma, np.asarray(mean), np.asarray(cov)), "estimated"
