"""The run pipeline, one typed stage per module (DESIGN.md, "One data path, as typed stages").

::

    scenario.py   Scenario ─► ResolvedScenario          (typed, frozen, hashed)
    roster.py              ─► World: parties' data + Roster (the protocol gets handles only;
                                                          the testbed keeps the rows)
    exchange.py            ─► Exchange                   (protocol.run(roster, bus, rng); the
                                                          transcript, ledger and guard record)
    evaluate.py            ─► Evaluation                 (central POT reference, accuracy, utility)
    view.py                ─► Observation                (the threat model's View + PublicInfo copy)
    attack.py              ─► AttackRun per attack       (isolated process; no ground truth)
    score.py               ─► scored rows                (GroundTruth reaches only here)
    results.py             ─► results.json row + run directory
    execute.py   execute(): drives the stages for ``run``, sweeps, ``audit``, ``bench`` and
                 ``testbed attack`` alike

A stage module imports only earlier stages (``tests/test_architecture.py`` checks it), so no step
reaches back.
"""

from testbed.run.execute import RunOutput, execute
from testbed.run.roster import PartyHandle, Roster, World, build_world
from testbed.run.scenario import ResolvedScenario

__all__ = [
    "PartyHandle",
    "ResolvedScenario",
    "Roster",
    "RunOutput",
    "World",
    "build_world",
    "execute",
]
