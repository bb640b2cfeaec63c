"""Server-side reconstruction of FedBary clients from two consecutive rounds (our attack).

In round :math:`k` client :math:`i` sends :math:`\\gamma_i^{(k)}`, the server answers
:math:`\\eta_{Q_i}^{(k)}` and the client sets (barycentric interpolation, FedWAD eq. 10)

.. math:: \\eta_{P_i} = \\mathrm{Interp}(P_i, \\gamma_i^{(k)}, t), \\qquad
          \\gamma_i^{(k+1)} = \\mathrm{Interp}(\\eta_{P_i}, \\eta_{Q_i}^{(k)}, t),

which it sends in round :math:`k+1` (or in ``fedbary.final``). Both steps are barycentric pushes
along an optimal plan, so the interpolant stays matched to its anchor by the identity pairing
and each step is undone by :func:`attacks.measure_inversion.invert_barycentric_push`
(papers/README.md, fact 5):

1. :math:`\\hat\\eta_{P_i} = \\mathrm{inv}(\\gamma_i^{(k+1)}, \\eta_{Q_i}^{(k)}, t)` — the server
   knows both (it received one and sent the other);
2. :math:`\\hat P_i = \\mathrm{inv}(\\hat\\eta_{P_i}, \\gamma_i^{(k)}, t)`.

When the client holds at most :math:`S` rows (``support_size``) the interpolant sits on the
client's rows and step 2 returns them (exactly, for every row whose mass the plans do not split);
otherwise it returns the :math:`S` barycentric images of :math:`\\gamma_i^{(k)}`'s atoms in
:math:`P_i` — local means of the client's rows. ``rounds: all`` pools the reconstructions of every
consecutive pair of rounds (different quantisations of the same rows). Needs a public numeric
``t`` and ``interpolation: barycentric``; with ``exact`` interpolation the supports grow and this
attack returns nothing (say so in the coverage table).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np
from pydantic import Field

from attacks._base import Attack, AttackConfig, AttackOutput, observed
from attacks.measure_inversion import invert_barycentric_push
from testbed.exchange.bus import SERVER, PublicInfo, View
from testbed.measure import Measure
from testbed.registry import ATTACKS

__all__ = ["FedBaryInversion", "FedBaryInversionConfig", "invert_fedbary_round"]


def invert_fedbary_round(
    gamma_k: Measure, eta_q: Measure, gamma_next: Measure, t: float
) -> np.ndarray:
    """Rows of the client's data (or its local means) from one round's three measures."""
    eta_p = invert_barycentric_push(gamma_next, eta_q, t)
    return invert_barycentric_push(Measure(eta_p, gamma_next.weights), gamma_k, t)


class FedBaryInversionConfig(AttackConfig):
    rounds: Literal["last", "all"] = Field(
        "last", description="invert the last pair of rounds, or pool every pair"
    )


def _gamma(env) -> Measure | None:
    p = env.payload
    if isinstance(p, Mapping) and isinstance(p.get("gamma"), Measure):
        return p["gamma"]
    return None


@ATTACKS.register
class FedBaryInversion(Attack):
    """Server inverts FedBary's gamma_i(k+1) through eta_Q(k) and gamma_i(k): the client's rows."""

    name = "fedbary_inversion"
    Config = FedBaryInversionConfig
    protocols = ("fedbary",)
    output_kinds = ("points",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        t = public.params.get("t")
        if public.params.get("interpolation", "barycentric") != "barycentric":
            return []
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 < t < 1:
            return []
        if view.observer != SERVER and SERVER not in view.colluders:
            return []  # only the server holds every client's gamma and the eta_Q it sent
        gammas: dict[str, dict[int, Measure]] = {}
        for e in observed(view, "fedbary.gamma") + observed(view, "fedbary.final"):
            g = _gamma(e)
            if g is not None and e.receiver == SERVER:
                gammas.setdefault(e.sender, {})[e.round] = g
        etas: dict[str, dict[int, Measure]] = {}
        for e in observed(view, "fedbary.eta_q"):
            if e.sender == SERVER and isinstance(e.payload, Measure):
                etas.setdefault(e.receiver, {})[e.round] = e.payload
        out = []
        for client in sorted(gammas):
            if client not in public.parties:
                continue
            ks = sorted(
                k for k in gammas[client] if k + 1 in gammas[client] and k in etas.get(client, {})
            )
            if self.config.rounds == "last":
                ks = ks[-1:]
            parts = []
            for k in ks:
                g, q, nxt = gammas[client][k], etas[client][k], gammas[client][k + 1]
                if not (np.all(np.isfinite(g.support)) and np.all(np.isfinite(q.support))):
                    continue
                if not np.all(np.isfinite(nxt.support)):
                    continue
                parts.append(invert_fedbary_round(g, q, nxt, float(t)))
            if parts:
                out.append(
                    AttackOutput(
                        kind="points",
                        target=client,
                        points=np.vstack(parts),
                        meta={"rounds": ks},
                    )
                )
        return out
