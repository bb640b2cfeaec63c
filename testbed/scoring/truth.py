"""Ground truth: what only the scorer may see.

The scorer turns an attack's output into leakage numbers by comparing it with the truth: the
target's private rows, labels and document tokens, membership labels of candidate rows, noise
masks, and the privacy claims to put the audit beside. This record is built by the driver after
the protocol ran and is handed to :func:`testbed.scoring.metrics.score_attack` and nothing else; attacks
run in their own process (:mod:`testbed.sandbox.isolation`) and never receive it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

__all__ = ["GroundTruth", "PartyTruth"]


@dataclass(frozen=True)
class PartyTruth:
    """One party's private data, as the scorer compares against it."""

    X: np.ndarray
    y: np.ndarray | None = None
    source_index: np.ndarray | None = None


@dataclass(frozen=True)
class GroundTruth:
    """Everything the scorer compares attack outputs with.

    parties : party -> its private rows (and labels, and dataset row indices for text)
    tokens : one token per dataset row (text datasets), else None
    membership : party -> membership labels of the candidate rows the attacks were given
    candidates : party -> the candidate pool's rows those labels belong to (scenario membership:)
    noise_masks : party -> which of its rows were corrupted (detection scoring)
    claimed_epsilon : party -> ε claimed by the privacy ledger at ``delta``
    population : party -> rows of the same distribution that no party holds
        (:mod:`testbed.data.population`); ``population_method`` says where they come from
    """

    parties: Mapping[str, PartyTruth]
    tokens: tuple[str, ...] | None = None
    membership: Mapping[str, np.ndarray] = field(default_factory=dict)
    candidates: Mapping[str, np.ndarray] = field(default_factory=dict)
    noise_masks: Mapping[str, np.ndarray] = field(default_factory=dict)
    claimed_epsilon: Mapping[str, float] = field(default_factory=dict)
    delta: float = 1e-5
    population: Mapping[str, np.ndarray] = field(default_factory=dict)
    population_method: str = "none"

    def claimed(self, party: str) -> float:
        return float(self.claimed_epsilon.get(party, math.inf))
