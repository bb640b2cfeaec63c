"""Stage 7: scoring — attack outputs against the ground truth.

:func:`ground_truth` builds the only record that holds the private rows, membership labels, noise
masks and privacy claims together; it is passed to :func:`testbed.scoring.metrics.score_attack` (and to
the report's evidence pictures) in this process and to nothing else.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from testbed import ot as tot
from testbed.exchange.ledger import PrivacyLedger
from testbed.measure import Measure
from testbed.run.attack import AttackRun
from testbed.run.roster import World
from testbed.scoring.evidence import leakage_evidence
from testbed.scoring.metrics import MetricError, score_attack
from testbed.scoring.results_schema import attack_row
from testbed.scoring.truth import GroundTruth, PartyTruth

__all__ = ["DELTA", "failure_row", "ground_truth", "score_runs"]

DELTA = 1e-5  # δ of every claimed ε in results.json and of the audits beside them


def ground_truth(world: World, ledger: PrivacyLedger | None = None) -> GroundTruth:
    """The scorer's record of the truth for one run (built by the driver, given to no attack)."""
    tokens = world.meta.get("dataset_meta", {}).get("tokens")
    ledger = world.ledger if ledger is None else ledger
    pool = world.public.extra.get("candidates")
    candidates = dict(pool) if isinstance(pool, dict) else {}
    membership = dict(world.meta.get("membership", {}))
    # a membership experiment the protocol carries (e.g. distillation's audit rows): labels from
    # dataset row indices; the scenario's pool (``membership:``) comes first
    for target, (rows, flags) in world.protocol.membership_truth(world.parties).items():
        if target not in membership:
            candidates[target], membership[target] = rows, np.asarray(flags, dtype=bool)
    pop = world.meta.get("population")
    return GroundTruth(
        parties={p: PartyTruth(d.X, d.y, d.source_index) for p, d in world.parties.items()},
        tokens=None if tokens is None else tuple(tokens),
        membership=membership,
        candidates=candidates,
        noise_masks=dict(world.noise_masks),
        claimed_epsilon={p: float(ledger.epsilon(p, DELTA)) for p in ledger.parties()},
        delta=DELTA,
        population={} if pop is None else dict(pop.rows),
        population_method="none" if pop is None else pop.method,
    )


def score_runs(
    runs: list[AttackRun],
    truth: GroundTruth,
    dataset: str = "",
    evidence: dict | None = None,
    audited_claims: bool = False,
    coalition: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """One results row per (attack, target) output, in attack order.

    ``coalition``: the observer and its colluders. An output aimed at one of them is dropped: the
    coalition holds those rows, so "recovering" them measures nothing (the built-in attacks never
    aim there, a plugin that guesses every party may).

    ``evidence``: when a dict, it receives the small arrays the report draws for each row.
    ``audited_claims``: put the defense's claimed ε beside every membership score (when a ledger
    recorded any mechanism).
    """
    rows: list[dict[str, Any]] = []
    for run in runs:
        if run.failure is not None:  # one row saying why, beside the other attacks' rows
            rows.append(failure_row(run))
            continue
        for out in run.outputs:
            if (run.target is not None and out.target != run.target) or out.target in coalition:
                continue
            base, base_w2 = _best_baseline(
                [b for b in run.baseline if b.target == out.target and b.kind == out.kind],
                truth,
            )
            where = f"attack {run.label or run.name}, target {out.target!r}"
            if out.kind == "scores" and (base is None or base.scores is None):
                raise MetricError(
                    f"{where}: no prior-only baseline scores for this target (the attack's "
                    "baseline() must score the same candidates; without it the baseline columns "
                    "would be missing)"
                )
            try:
                scored = score_attack(out, base, truth, baseline_w2=base_w2)
            except MetricError as exc:
                raise MetricError(f"{where}: {exc}") from exc
            row = {
                "attack": run.name,
                "label": run.label,
                "target": out.target,
                "observer": run.observer,
                "isolation": run.isolation,
                **scored,
            }
            if out.kind == "scores" and audited_claims:
                # the audit's empirical lower bound is shown beside the defense's claim
                row["epsilon_claimed"] = truth.claimed(out.target)
            rows.append(attack_row(row))  # the results schema's row, checked as it is made
            if evidence is not None:
                evidence.update(leakage_evidence(len(rows) - 1, out, base, truth, dataset))
    return rows


def _best_baseline(bases: list, truth: GroundTruth) -> tuple[Any, float | None]:
    """The baseline output to score against and, when it was computed to choose it, its W2 to
    the target's rows (None otherwise): the only one, or, when a coalition's members each make
    their own prior-only guess of a party's rows (``attacks.member_guesses``), the one closest to
    those rows in W2: the coalition is compared with its best member's prior-only attacker,
    never with a guess no member would make alone. The scorer reuses that W2 as
    ``w2_baseline`` instead of solving the same transport problem again."""
    if len(bases) <= 1 or any(b.kind != "points" for b in bases):
        return (bases[0] if bases else None), None
    target = Measure(truth.parties[bases[0].target].X)
    w2 = [tot.wasserstein(Measure(b.points, b.weights), target) for b in bases]
    best = min(range(len(bases)), key=w2.__getitem__)  # the first of equal ones, as min() took
    return bases[best], w2[best]


def failure_row(run: AttackRun) -> dict[str, Any]:
    """The results row of an attack that produced nothing: where it failed and why, in one line.
    ``target`` is the spec's target filter (None: every target)."""
    phase, reason = run.failure or ("run", "")
    return attack_row(
        {
            "attack": run.name,
            "label": run.label,
            "target": run.target,
            "observer": run.observer,
            "isolation": run.isolation,
            "failed": phase,
            "reason": reason,
        }
    )
