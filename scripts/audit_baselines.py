"""Canary sign accuracy per round of the one-run audit's baselines (docs/reference/attacks.md, "Baselines,
measured"): the share of canaries whose inclusion bit the server's signed score gets right, with
the raw projections (the audit's), centred on a noiseless reference run, on the message each
answers, or on their least-squares blend.

    python scripts/audit_baselines.py [z] [canaries] [seeds]     # default 0.006 32 4
"""

from __future__ import annotations

import sys

import numpy as np

from testbed.exchange.bus import SERVER
from testbed.run.audit_one_run import canary_run
from testbed.run.roster import build_world
from testbed.scenario.loading import parse_scenario

SCENARIO = """\
name: audit_baselines
seed: {seed}
data:
  dataset:
    name: gaussians
    params: {{d: 64, components: [{{n: 100, mean: 0.0, std: 1.0}}, {{n: 100, mean: 1.0, std: 1.0}}]}}
  partition: {{name: class_subsets, params: {{classes: [[0], [1]]}}}}
  parties: [alice, bob]
protocol: {{name: fedwad, params: {{support_size: 50, iterations: 5, t: 0.5}}}}
defenses: [{{name: gaussian_measure_noise, params: {{clip_norm: 4, noise_multiplier: {z}}}}}]
"""
BASELINES = ("none", "reference", "previous", "fit")


def sign_accuracy(seed: int, z: float, canaries: int) -> dict[str, dict[int, float]]:
    """Per baseline, per round: the share of canary signs the server's signed score gets right."""
    world = build_world(parse_scenario(SCENARIO.format(seed=seed, z=z), "b.yaml", "."))
    out = {}
    for base in BASELINES:
        env, proj, include, _ = canary_run(world, "alice", canaries, baseline=base)
        per = {}
        for i, e in enumerate(env):
            if e.sender == "alice" and e.receiver == SERVER and proj[i] is not None:
                P = proj[i]
                signed = P[np.argmax(np.abs(P), axis=0), np.arange(P.shape[1])]
                per[e.round] = float(np.mean((signed > 0) == include))
        out[base] = per
    return out


def main(argv: list[str]) -> None:
    z = float(argv[0]) if argv else 0.006
    m = int(argv[1]) if len(argv) > 1 else 32
    seeds = int(argv[2]) if len(argv) > 2 else 4
    runs = [sign_accuracy(s, z, m) for s in range(seeds)]
    print(f"z = {z:g}, {m} canaries, {seeds} seeds: canary signs right per round (mean)")
    for base in BASELINES:
        rounds = sorted(runs[0][base])
        per = [np.mean([r[base][k] for r in runs]) for k in rounds]
        cells = "  ".join(f"{k}: {v:.3f}" for k, v in zip(rounds, per))
        print(f"{base:>9}  {cells}  mean {np.mean(per):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
