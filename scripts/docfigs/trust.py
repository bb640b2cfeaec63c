"""docs/reference/trust.md: renormalised uniform weights."""

from __future__ import annotations

import numpy as np


def trust_renormalise() -> dict[str, float]:
    """docs/reference/trust.md: of the uniform measures with n = 1...1000 atoms (weights 1/n, as
    ``Measure`` builds them), how many a second normalisation ``w / w.sum()`` changes in the last
    bits (each would have broken its transcript digest before ``Measure.restore``)."""
    from testbed.measure import Measure

    changed = 0
    for n in range(1, 1001):
        w = Measure(np.zeros((n, 1))).weights
        changed += not np.array_equal(w / w.sum(), w)
    return {"renormalised_uniform": float(changed)}
