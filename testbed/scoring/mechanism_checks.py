"""The statistics of the mechanism audit (:mod:`testbed.run.audit_mechanism`): pure functions of
the values a release had before and after the defenses, in trials the audit drove itself.

Each test is one-sided or two-sided at a level the caller gives (the audit splits its α over
every test it makes, Bonferroni), and each says what it could have detected (its power), so a
passed test reads "holds, and would have caught …", never a bare "no problem found".

- :func:`noise_scale_test`: is the noise actually added at a field at least the σ the ledger was
  told? Reads the positive differences post − pre, which are the noise itself even where a
  mechanism post-processes (a distance clipped at 0 leaves only non-positive differences):
  half-normal, Σ x² / σ² ~ χ²(k), and k ~ Binomial(N, ½), under a correct mechanism.
- :func:`correlation_z`: are two streams of noise independent? The self-normalised sum
  Σ aₖbₖ / √Σ aₖ²bₖ² is ≈ N(0, 1) for independent zero-mean noise, whatever each σ.
- :func:`gdp_mu`: the μ of the Gaussian mechanism that a measured shift between neighbouring
  inputs and a measured noise scale make: ‖shift‖ / σ (Dong, Roth and Su 2022).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = [
    "NoiseScale",
    "correlation_z",
    "correlation_pvalue",
    "noise_scale_test",
]


@dataclass(frozen=True)
class NoiseScale:
    """The noise measured at one field against the σ charged for it."""

    charged: float  # σ the ledger was told
    measured: float  # √(Σx²/k) over the k positive differences
    upper: float  # one-sided upper confidence bound on the true σ (at 1 - level/2)
    samples: int  # k, the positive differences
    p_value: float  # P(χ²(N) <= Σx²/σ²): small = less noise than charged
    detectable: float  # the shortfall (1 - measured/charged) this test flags at its level

    def short(self, level: float) -> bool:
        return self.p_value < level


def noise_scale_test(diffs: np.ndarray, charged: float, level: float) -> NoiseScale:
    """One-sided test that the noise in ``diffs`` (post − pre, every coordinate of every trial
    at one field) has standard deviation at least ``charged``. Two statistics, each at half the
    level: the positive differences, which are the noise itself even where a mechanism clips
    its output at 0 (Σ x² / σ² ~ χ²(k) under a symmetric Gaussian null), and their count, which
    is Binomial(N, ½) under any symmetric noise (a release left without noise has none)."""
    x = np.asarray(diffs, dtype=np.float64).ravel()
    pos = x[x > 0]
    n = int(pos.size)
    p_count = float(stats.binom.cdf(n, x.size, 0.5)) if x.size else 1.0
    if n == 0:
        return NoiseScale(charged, 0.0, 0.0, 0, min(1.0, 2 * p_count), 1.0)
    ss = float(np.sum(pos * pos))
    stat = ss / charged**2 if charged > 0 else np.inf
    p = min(1.0, 2 * min(float(stats.chi2.cdf(stat, n)), p_count))
    measured = (ss / n) ** 0.5
    q = float(stats.chi2.ppf(level / 2, n))
    upper = (ss / q) ** 0.5 if q > 0 else np.inf
    return NoiseScale(charged, measured, upper, n, p, 1.0 - (q / n) ** 0.5)


def correlation_z(a: np.ndarray, b: np.ndarray) -> float:
    """Self-normalised cross product of two equally long noise streams: ≈ N(0, 1) when they are
    independent and zero-mean (0 when every product is 0)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    p = a * b
    den = float(np.sqrt(np.sum(p * p)))
    return float(np.sum(p) / den) if den > 0 else 0.0


def correlation_pvalue(z: float) -> float:
    """Two-sided p-value of :func:`correlation_z`."""
    return float(2.0 * stats.norm.sf(abs(z)))
