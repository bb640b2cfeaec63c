"""``testbed bench`` section: what running each attack in its own process costs.

For one small run of every attack case below, the same attack is timed (a) called in this
process on the observer's View, (b) through :func:`testbed.sandbox.isolation.run_isolated` (a
fresh process forked from the forkserver, confined in the kernel sandbox, the View serialised in
and the outputs decoded out) and (c) the same without the sandbox (``limits.attack_sandbox``
false). (b) − (a) is the isolation overhead, (b) − (c) what the sandbox itself costs; the report
also gives the overhead as a share of the attack's own time. Minimum over repeats, so machine load inflates it least.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from bench.transcript import _min_seconds
from testbed.registry import ATTACKS
from testbed.run import execute
from testbed.run.view import observe
from testbed.sandbox.isolation import AttackLimits, run_isolated
from testbed.seeding import component_rng

__all__ = ["ISOLATION_CASES", "isolation_rows"]

#: (scenario, attack) pairs: a cheap attack and a heavier one on shipped scenarios
ISOLATION_CASES = (
    ("contract_tiny.yaml", "fedwad_distributional"),
    ("contract_tiny_triangle_wad.yaml", "measure_inversion"),
)
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _callers(cls, params: dict, obs):
    """(in-process call, isolated call) of one attack's run + baseline on ``obs``."""

    def rngs():
        return component_rng(0, "bench", "attack"), component_rng(0, "bench", "baseline")

    def in_process():
        a, b = rngs()
        inst = cls(cls.Config(**params))
        inst.run(obs.view, obs.public, a)
        inst.baseline(obs.view, obs.public, b)

    def isolated(sandbox=True):
        a, b = rngs()
        run_isolated(cls, params, obs.view, obs.public, a, b, AttackLimits(sandbox=sandbox))

    return in_process, isolated


def isolation_rows(opts, repeats: int = 5) -> list[dict[str, Any]]:
    """Seconds per attack in process and isolated, for each case whose files exist."""
    from testbed.scenario.loading import load_scenario

    rows = []
    for name, attack in ISOLATION_CASES:
        path = SCENARIOS / name
        if not path.is_file() or attack not in ATTACKS:
            continue
        opts.log(f"isolation: {attack} on {path}")
        run = execute(load_scenario(path), until="results", write=False)
        obs = observe(run.world, run.transcript, run.results["estimates"])
        cls = ATTACKS.get(attack)
        params = cls.Config().model_dump()
        if not cls(cls.Config()).applies_to(run.world.scenario.protocol.name):
            continue

        in_process, isolated = _callers(cls, params, obs)
        isolated()  # the first call starts the forkserver; it is paid once per process
        t_in = _min_seconds(in_process, repeats)
        t_iso = _min_seconds(isolated, repeats)
        t_bare = _min_seconds(functools.partial(isolated, sandbox=False), repeats)
        rows.append(
            {
                "scenario": f"scenarios/{name}",
                "attack": attack,
                "in_process_s": t_in,
                "isolated_s": t_iso,
                "unconfined_s": t_bare,
                "sandbox_ms": 1e3 * (t_iso - t_bare),
                "overhead_ms": 1e3 * (t_iso - t_in),
                "overhead_ratio": t_iso / t_in if t_in > 0 else float("inf"),
            }
        )
    return rows
