"""``testbed audit SCENARIO``: the canary distinguishing game, an audited ε lower bound
against the claimed ε."""

from __future__ import annotations

from testbed.cli._common import load_checked, table
from testbed.errors import TestbedError
from testbed.run import execute
from testbed.run.audit import AUDIT_METHOD, canary_audit

HEADER = [
    "party",
    "claimed ε",
    "audited ε ≥",
    "claimed μ",
    "audited μ ≥",
    "ε(μ≥)",
    "TPR",
    "FPR",
    "status",
]


def run(args) -> int:
    sc = load_checked(args)
    if sc.is_sweep:
        raise TestbedError(
            f"{args.scenario}: audit takes a single-run scenario (remove sweep/seeds)"
        )
    world = execute(sc, until="world").world
    parties = args.party or [p for p in world.parties][:2]
    rows = []
    for party in parties:
        r = canary_audit(world, party, trials=args.trials, delta=args.delta)
        rows.append(
            [
                party,
                f"{r.claimed_epsilon:.4g}",
                f"{r.audited_epsilon:.4g}",
                "-" if r.claimed_mu is None else f"{r.claimed_mu:.4g}",
                f"{r.mu_lower:.4g}",
                f"{r.epsilon_gdp:.4g}",
                f"{r.tpr:.3f}",
                f"{r.fpr:.3f}",
                "consistent" if r.consistent else "VIOLATION",
            ]
        )
    print(f"{sc.name}: canary audit, {args.trials} trials per world, delta {args.delta:g}")
    print(table(rows, HEADER))
    print(f"method: {AUDIT_METHOD} (c = 0.95)")
    return 0
