"""docs/guide/scenarios.md, "Auditing a claim": the canary audit."""

from __future__ import annotations

AUDIT_WORLD = """\
name: docs_audit
seed: 0
data:
  dataset:
    name: gaussians
    params: {d: 2, components: [{n: 20, mean: 0.5, std: 0.2}, {n: 20, mean: 1.0, std: 0.2}]}
  partition: {name: class_subsets, params: {classes: [[0], [1]]}}
  parties: [alice, bob]
protocol: {name: fedwad, params: {support_size: 3, iterations: 1, init_scale: 0.3, trace: false}}
defenses: %s
"""


def audit_canary() -> dict[str, float]:
    """docs/guide/scenarios.md "Auditing a claim": canary audit of a 20-row FedWAD client (S = 3, K = 1,
    200 trials) with no defense and Gaussian noise z = 0.05, 1, 4 (clip 2, push_max 0.5)."""
    from testbed.run.audit import canary_audit
    from testbed.run.roster import build_world
    from testbed.scenario.loading import parse_scenario

    out = {}
    for tag, z in (("none", None), ("z0.05", 0.05), ("z1", 1.0), ("z4", 4.0)):
        defs = (
            "[]"
            if z is None
            else "[{name: gaussian_measure_noise, params: "
            f"{{clip_norm: 2.0, push_max: 0.5, noise_multiplier: {z}}}}}]"
        )
        world = build_world(parse_scenario(AUDIT_WORLD % defs, "docs_audit.yaml", "."))
        r = canary_audit(world, "alice", trials=200)
        out[f"audit_{tag}_claimed"] = r.claimed_epsilon
        out[f"audit_{tag}_audited"] = r.audited_epsilon
    return out
