"""Trilateration of TriangleWad marketplace cost matrices (pure functions + plugin on a
transcript that follows the message contract)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from attacks.marketplace_trilateration import (
    MarketplaceTrilateration,
    extrapolate_to_zero,
    trilaterate,
)
from testbed import ot as tot
from testbed.exchange.bus import Bus, PublicInfo
from testbed.measure import Measure
from testbed.scoring.metrics import exact_recovery_rate


@given(st.integers(0, 10_000), st.integers(1, 8), st.integers(0, 6))
@settings(max_examples=40, deadline=None)
def test_trilaterate_recovers_points(seed, d, extra):
    # Prepare: d + 1 + extra anchors in general position
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d + 1 + extra, d)) * 2
    Z = rng.normal(size=(7, d)) * 3
    # Execute
    got = trilaterate(A, tot.cost_matrix(Z, A))
    # Assert
    np.testing.assert_allclose(got, Z, atol=1e-6)


def test_extrapolate_affine_path():
    rng = np.random.default_rng(1)
    nu, b = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    s = [0.25, 0.5, 0.75]
    np.testing.assert_allclose(extrapolate_to_zero(s, [nu + x * (b - nu) for x in s]), nu)


def test_buyer_recovers_sellers_data():
    # Prepare: buyer alice sends eta_mu(t0); sellers bob, carol answer cost matrices at 3 ratios
    rng = np.random.default_rng(0)
    d = 4
    data = {"alice": rng.normal(size=(30, d)), "bob": rng.normal(1, 1, (17, d))}
    data["carol"] = rng.normal(-1, 2, (11, d))
    gamma = Measure(rng.normal(size=(6, d)))
    eta_mu = tot.interpolate_barycentric(Measure(data["alice"]), gamma, 0.37, side="first")
    bus = Bus()
    for seller in ("bob", "carol"):
        bus.send("alice", seller, "triangle_wad.eta", eta_mu)
        for s in (0.25, 0.5, 0.75):
            eta_s = tot.interpolate_barycentric(Measure(data[seller]), gamma, s, side="first")
            C = tot.cost_matrix(eta_s.support, eta_mu.support)
            bus.send(seller, "alice", "triangle_wad.cost", {"s": s, "cost": C})
    public = PublicInfo(protocol="triangle_wad", parties=("alice", "bob", "carol"), dim=d)
    # Execute
    outs = MarketplaceTrilateration().run(bus.transcript.view("alice"), public, rng)
    # Assert: every row of both sellers recovered to 1e-6; bob (a seller) learns nothing
    assert {o.target for o in outs} == {"bob", "carol"}
    for o in outs:
        assert exact_recovery_rate(o.points, data[o.target]) == 1.0
    assert MarketplaceTrilateration().run(bus.transcript.view("bob"), public, rng) == []
