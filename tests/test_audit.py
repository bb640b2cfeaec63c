"""The canary audit of a defended protocol: it has power without a defense, and never certifies
more than a defense claims."""

from __future__ import annotations

import pytest

from testbed.audit import canary_audit
from testbed.cli import main
from testbed.config import parse_scenario
from testbed.runner import build_world

BASE = """\
name: audit_tiny
seed: 0
data:
  dataset:
    name: gaussians
    params: {d: 2, components: [{n: 20, mean: 0.5, std: 0.2}, {n: 20, mean: 1.0, std: 0.2}]}
  partition: {name: class_subsets, params: {classes: [[0], [1]]}}
  parties: [alice, bob]
protocol: {name: fedwad, params: {support_size: 3, iterations: 1, init_scale: 0.3, trace: false}}
defenses: DEFS
"""


def _world(defs: str):
    return build_world(parse_scenario(BASE.replace("DEFS", defs), "audit.yaml", "."))


def test_audit_has_power_without_a_defense():
    r = canary_audit(_world("[]"), "alice", trials=120)
    assert r.claimed_epsilon == float("inf")
    # 60 held-out trials per world, perfect separation: the Clopper-Pearson bound is ~2.9
    assert r.audited_epsilon > 2.0
    assert r.tpr == 1.0 and r.fpr == 0.0


@pytest.mark.parametrize("z", [0.05, 1.0, 4.0])
def test_audited_epsilon_never_exceeds_the_claim(z):
    defs = f"[{{name: gaussian_measure_noise, params: {{clip_norm: 2.0, push_max: 0.5, noise_multiplier: {z}}}}}]"
    r = canary_audit(_world(defs), "alice", trials=120)
    assert r.claimed_epsilon < float("inf")
    assert r.consistent, r
    assert r.audited_epsilon <= r.claimed_epsilon


def test_audit_cli_prints_claim_and_audit(tmp_path, capsys):
    f = tmp_path / "a.yaml"
    f.write_text(
        BASE.replace(
            "DEFS",
            "[{name: gaussian_measure_noise, params: {clip_norm: 2.0, push_max: 0.5, noise_multiplier: 4.0}}]",
        )
    )
    assert main(["audit", str(f), "--party", "alice", "--trials", "40"]) == 0
    out = capsys.readouterr().out
    assert "claimed ε" in out and "consistent" in out and "alice" in out


def test_audit_needs_enough_trials():
    from testbed.errors import TestbedError

    with pytest.raises(TestbedError, match="at least 20"):
        canary_audit(_world("[]"), "alice", trials=5)
