"""Pieces that connect the issues: attacks in mixed-protocol sweeps, TriangleWad's sensitivity
check for the Gaussian defense, and the default demo scenario's shape."""

from __future__ import annotations

import numpy as np
import pytest
from _scenarios import gaussians

from protocols.triangle_wad import TriangleWad
from testbed.run.execute import execute
from testbed.run.sweep import expand_cells
from testbed.scenario.loading import load_scenario, parse_scenario

TINY_TRIANGLE = gaussians(
    "tiny_triangle",
    "attacks:\n  - {name: fedwad_distributional, if_not_applicable: skip}\n"
    "  - {name: measure_inversion}",
    seed=1,
    d=2,
    components=((40, 0.0), (30, 3.0)),
    protocol="triangle_wad",
    params="{support_size: 1, t: 0.5}",
    transform=None,
)


# 3.7 s (a run): the refusal before running is make test's
# (test_silent_gaps::test_an_attack_that_does_not_apply_is_an_error_before_running)
@pytest.mark.slow
def test_attacks_run_only_on_protocols_they_apply_to(tmp_path):
    # Prepare: a FedWAD-only attack next to one that applies to TriangleWad
    sc = parse_scenario(TINY_TRIANGLE, "tiny.yaml", str(tmp_path))
    # Execute
    out = execute(sc, tmp_path / "run")
    # Assert: no row from the FedWAD attack; the inversion recovers both clients (k = 1)
    attacks = {a["attack"] for a in out.results["attacks"]}
    assert attacks == {"measure_inversion"}
    for row in out.results["attacks"]:
        assert row["exact_recovery"] == 1.0


def test_triangle_wad_sensitivity_claim_holds_only_for_one_atom():
    sizes = {"alice": 40, "bob": 30}
    one = TriangleWad.barycentric_push_check({"support_size": 1, "t": 0.5}, 0.5, sizes)
    many = TriangleWad.barycentric_push_check({"support_size": 10, "t": 0.5}, 0.5, sizes)
    share = TriangleWad.barycentric_push_check({"support_size": 1, "t": 0.3}, 0.5, sizes)
    assert one["holds"]
    assert not many["holds"] and "diam(gamma)" in many["detail"]
    assert not share["holds"] and "exceeds push_max" in share["detail"]


def test_demo_scenario_compares_both_protocols_with_attacks(scenarios_dir):
    sc = load_scenario(scenarios_dir / "leakage_vs_accuracy.yaml")
    cells = expand_cells(sc)
    protocols = {c.scenario.protocol.name for c in cells}
    assert protocols == {"fedwad", "triangle_wad"}
    assert {a.name for a in sc.attacks} == {"fedwad_distributional", "measure_inversion"}
    assert len({c.scenario.seed for c in cells}) == 3
    assert np.all([c.scenario.threat_model.observer == "server" for c in cells])


# ~55 s on 2 busy cores; test_cli's sweep summaries stay in make test
@pytest.mark.slow
def test_sweep_summary_prints_one_line_per_setting_with_leakage(tmp_path, capsys):
    from testbed.cli.main import main

    f = tmp_path / "sweep.yaml"
    f.write_text(TINY_TRIANGLE + "seeds: [0, 1]\nsweep:\n  protocol.params.support_size: [1, 5]\n")
    assert main(["run", str(f), "--out", str(tmp_path / "run"), "-q"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("protocol"))
    assert "leakage" in header and "coverage" in header and "seeds" in header
    lines = [line for line in out.splitlines() if line.startswith("triangle_wad")]
    assert len(lines) == 2  # two settings, each the mean over its two seeds
    # one varying path: the setting column names it; k = 1 -> every row recovered
    k1 = next(line.split() for line in lines if line.split()[1] == "support_size=1")
    assert k1[2] == "2" and k1[5] == "1"  # three significant figures: 1, not 1.00


# a run and its re-attack (3.5 s): make test keeps testbed attack on saved transcripts
# (test_transcript_roundtrip's shipped scenarios); make test-slow
@pytest.mark.slow
def test_attacks_rerun_on_a_saved_transcript_reproduce_the_run(tmp_path, capsys):
    import json

    from testbed.cli.main import main
    from testbed.run.rerun import rerun_attacks

    # Prepare: a saved run with its own attacks
    sc = parse_scenario(TINY_TRIANGLE.replace("support_size: 1", "support_size: 4"), "t.yaml", ".")
    out = execute(sc, tmp_path / "run")
    # Execute: the same attacks on the saved transcript, protocol not re-run
    rows, _ = rerun_attacks(tmp_path / "run")
    # Assert: identical rows (JSON round trip as results.json stores them)
    saved = json.loads((tmp_path / "run" / "results.json").read_text())["attacks"]
    assert json.loads(json.dumps(rows)) == saved and len(saved) == len(out.results["attacks"]) > 0
    # other threat models on the same messages: bob never sees alice's eta (it goes to the
    # server), an eavesdropper sees both
    assert main(["attack", str(tmp_path / "run"), "--observer", "bob"]) == 0
    assert "0 attack row(s)" in capsys.readouterr().out
    assert main(["attack", str(tmp_path / "run"), "--observer", "eavesdropper"]) == 0
    shown = capsys.readouterr().out
    assert "on alice (observer eavesdropper)" in shown and "on bob (observer eavesdropper)" in shown
    # a bad override is a one-line error naming the field
    assert (
        main(["attack", str(tmp_path / "run"), "--attack", 'measure_inversion:{"bogus": 1}']) == 2
    )
    assert "--attack 'measure_inversion' (#1): params.bogus: unknown key" in capsys.readouterr().err


def test_attack_rerun_refuses_an_edited_run(tmp_path):
    from testbed.errors import TestbedError
    from testbed.run.rerun import rerun_attacks

    sc = parse_scenario(TINY_TRIANGLE, "t.yaml", ".")
    execute(sc, tmp_path / "run")
    p = tmp_path / "run" / "resolved.yaml"
    p.write_text(p.read_text().replace("seed: 1", "seed: 2"))
    with pytest.raises(TestbedError, match="does not match config_hash"):
        rerun_attacks(tmp_path / "run")
