"""The naive reconstruction every protocol is checked against (our attack, any protocol).

Guess each target's data as every support point it put on the wire: every row of every 2-D float
array of the data's width in the messages the target sent that the observer (or a colluder) saw
(:func:`attacks.support_membership.observed_supports`; Measure weights skipped). It reads no
protocol-specific structure, so it applies to every protocol, including third-party ones, and is
the first attack in a new protocol's scorecard: a protocol that sends raw or lightly perturbed
rows gets leakage near 1 here, one that sends only aggregates gets no output. Baseline: the
prior-only guess (the public prior sample, or the observer's own rows).
"""

from __future__ import annotations

import numpy as np

from attacks._base import Attack, AttackConfig, AttackOutput, _targets
from attacks.support_membership import observed_supports
from testbed.registry import ATTACKS

__all__ = ["SentRows", "SentRowsConfig"]


class SentRowsConfig(AttackConfig):
    """No parameters."""


@ATTACKS.register
class SentRows(Attack):
    """Guess a party's rows as every data-width row it sent the observer (any protocol)."""

    name = "sent_rows"
    Config = SentRowsConfig
    protocols = ("*",)
    output_kinds = ("points",)

    def run(self, view, public, rng: np.random.Generator) -> list[AttackOutput]:
        out = []
        for target in _targets(view, public):
            rows = observed_supports(view, target, public.dim)
            if rows is not None:
                out.append(AttackOutput(kind="points", target=target, points=rows))
        return out
