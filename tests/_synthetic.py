"""Synthetic transcripts that follow the message contract of protocols not in this build yet
(TriangleWad, FedBary; branch issue3). Used so that their attacks run through the contract kit.
Contract (see README, "Attacks"): ``<protocol>.eta`` carries a party's interpolant toward the
public gamma as a Measure; public params carry ``t`` and gamma's ``gamma_mean``,
``gamma_scale``, ``gamma_size``, ``gamma_seed``; marketplace sellers send
``triangle_wad.cost`` mappings ``{"s": s_j, "cost": C}``."""

from __future__ import annotations

import functools

import numpy as np

from testbed.bus import SERVER, Bus, PublicInfo
from testbed.measure import Measure
from testbed.testing import PluginFixture

__all__ = ["synthetic_fixture"]


@functools.lru_cache(maxsize=4)
def synthetic_fixture(protocol: str) -> PluginFixture:
    from attacks.measure_inversion import public_gamma
    from testbed import ot as tot

    rng = np.random.default_rng(3)
    X = {"alice": rng.normal(size=(12, 3)), "bob": rng.normal(2.0, 1.0, size=(9, 3))}
    params = {"t": 0.3, "gamma_mean": 0.0, "gamma_scale": 1.0, "gamma_size": 4, "gamma_seed": 11}
    gamma = public_gamma(params, 3)
    bus = Bus()
    receiver = SERVER if protocol == "fedbary" else "bob"
    eta_a = tot.interpolate_barycentric(Measure(X["alice"]), gamma, params["t"], side="first")
    bus.send("alice", receiver, f"{protocol}.eta", eta_a)
    eta_b = tot.interpolate_barycentric(Measure(X["bob"]), gamma, params["t"], side="first")
    if protocol == "triangle_wad":
        for s in (0.25, 0.5, 0.75):
            eta_s = tot.interpolate_barycentric(Measure(X["bob"]), gamma, s, side="first")
            C = tot.cost_matrix(eta_s.support, eta_a.support)
            bus.send("bob", "alice", "triangle_wad.cost", {"s": s, "cost": C})
    else:
        bus.send("bob", receiver, f"{protocol}.eta", eta_b)
    prior = rng.normal(1.0, 1.5, size=(12, 3))
    public = PublicInfo(
        protocol=protocol,
        params=params,
        parties=("alice", "bob"),
        dim=3,
        prior=prior,
        extra={"sizes": {"alice": 12, "bob": 9}, "released": {"wasserstein": 1.0}},
    )
    return PluginFixture(
        protocol=protocol,
        transcript=bus.transcript,
        public=public,
        own_data=X,
        observers=(SERVER, "alice", "bob", "eavesdropper"),
    )
