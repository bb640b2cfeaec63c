"""Membership inference on measure protocols from the observed supports (our attack).

FedWAD, TriangleWad and FedBary send measures (or measures mixed with the server's) whose
support points lie near the sender's rows. The attack collects every support point (every 2-D
array of the data's dimension) in the messages the target sent that its observer saw, and scores
each public membership candidate (``public.extra["candidates"][target]``, the testbed's pool) by
how much closer it is to those points than to the public prior sample:

.. math:: s(c) = \\log\\big(\\epsilon + d(c, \\text{prior})\\big) - \\log\\big(\\epsilon + d(c, S)\\big)

(:func:`attacks.reconstruction_membership.membership_scores`; the prior term calibrates away
candidates that sit in dense regions). It needs no reconstruction step. Its baseline scores every
candidate by the prior alone (no message): chance.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from attacks._base import Attack, AttackConfig, AttackOutput, observed
from attacks._base import membership_candidates as _candidates
from attacks.reconstruction_membership import membership_scores
from testbed.exchange.bus import PublicInfo, View
from testbed.exchange.payload import iter_arrays
from testbed.registry import ATTACKS

__all__ = ["SupportMembership", "SupportMembershipConfig", "observed_supports"]


class SupportMembershipConfig(AttackConfig):
    """No parameters: the score is fixed by the observed supports and the public prior."""


def observed_supports(view: View, target: str, dim: int) -> np.ndarray | None:
    """Every row of every ``dim``-wide 2-D float array in messages ``target`` sent (seen by the
    observer or its colluders); Measure weights are skipped."""
    rows = []
    for e in observed(view):
        if e.sender != target:
            continue
        for path, a in iter_arrays(e.payload):
            if path.endswith("weights") or not isinstance(a, np.ndarray):
                continue
            if a.ndim == 2 and a.shape[1] == dim and a.shape[0] > 0 and a.dtype.kind == "f":
                rows.append(np.asarray(a, dtype=np.float64))
    if not rows:
        return None
    S = np.vstack(rows)
    S = S[np.all(np.isfinite(S), axis=1)]
    return S if S.shape[0] else None


@ATTACKS.register
class SupportMembership(Attack):
    """Membership scores of pool candidates: near an observed support point, far from the prior."""

    name = "support_membership"
    Config = SupportMembershipConfig
    protocols = ("fedwad", "triangle_wad", "fedbary")
    output_kinds = ("scores",)
    contract_scenario = "contract_tiny_membership.yaml"

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        pool = public.extra.get("candidates")
        if public.prior is None or not isinstance(pool, Mapping):
            return []
        out = []
        for t in public.parties:
            cand = _candidates(public, t)
            if cand is None or t == view.observer or t in view.colluders:
                continue
            S = observed_supports(view, t, cand.shape[1])
            if S is None:
                continue
            out.append(
                AttackOutput(
                    kind="scores",
                    target=t,
                    scores=membership_scores(cand, S, public.prior),
                    meta={"candidates": cand, "supports": int(S.shape[0])},
                )
            )
        return out
