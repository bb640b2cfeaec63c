"""Subsampling of support points: each defended measure keeps a random subset of its atoms,
weights renormalised to sum to one.

This is a heuristic, not a DP mechanism: atoms are not records, so no amplification-by-subsampling
claim follows, and the defense records no ledger event. It trades resolution of what is sent
(fewer atoms) for accuracy (a coarser measure enters the next OT solve).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from pydantic import Field, model_validator

from defenses._base import MEASURE_PROTOCOLS, Defense, DefenseConfig
from testbed.exchange.bus import Envelope
from testbed.exchange.ledger import PrivacyLedger
from testbed.measure import Measure
from testbed.registry import DEFENSES

__all__ = ["SubsampleSupport", "SubsampleSupportConfig"]


class SubsampleSupportConfig(DefenseConfig):
    fraction: float | None = Field(
        None, gt=0, le=1, description="share of atoms kept (compounds over iterative rounds)"
    )
    atoms: int | None = Field(None, gt=0, description="atoms kept (default 5 if neither is given)")

    @model_validator(mode="before")
    @classmethod
    def _default_atoms(cls, data):
        if isinstance(data, dict) and "fraction" not in data and "atoms" not in data:
            data = {**data, "atoms": 5}
        return data

    @model_validator(mode="after")
    def _one_of(self):
        if (self.fraction is None) == (self.atoms is None):
            raise ValueError("give exactly one of fraction and atoms")
        return self


def subsample_measure(m: Measure, keep: int, rng: np.random.Generator) -> Measure:
    """Keep ``keep`` atoms drawn without replacement (order preserved), renormalise weights.

    Atoms with zero weight are never kept when positive-weight atoms remain."""
    pos = np.flatnonzero(m.weights > 0)
    keep = max(1, min(keep, pos.size))
    idx = np.sort(rng.choice(pos, size=keep, replace=False))
    w = m.weights[idx]
    return Measure(m.support[idx], w / w.sum())


@DEFENSES.register
class SubsampleSupport(Defense):
    """Keep a random subset of each sent measure's atoms and renormalise (no DP claim)."""

    name = "subsample_support"
    Config = SubsampleSupportConfig
    #: it acts on measures (and distances): idle on a protocol that sends none
    protocols = MEASURE_PROTOCOLS
    #: the contract kit's fixture: FedBary's 10-atom measures, of which the default keeps 5 (on
    #: the FedWAD fixture's 5-atom measures it keeps every atom and changes nothing)
    contract_scenario = "contract_tiny_fedbary.yaml"

    def keep(self, n: int) -> int:
        if self.config.atoms is not None:
            return min(n, self.config.atoms)
        return max(1, int(round(self.config.fraction * n)))

    def on_send(
        self, env: Envelope, rng: np.random.Generator, ledger: PrivacyLedger | None
    ) -> Envelope:
        def rec(p):
            if isinstance(p, Measure):
                return subsample_measure(p, self.keep(p.n), rng)
            if isinstance(p, Mapping):
                return {k: rec(v) for k, v in p.items()}
            return p

        return self.marked(env, rec(env.payload))
