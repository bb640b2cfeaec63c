"""Attack stage of a run: build each attack's view from the transcript, run it and its
prior-only baseline, and hand outputs plus ground truth to the scorer."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from testbed.bus import Transcript
from testbed.registry import ATTACKS
from testbed.seeding import component_rng

DELTA = 1e-5  # same delta as the run's privacy summary (testbed.runner.DELTA)

__all__ = ["run_attacks"]


def run_attacks(world, transcript: Transcript, released=None) -> list[dict[str, Any]]:
    """Run every attack of the scenario on what its observer saw; return scored rows.

    ``released``: the protocol's final estimates, which the participants learn; attacks find
    them in ``public.extra["released"]``.
    """
    sc = world.scenario
    rows: list[dict[str, Any]] = []
    if not sc.attacks:
        return rows
    from testbed.metrics import score_attack

    tm = sc.threat_model
    own = {p: d.X for p, d in world.parties.items()}
    public = world.public
    if released is not None:
        public = replace(public, extra={**public.extra, "released": dict(released)})
    view = transcript.view(tm.observer, tm.colluders, own_data=own, public=public)
    for i, spec in enumerate(sc.attacks):
        cls = ATTACKS.get(spec.name)
        attack = cls(cls.Config(**world.resolved["attacks"][i]["params"]))
        if not attack.applies_to(sc.protocol.name):
            continue  # e.g. a sweep over protocols: each attack runs where it applies
        rng = component_rng(sc.seed, "attack", i, spec.name)
        outputs = attack.run(view, public, rng)
        baseline = attack.baseline(view, public, component_rng(sc.seed, "baseline", i, spec.name))
        for out in outputs:
            if spec.target is not None and out.target != spec.target:
                continue
            base = next(
                (b for b in baseline if b.target == out.target and b.kind == out.kind), None
            )
            rows.append(
                {
                    "attack": spec.name,
                    "target": out.target,
                    "observer": tm.observer,
                    **score_attack(out, base, world),
                }
            )
            if out.kind == "scores" and world.ledger.parties():
                # the audit's empirical lower bound is shown beside the defense's claim
                rows[-1]["epsilon_claimed"] = world.ledger.epsilon(out.target, DELTA)
    return rows
