"""Synthetic parties for ``testbed bench`` (seeded Gaussians; no dataset files needed)."""

from __future__ import annotations

import math

import numpy as np

from testbed.data.datasets import PartyData

__all__ = ["make_clients", "make_pair"]


def make_pair(n: int, d: int, seed: int = 0) -> dict[str, PartyData]:
    """Two clients with n points each: N(0, I_d) and N(1/sqrt(d) * 1, I_d) (W2 ~ 1 + noise)."""
    g = np.random.default_rng(seed)
    X = g.normal(0.0, 1.0, size=(n, d))
    Y = g.normal(1.0 / math.sqrt(d), 1.0, size=(n, d))
    return {"alice": PartyData("alice", X), "bob": PartyData("bob", Y)}


def make_clients(N: int, m: int, d: int, seed: int = 0, groups: int = 5) -> dict[str, PartyData]:
    """N clients with m points each in ``groups`` planted clusters: client i draws from
    N(c_{i mod groups}, I_d) and labels its rows ``i mod groups`` (for clustering protocols)."""
    g = np.random.default_rng(seed)
    centres = g.normal(0.0, 2.0, size=(groups, d))
    out = {}
    for i in range(N):
        k = i % groups
        X = g.normal(centres[k], 1.0, size=(m, d))
        out[f"client_{i}"] = PartyData(f"client_{i}", X, np.full(m, k))
    return out
