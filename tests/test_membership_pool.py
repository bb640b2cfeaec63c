"""Membership-candidate pools (issue 11): held out from every party, seeded, labels only to the
scorer; the support_membership attack on the measure protocols."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.errors import TestbedError
from testbed.run.execute import execute
from testbed.run.roster import build_world
from testbed.scenario.loading import load_scenario

SC = "scenarios/contract_tiny_membership.yaml"


def _world(**over):
    sc = load_scenario(SC)
    return build_world(sc.model_copy(update=over) if over else sc)


def test_pool_nonmembers_are_held_out_from_every_party_and_members_are_rows():
    # Prepare / Execute
    w = _world()
    pool, labels = w.public.extra["candidates"], w.meta["membership"]
    rows = {r.tobytes() for d in w.parties.values() for r in np.asarray(d.X, np.float64)}
    # Assert
    assert set(pool) == set(w.parties) == set(labels)
    for t, C in pool.items():
        lab = labels[t]
        assert C.shape == (40, 3) and lab.sum() == 20 and (~lab).sum() == 20
        own = {r.tobytes() for r in np.asarray(w.parties[t].X, np.float64)}
        assert all(r.tobytes() in own for r in C[lab])
        assert not any(r.tobytes() in rows for r in C[~lab])
    # 90 rows in the dataset, 20 held out: the parties hold the other 70
    assert sum(d.n for d in w.parties.values()) == 70


def test_pool_is_seeded_and_labels_never_reach_public_info():
    a, b = _world(), _world()
    for t in a.public.extra["candidates"]:
        np.testing.assert_array_equal(
            a.public.extra["candidates"][t], b.public.extra["candidates"][t]
        )
    c = _world(seed=8)
    assert not np.array_equal(
        a.public.extra["candidates"]["alice"], c.public.extra["candidates"]["alice"]
    )
    assert "membership" not in a.public.extra

    def bool_arrays(x):
        if isinstance(x, dict):
            return [b for v in x.values() for b in bool_arrays(v)]
        return [x] if isinstance(x, np.ndarray) and x.dtype == bool else []

    assert bool_arrays(dict(a.public.extra)) == []  # no label array anywhere attacks can read


def test_pool_too_many_nonmembers_is_a_clear_error():
    sc = load_scenario(SC)
    bad = sc.model_copy(update={"membership": sc.membership.model_copy(update={"nonmembers": 90})})
    with pytest.raises(TestbedError, match="membership.nonmembers"):
        build_world(bad)


@pytest.mark.parametrize("protocol", ["fedwad", "triangle_wad", "fedbary"])
def test_support_membership_beats_chance_on_measure_protocols(tmp_path, protocol):
    import yaml

    raw = yaml.safe_load(open(SC))
    raw["protocol"] = {
        "name": protocol,
        "params": {"fedwad": {"support_size": 30, "iterations": 4}}.get(protocol, {}),
    }
    raw["membership"] = {"members": 30, "nonmembers": 30}
    raw["name"] = f"mem_{protocol}"
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(raw))
    rows = execute(load_scenario(str(p)), tmp_path / "run").results["attacks"]
    assert rows, f"no membership row on {protocol}"
    for r in rows:
        assert r["baseline_auc"] == 0.5
        for k in ("auc", "tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr", "advantage"):
            assert r[k] is not None
        # 30 non-members: TPR at 1 % and 0.1 % use the floor 1/30 (never NaN)
        assert r["alpha_used_1pct"] == pytest.approx(1 / 30)
    assert max(r["auc"] for r in rows) > 0.6


def test_two_configurations_of_one_attack_get_their_own_labels():
    from testbed.run.attack import attack_labels

    specs = [
        {"name": "measure_inversion", "params": {"a": 1}},
        {"name": "measure_inversion", "params": {"a": 2}},
        {"name": "support_membership", "params": {}},
        {"name": "x", "params": {}, "label": "mine"},
    ]
    labels = attack_labels(specs)
    assert labels[2:] == ["support_membership", "mine"]
    assert labels[0] != labels[1] and all(
        lab.startswith("measure_inversion-") for lab in labels[:2]
    )
    with pytest.raises(TestbedError, match="label 'mine' already used"):
        attack_labels([*specs, {"name": "y", "params": {}, "label": "mine"}])
