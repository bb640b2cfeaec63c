"""Hypothesis strategies for small random measures."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from testbed.measure import Measure


@st.composite
def measures(draw, min_n=1, max_n=12, d=None, uniform=None):
    n = draw(st.integers(min_n, max_n))
    dim = d if d is not None else draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dim)) * draw(st.floats(0.1, 5.0)) + draw(st.floats(-5, 5))
    uni = draw(st.booleans()) if uniform is None else uniform
    if uni:
        return Measure(X)
    w = rng.uniform(0.05, 1.0, size=n)
    return Measure(X, w / w.sum())
