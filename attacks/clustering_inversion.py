"""What the server of ``fedwad_clustering`` learns about each client (our attack).

The server runs FedWAD with every pair of clients. In each run a client's interpolant
``fedwad.xi_mu|xi_nu`` answers the server's ``fedwad.xi`` of the same round; with a public fixed
``t`` and barycentric interpolation on the server's side (support S smaller than the client's
data) its atoms are :math:`(1-t)B_j + t\\,\\xi_j`, :math:`B_j` the barycentric image of
:math:`\\xi_j` in the client's rows, which the server inverts exactly
(:func:`attacks.fedwad_distributional.invert_interpolant`, as for one FedWAD run). A client takes
part in N − 1 runs, each with another :math:`\\xi`: the server pools the N − 1 last-round
inversions — N − 1 different S-point quantisations of the same rows, a finer picture than one
FedWAD run gives. (The distance matrix itself, and the clustering, are the protocol's output:
the server learns who resembles whom by design.)

With random ``t`` or ``S`` not smaller than the client's data the interpolant is kept as is
(``method: raw_interpolant``).
"""

from __future__ import annotations

import numpy as np

from attacks._base import Attack, AttackConfig, AttackOutput, observed
from attacks.fedwad_distributional import invert_interpolant
from testbed.exchange.bus import SERVER, PublicInfo, View
from testbed.measure import Measure
from testbed.registry import ATTACKS

__all__ = ["ClusteringInversion"]


@ATTACKS.register
class ClusteringInversion(Attack):
    """Server pools the inversions of a client's FedWAD interpolants over all its pairs."""

    name = "clustering_inversion"
    Config = AttackConfig
    protocols = ("fedwad_clustering",)
    output_kinds = ("points",)

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        if view.observer != SERVER and SERVER not in view.colluders:
            return []
        fw = public.params.get("fedwad", {}) or {}
        t = fw.get("t", 0.5)
        fixed_t = isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t < 1
        xis = [e for e in observed(view, "fedwad.xi") if e.sender == SERVER]
        # the last interpolant of each client in each run: runs are sequential, so a client's
        # interpolants of one run end where the next run's round 1 starts
        runs: dict[str, list] = {}
        for e in observed(view, "fedwad.xi_[mn]u"):
            if e.receiver != SERVER or e.sender not in public.parties:
                continue
            seq = runs.setdefault(e.sender, [])
            if seq and e.round > seq[-1].round:
                seq[-1] = e
            else:
                seq.append(e)
        out = []
        methods = set()
        for client in sorted(runs):
            parts = []
            for e in runs[client]:
                eta = e.payload
                if not isinstance(eta, Measure) or not np.all(np.isfinite(eta.support)):
                    continue
                prev = [
                    x for x in xis if x.receiver == client and x.round == e.round and x.seq < e.seq
                ]
                anchor = prev[-1].payload if prev else None
                if fixed_t and isinstance(anchor, Measure) and anchor.n == eta.n:
                    if np.all(np.isfinite(anchor.support)):
                        parts.append(invert_interpolant(eta.support, anchor.support, float(t)))
                        methods.add("server_inversion")
                        continue
                parts.append(np.array(eta.support))
                methods.add("raw_interpolant")
            if parts:
                out.append(
                    AttackOutput(
                        kind="points",
                        target=client,
                        points=np.vstack(parts),
                        meta={"method": "+".join(sorted(methods)), "runs": len(parts)},
                    )
                )
        return out
