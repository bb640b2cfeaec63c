"""The public prior: what every attacker may assume about the data without seeing any message.

Definition (used by every prior-only baseline): a Gaussian with the mean and covariance of the
pooled private data, treated as public *domain statistics* (like the mean image of a benchmark
dataset), and a public sample of it drawn with its own seed stream. It carries no row of any
party; only two moments of the pool.
"""

from __future__ import annotations

import numpy as np

__all__ = ["gaussian_prior"]


def gaussian_prior(
    X_pool: np.ndarray, rng: np.random.Generator, n: int, ridge: float = 1e-9
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, covariance (+ ``ridge`` I) of ``X_pool`` and an ``n``-row sample of that Gaussian."""
    X = np.asarray(X_pool, dtype=np.float64)
    mean = X.mean(axis=0)
    cov = np.atleast_2d(np.cov(X, rowvar=False)) if X.shape[0] > 1 else np.zeros((X.shape[1],) * 2)
    cov = cov + ridge * np.eye(X.shape[1])
    sample = rng.multivariate_normal(mean, cov, size=int(n), method="eigh")
    return mean, cov, sample
