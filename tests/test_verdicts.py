"""Verdicts that survive a reviewer (issue 22): noise is not a leak, a disguised copy is.

Unit tests of recovery up to a transformation and of the population rule, then the contract kit on
toy protocols that send their rows in thin disguise (each must fail ``no_private_rows`` naming the
transform) or release only a mean or one number (must pass), then scorecards: population-
distributed noise reads no record leak, raw rows read 1, a disguised copy reads as a leak.
"""

from __future__ import annotations

import numpy as np
import pytest

from attacks._base import AttackOutput
from testbed.data.population import FRESH, HELD, NONE, population_rows
from testbed.scoring.metrics import score_attack
from testbed.scoring.records import population_comparison, transform_recovery
from testbed.scoring.transforms import _dist, best_fit, gw_plan
from testbed.scoring.truth import GroundTruth, PartyTruth
from testbed.scoring.verdict import DISTRIBUTIONAL, NO_LEAK, RECORD, verdict
from testbed.testing.protocol_checks import check_no_private_rows
from tests import _toy_protocols as T

RNG = np.random.default_rng(11)
X = RNG.normal(size=(30, 3))
Q, _ = np.linalg.qr(RNG.normal(size=(3, 3)))
A = RNG.normal(size=(3, 3)) + 2 * np.eye(3)


# ----------------------------------------------------------------------------- transforms
@pytest.mark.parametrize(
    "name, R, similarity",
    [
        ("scale", X * 1.0001, True),
        ("columns", X[:, [2, 0, 1]], True),
        ("rotation, shuffled, scaled, shifted", (3 * X @ Q + 1)[RNG.permutation(30)], True),
        ("affine", X @ A + 5, False),
    ],
)
def test_a_transformed_copy_is_recovered_exactly(name, R, similarity):
    rates = transform_recovery(R, X)
    assert rates["exact_recovery_affine"] == 1.0, name
    assert rates["exact_recovery_similarity"] == (1.0 if similarity else 0.0), name


def test_fresh_draws_are_not_recovered_by_any_transform():
    rates = transform_recovery(RNG.normal(size=(30, 3)), X)
    assert rates["exact_recovery_similarity"] == 0.0 and rates["exact_recovery_affine"] == 0.0


@pytest.mark.parametrize("n, m, d, noise", [(100, 300, 4, 0.5), (150, 150, 3, 0.2)])
def test_the_gromov_wasserstein_matching_stops_near_its_converged_loss(n, m, d, noise):
    # GW_TOL trades steps for loss. Measured against the loss POT's default (1e-9) converges
    # to: at 1e-5 both instances end there; at 1e-3 and 1e-2 the second ends 0.49 % above it,
    # at 1.0 both end 178 % and 406 % above
    import ot

    rng = np.random.default_rng(5 + n)
    Z = rng.normal(size=(n, d))
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    W = np.vstack([Z @ Q + noise * rng.normal(size=(n, d)), rng.normal(size=(m - n, d))])
    C1, C2, p, q = _dist(Z), _dist(W), ot.unif(n), ot.unif(m)
    consts = ot.gromov.init_matrix(C1, C2, p, q, "square_loss")
    converged = ot.gromov.gromov_wasserstein(
        C1, C2, p, q, "square_loss", tol_rel=1e-9, tol_abs=1e-9
    )
    loss, best = (float(ot.gromov.gwloss(*consts, G)) for G in (gw_plan(C1, C2, p, q), converged))
    assert loss <= best * (1 + 1e-3)


def test_too_few_rows_for_a_fit_give_no_rate():
    # d + 1 = 4 rows: any affine map fits them exactly, so no rate is claimed
    few = X[:4]
    assert best_fit(few @ A, few, "affine", lambda M: 1.0)[0] is None
    assert transform_recovery(few @ A, few)["exact_recovery_affine"] is None
    assert best_fit(X[:2] * 2, X[:2], "similarity", lambda M: 1.0)[0] is None


# ----------------------------------------------------------------------------- population rule
def _world(pop):
    return GroundTruth(parties={"a": PartyTruth(X)}, population={"a": pop}, population_method="t")


def _row(R, pop=None, base=None):
    pop = RNG.normal(size=(200, 3)) if pop is None else pop
    base = AttackOutput(kind="points", target="a", points=RNG.normal(size=(30, 3)) * 3)
    return score_attack(AttackOutput(kind="points", target="a", points=R), base, _world(pop))


def test_an_exact_copy_reads_record_leakage_1_even_among_other_atoms():
    # the copied rows and as many unrelated data-width points (what sent_rows gathers)
    row = _row(np.vstack([X, RNG.normal(size=(30, 3)) + 4]))
    assert row["record_leak"] == 1.0 and row["record_leakage"] == 1.0
    assert row["leakage"] < 0.9  # the distributional figure is diluted; the record one is not
    v = verdict(row)
    assert (v.kind, v.metric, v.value) == (RECORD, "record_leakage", 1.0)
    assert "population" in v.baseline


def test_population_distributed_noise_is_distributional_inference_not_a_record_leak():
    noise = np.random.default_rng(5).normal(size=(30, 3))
    row = _row(noise, np.random.default_rng(6).normal(size=(200, 3)))
    assert row["record_leak"] == 0.0 and row["record_leakage"] == 0.0
    assert row["record_p"] > 0.05
    assert row["leakage"] > 0  # beats the wide prior-only baseline: the old "leak"
    v = verdict(row)
    assert v.kind == DISTRIBUTIONAL and not v.leak and "prior-only" in v.baseline


def test_the_permutation_test_is_calibrated_on_noise():
    # under the null (reconstruction independent of the rows) p < 0.05 in about 5 % of runs
    g = np.random.default_rng(3)
    hits = 0
    for _ in range(40):
        Xn = g.normal(size=(20, 2))
        row = {"coverage_r": 0.5, "exact_recovery_tol": 1e-6, "coverage": 0.0}
        out = population_comparison(g.normal(size=(20, 2)), Xn, g.normal(size=(80, 2)), row, g)
        hits += out["record_leak"]
    assert hits <= 6  # binomial(40, 0.05): P(> 6) < 0.01


def test_a_disguised_copy_is_a_record_leak_in_the_score():
    row = _row((2 * X @ Q + 1)[::-1])
    assert row["exact_recovery"] == 0.0 and row["exact_recovery_similarity"] == 1.0
    assert row["record_leak"] == 1.0 and row["record_leakage"] == 1.0


def test_without_population_only_exact_recovery_claims_a_record_leak():
    w = GroundTruth(parties={"a": PartyTruth(X)})
    out = score_attack(AttackOutput(kind="points", target="a", points=X[:10]), None, w)
    assert out["record_leak"] == 1.0 and out["population_method"] == "none"
    noisy = X + 0.3 * np.random.default_rng(2).normal(size=X.shape)
    out = score_attack(AttackOutput(kind="points", target="a", points=noisy), None, w)
    # no population rows and nothing recovered exactly: the record test did not run, and the
    # row says so instead of a 0 (issue 46)
    assert "record_leak" not in out and "record_leakage" not in out
    assert verdict(out).kind == NO_LEAK and "record test not measured" in verdict(out).text
    assert "no record leak" not in verdict(out).text


def test_population_rows_are_fresh_draws_or_rows_no_party_holds():
    from testbed.data.datasets import DATASETS, Dataset, PartyData

    g = DATASETS.get("gaussians")
    plugin = g(g.Config(d=2, components=[{"n": 10}, {"n": 10, "mean": 5.0}]))
    ds = plugin.load(np.random.default_rng(0))
    alice = PartyData("alice", ds.X[:10], ds.y[:10], np.arange(10))  # component 0 only
    pop = population_rows(plugin, ds, {"alice": alice}, np.random.default_rng(1), floor=50)
    assert pop.method == FRESH and pop.rows["alice"].shape == (50, 2)
    assert abs(pop.rows["alice"].mean()) < 1  # stratified: component 0, not the mixture

    from testbed.data.datasets import DatasetPlugin

    class NoFresh(DatasetPlugin):  # a dataset that cannot draw fresh rows (the hook's default)
        pass

    # the rows no party holds are all of component 1: none of alice's label, so no population
    held = population_rows(NoFresh(), ds, {"alice": alice}, np.random.default_rng(1))
    assert held.method == NONE and held.rows == {}
    ds2 = Dataset(ds.X, None, "x")
    alice2 = PartyData("alice", ds.X[:12], None, np.arange(12))
    held = population_rows(NoFresh(), ds2, {"alice": alice2}, np.random.default_rng(1))
    assert held.method == HELD and len(held.rows["alice"]) == 8
    assert not {r.tobytes() for r in held.rows["alice"]} & {r.tobytes() for r in alice2.X}
    every = PartyData("alice", ds.X, None, np.arange(20))
    assert (
        population_rows(NoFresh(), ds2, {"alice": every}, np.random.default_rng(1)).method == NONE
    )


# ----------------------------------------------------------------------------- the kit
@pytest.fixture(scope="module")
def toys():
    classes = (T.RawRows, *T.DISGUISES, T.Projection, T.PrivateMean, T.NoiseSender)
    with T.registered(*classes):
        yield


@pytest.mark.parametrize(
    "toy, named",
    [
        (T.DISGUISES[0], "scale x1.0001"),
        (T.DISGUISES[1], "scale x1.00001"),
        (T.DISGUISES[2], "within 0.001"),
        (T.DISGUISES[3], "column permutation"),
        (T.DISGUISES[4], "rotation"),
        (T.DISGUISES[5], "affine map"),
        (T.DISGUISES[6], "moment inversion: mean and covariance of 2 rows fix both rows"),
    ],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_the_kit_fails_a_disguised_copy_naming_the_transform(toys, toy, named):
    with pytest.raises(AssertionError) as err:
        check_no_private_rows(toy)
    assert named in str(err.value) and "alice" in str(err.value)


@pytest.mark.parametrize("toy", [T.PrivateMean, T.Projection, T.NoiseSender], ids=lambda c: c.name)
def test_the_kit_passes_a_mean_one_number_or_data_blind_noise(toys, toy):
    check_no_private_rows(toy)


# ----------------------------------------------------------------------------- scorecards
# three scorecards: ~40 s on 2 busy cores; the verdict's unit tests stay in make test
@pytest.mark.slow
def test_scorecards_noise_is_no_record_leak_raw_rows_read_1_a_rotation_is_a_leak(toys, tmp_path):
    from testbed.plugins.scorecard import scorecard

    noise = scorecard("toy_noise_sender", tmp_path / "noise")
    assert noise.leaks() == []
    rows = [r for r in noise.attacks if r["attack"] == "sent_rows"]
    assert rows and all(r["verdict"] != RECORD for r in rows)

    raw = scorecard("toy_raw", tmp_path / "raw")
    worst = raw.worst()
    for label in ("server", "eavesdropper", "server+alice"):
        assert (worst[label]["metric"], worst[label]["value"]) == ("record_leakage", 1.0)
    assert any(x.startswith("server: ") and "record leak 1" in x for x in raw.leaks())

    rot = scorecard("toy_rotation", tmp_path / "rot")
    assert rot.worst()["server"]["disguised_copies"] == 2
    assert any("rotation" in x for x in rot.leaks())
    md = (tmp_path / "rot" / "scorecard.md").read_text()
    assert "Private rows in disguise" in md and "baseline" in md


def test_population_rows_are_drawn_when_first_read_and_not_before(monkeypatch):
    # Prepare: count the draws; a scenario's world (the tiny contract scenario)
    import pickle

    import testbed.run.roster as roster
    from testbed.data.population import Population
    from testbed.scenario.loading import load_scenario
    from tests.conftest import SCENARIOS

    draws = []
    real = roster.population_rows

    def counted(*args, **kwargs):
        draws.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(roster, "population_rows", counted)
    # Execute: build the world (a run without attacks stops here as far as the population goes)
    world = roster.build_world(load_scenario(SCENARIOS / "contract_tiny.yaml"))
    # Assert: nothing drawn until the scorer reads it, then once, the same rows every read
    assert draws == []
    pop = world.meta["population"]
    first = {p: r.copy() for p, r in pop.rows.items()}
    assert draws == [1] and first
    again = roster.build_world(load_scenario(SCENARIOS / "contract_tiny.yaml")).meta["population"]
    for p, rows in first.items():
        np.testing.assert_array_equal(again.rows[p], rows)
        np.testing.assert_array_equal(pop.rows[p], rows)
    assert len(draws) == 2
    back = pickle.loads(pickle.dumps(pop))  # pickled as the rows themselves
    assert isinstance(back, Population) and back.method == pop.method
