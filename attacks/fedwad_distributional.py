"""Distributional attack on FedWAD (TriangleWad paper, Sec. 3.2 and App. D.1).

A curious client holding :math:`\\mu` knows :math:`\\mu`, the final iterate :math:`\\xi^{(K)}` the
server sent it, its own distance :math:`W(\\mu, \\xi^{(K)})` and the released estimate
:math:`\\hat W \\approx W(\\mu, \\nu)`. Since :math:`\\mu, \\xi^{(K)}, \\nu` lie (nearly) on one
geodesic, :math:`\\nu` is pinned down. Two ways to find it:

``method="optimisation"`` (the paper's attack): learn :math:`\\hat\\nu` (as many rows as the target
holds, ``public.extra["sizes"]``) by gradient descent on

.. math:: \\big(W(\\mu,\\hat\\nu) - \\hat W\\big)^2 + \\big(W(\\hat\\nu,\\xi^{(K)})
          - (\\hat W - W(\\mu,\\xi^{(K)}))\\big)^2

with POT's differentiable ``ot.emd2`` on torch tensors (Adam with cosine decay; initialised at
atoms of :math:`\\xi^{(K)}` plus small noise — the paper does not say how it initialises). The
result depends on the start (on the 2-D toy W(ν̂,ν)/W(μ,ν) = 0.051–0.085 over 5 starts); the final
loss, which the attacker can compute, ranks the starts well, so ``restarts`` > 1 keeps the
start with the lowest loss.

``method="geodesic"`` (papers/README.md, fact 5): extrapolate along the geodesic from each
:math:`x_i` through its barycentric image :math:`b_i` in :math:`\\xi^{(K)}`:
:math:`\\hat\\nu_i = x_i + (b_i - x_i)/\\tau`, :math:`\\tau = W(\\mu,\\xi^{(K)})/\\hat W`.

What each observer sees (FedWAD message kinds): a client sees ``fedwad.xi`` / ``fedwad.xi_final``
addressed to it and its own ``fedwad.xi_mu|xi_nu`` and ``fedwad.distance``; it learns
:math:`\\hat W` from ``public.extra["released"]["wasserstein"]`` (the released result). The
**server** sees both clients' interpolants; with a fixed public ``t`` and ``S`` smaller than the
client's data, the last interpolant's atoms are :math:`(1-t) B_j + t\\,\\xi^{(K-1)}_j` where
:math:`B_j` is the barycentric image of :math:`\\xi^{(K-1)}_j` in the client's data, so the server
inverts them exactly: :math:`B_j = (\\eta_j - t\\,\\xi_j)/(1-t)` — an S-point quantisation of the
client's data (``method`` does not apply). With random t or S >= n it returns the last
interpolant as is.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from attacks._base import Attack, AttackConfig, AttackOutput, _targets
from testbed import ot as tot
from testbed.exchange.bus import SERVER, PublicInfo, View
from testbed.measure import Measure
from testbed.registry import ATTACKS

__all__ = [
    "FedWADDistributional",
    "FedWADDistributionalConfig",
    "distributional_optimisation",
    "geodesic_extrapolation",
    "invert_interpolant",
]


def geodesic_extrapolation(mu: Measure, xi: Measure, w_hat: float) -> np.ndarray:
    """:math:`\\hat\\nu_i = x_i + (b_i - x_i)/\\tau`, :math:`b = \\mathrm{diag}(1/a) P Y`,
    :math:`\\tau = W(\\mu,\\xi)/\\hat W` (papers/README.md, fact 5). Returns one row per atom of mu."""
    P, cost = tot.plan(mu, xi)
    b = tot.barycentric_map(P, mu.weights, xi.support)
    tau = np.sqrt(cost) / w_hat if w_hat > 0 else 1.0
    tau = tau if tau > 0 else 1.0
    return mu.support + (b - mu.support) / tau


def distributional_optimisation(
    mu: Measure,
    xi: Measure,
    w_hat: float,
    n: int,
    rng: np.random.Generator,
    steps: int = 300,
    lr: float = 0.05,
    init_noise: float = 0.1,
) -> tuple[np.ndarray, list[float]]:
    """The paper's optimisation attack; returns :math:`\\hat\\nu` (n x d) and the loss history."""
    import torch  # torch: the distributional attack only

    ot = tot.pot_on_torch()

    w_mu_xi = tot.wasserstein(mu, xi)
    target_far = float(w_hat)
    target_near = max(float(w_hat) - w_mu_xi, 0.0)
    idx = rng.choice(xi.n, size=n, p=xi.weights)
    scale = init_noise * float(np.sqrt(np.mean(np.var(xi.support, axis=0))) + 1e-12)
    init = xi.support[idx] + scale * rng.standard_normal((n, xi.d))
    dt = torch.float64
    X = torch.tensor(mu.support, dtype=dt)
    a = torch.tensor(mu.weights, dtype=dt)
    Y = torch.tensor(xi.support, dtype=dt)
    b = torch.tensor(xi.weights, dtype=dt)
    u = torch.full((n,), 1.0 / n, dtype=dt)
    Z = torch.tensor(init, dtype=dt, requires_grad=True)
    opt = torch.optim.Adam([Z], lr=lr)
    # cosine decay to lr/100 damps the oscillation of Adam around the constraint surface
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=lr / 100)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        w1 = torch.sqrt(ot.emd2(a, u, ot.dist(X, Z), numItermax=tot.NUM_ITERMAX) + 1e-12)
        w2 = torch.sqrt(ot.emd2(u, b, ot.dist(Z, Y), numItermax=tot.NUM_ITERMAX) + 1e-12)
        loss = (w1 - target_far) ** 2 + (w2 - target_near) ** 2
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return Z.detach().numpy().copy(), losses


def invert_interpolant(eta: np.ndarray, anchor: np.ndarray, t: float) -> np.ndarray:
    """Undo a barycentric interpolant built on the anchor's side: :math:`(\\eta - t\\,y)/(1-t)`."""
    return (np.asarray(eta) - t * np.asarray(anchor)) / (1.0 - t)


class FedWADDistributionalConfig(AttackConfig):
    method: Literal["geodesic", "optimisation"] = Field(
        "geodesic", description="client attack: fact-5 extrapolation or the paper's optimisation"
    )
    steps: int = Field(300, gt=0, description="optimisation: Adam steps")
    restarts: int = Field(
        1, gt=0, description="optimisation: random restarts; the lowest final loss is kept"
    )
    lr: float = Field(0.05, gt=0, description="optimisation: Adam learning rate")


@ATTACKS.register
class FedWADDistributional(Attack):
    """Recover the other client's distribution from FedWAD's xi^K and the released W (paper Sec. 3.2)."""

    name = "fedwad_distributional"
    Config = FedWADDistributionalConfig
    protocols = ("fedwad",)
    output_kinds = ("points",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        if view.observer == SERVER:
            return self._server(view, public)
        return self._client(view, public, rng)

    # -- a curious client
    def _client(self, view, public, rng):
        me = view.observer
        if me not in view.own_data:
            return []
        w_hat = public.extra.get("released", {}).get("wasserstein")
        finals = view.messages("fedwad.xi_final", sender=SERVER, receiver=me)
        if w_hat is None or not finals:
            return []
        xi = finals[-1].payload
        mu = Measure(np.asarray(view.own_data[me]))
        out = []
        for target in _targets(view, public):
            if self.config.method == "geodesic":
                pts, meta = geodesic_extrapolation(mu, xi, float(w_hat)), {}
            else:
                n = int(public.extra.get("sizes", {}).get(target, mu.n))
                best = None
                for sub in rng.spawn(self.config.restarts):
                    pts, losses = distributional_optimisation(
                        mu, xi, float(w_hat), n, sub, self.config.steps, self.config.lr
                    )
                    if best is None or losses[-1] < best[1]:
                        best = (pts, losses[-1])
                pts, meta = best[0], {"final_loss": best[1]}
            out.append(
                AttackOutput(
                    kind="points",
                    target=target,
                    points=pts,
                    meta={"method": self.config.method, **meta},
                )
            )
        return out

    # -- the server
    def _server(self, view, public):
        t = public.params.get("t")
        out = []
        for kind in ("fedwad.xi_mu", "fedwad.xi_nu"):
            sent = view.messages(kind, receiver=SERVER)
            if not sent:
                continue
            last = sent[-1]
            prev = [
                e
                for e in view.messages("fedwad.xi", sender=SERVER, receiver=last.sender)
                if e.round == last.round
            ]
            eta = last.payload
            if isinstance(t, float) and prev and prev[-1].payload.n == eta.n:
                pts = invert_interpolant(eta.support, prev[-1].payload.support, t)
                method = "server_inversion"
            else:
                pts, method = np.array(eta.support), "raw_interpolant"
            out.append(
                AttackOutput(
                    kind="points",
                    target=last.sender,
                    points=pts,
                    weights=np.array(eta.weights),
                    meta={"method": method},
                )
            )
        return out
