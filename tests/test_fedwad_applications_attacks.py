"""Attacks on FedWAD's applications (coreset, clustered FL): exact inversion, leakage above the
prior-only baseline on the contract scenarios, and the measure-noise defense plugging in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attacks.fedwad_applications import ClusteredFLLabelInference
from attacks.fedwad_distributional import invert_interpolant
from protocols.fedwad import _client_step
from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.measure import Measure
from testbed.run.execute import run_and_evaluate
from testbed.run.roster import build_world
from testbed.scenario.loading import load_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _run(name: str, attacks: list[dict], defenses: list[dict] | None = None, observer="server"):
    """Run a shipped scenario with these attacks / defenses / observer; return the attack rows."""
    import tempfile

    import yaml

    doc = yaml.safe_load((SCENARIOS / name).read_text())
    doc.update(attacks=attacks, threat_model={"observer": observer}, defenses=defenses or [])
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / name
        f.write_text(yaml.safe_dump(doc))
        from testbed.run.execute import attack_and_score

        world = build_world(load_scenario(f))
        _out = run_and_evaluate(world)
        results, tr = _out.results, _out.transcript
        return attack_and_score(world, tr, released=results["estimates"])


def test_server_inverts_a_coreset_interpolant_exactly():
    # the client's answer to xi is (1-t) B + t xi with B = diag(1/b) P^T X: inverted exactly
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 4))
    xi = Measure(rng.normal(size=(5, 4)))
    eta, _ = _client_step(PartyData("c", X), xi, 0.3, "barycentric", 1e-12)
    P, _ = tot.plan(Measure(X), xi)
    B = (P.T @ X) / xi.weights[:, None]
    np.testing.assert_allclose(invert_interpolant(eta.support, xi.support, 0.3), B, atol=1e-10)


@pytest.mark.parametrize("observer", ["server", "alice"])
def test_coreset_attacks_beat_the_prior(observer):
    rows = _run(
        "contract_tiny_fedwad_coreset.yaml",
        [
            {"name": "coreset_inversion"},
            {"name": "coreset_label_inference", "params": {"n_classes": 2}},
        ],
        observer=observer,
    )
    inv = [r for r in rows if r["attack"] == "coreset_inversion"]
    lab = [r for r in rows if r["attack"] == "coreset_label_inference"]
    assert inv and lab
    assert np.mean([r["w2"] for r in inv]) < np.mean([r["w2_baseline"] for r in inv])
    assert np.mean([r["tv"] for r in lab]) < np.mean([r["tv_baseline"] for r in lab])


def test_measure_noise_defense_plugs_into_the_coreset_protocol():
    # Prepare: the existing defense on the clients' interpolants and distances, unchanged
    defense = {
        "name": "gaussian_measure_noise",
        "params": {
            "clip_norm": 12.0,
            "push_max": 0.5,
            "noise_multiplier": 5.0,
            "kinds": ["fedwad_coreset.*xi_client", "fedwad_coreset.*distance"],
        },
    }
    attack = [{"name": "coreset_inversion"}]
    # Execute
    plain = _run("contract_tiny_fedwad_coreset.yaml", attack)
    noisy = _run("contract_tiny_fedwad_coreset.yaml", attack, [defense])
    # Assert: reconstructions move away from the rows
    assert np.mean([r["w2"] for r in noisy]) > np.mean([r["w2"] for r in plain])


def test_server_reads_label_histograms_from_round_one_updates():
    rows = _run(
        "contract_tiny_fedwad_clustered_fl.yaml",
        [{"name": "clustered_fl_label_inference", "params": {"n_classes": 3}}],
    )
    assert len(rows) == 4
    assert all(r["method"] == "updates" for r in rows)
    assert np.mean([r["tv"] for r in rows]) < 0.5 * np.mean([r["tv_baseline"] for r in rows])


def test_curious_client_guesses_its_cluster_mates():
    rows = _run(
        "contract_tiny_fedwad_clustered_fl.yaml",
        [{"name": "clustered_fl_label_inference", "params": {"n_classes": 3}}],
        observer="client_0",
    )
    # client_2 shares client_0's labels {0, 1}: its guess is client_0's own predicted histogram
    by = {r["target"]: r for r in rows}
    assert by["client_2"]["tv"] < by["client_2"]["tv_baseline"]
    assert ClusteredFLLabelInference.name == "clustered_fl_label_inference"
