"""How the report names a sweep's settings (testbed.report.points), and that it names them as
``testbed run`` prints them."""

from __future__ import annotations

from testbed.cli.summary import setting_label
from testbed.report.points import distinct_points, point_of

NM = "defenses[0].params.noise_multiplier"


def _row(labels: dict, setting: dict, label: str = "", seed: int = 0) -> dict:
    return {"labels": labels, "setting": setting, "label": label, "seed": seed, "results": {}}


def test_a_swept_number_is_named_by_its_field():
    # a bare "0.01" in the report's tables said nothing of what was swept; `testbed run`
    # prints noise_multiplier=0.01 for the same cell
    row = _row({NM: "0.01"}, {NM: 0.01})
    assert point_of(row) == "noise_multiplier=0.01"
    assert point_of(row) == setting_label(row)
    word = _row({"protocol.params.loss": "sinkhorn"}, {"protocol.params.loss": "sinkhorn"})
    assert point_of(word) == "loss=sinkhorn" == setting_label(word)


def test_a_swept_spec_or_list_is_named_by_its_label():
    spec = {"name": "gaussian_measure_noise", "params": {"noise_multiplier": 0.1}}
    row = _row({"defenses": "gaussian_measure_noise(noise_multiplier=0.1)"}, {"defenses": [spec]})
    assert point_of(row) == "gaussian_measure_noise(noise_multiplier=0.1)"
    # the protocol's label names the series, not the point
    proto = _row({"protocol": "fedwad(S=3)", "defenses": "none"}, {"protocol": {}, "defenses": []})
    assert point_of(proto) == "none"
    assert point_of(_row({}, {})) == "base"


def test_several_fields_by_their_last_names_unless_two_end_alike():
    paths = ["protocol.params.loss", "protocol.params.weighting"]
    row = _row(dict(zip(paths, ["entropy", "A"])), dict(zip(paths, ["entropy", "A"])))
    assert point_of(row) == "loss=entropy, weighting=A" == setting_label(row)
    from testbed.report.points import field_name

    same = ["defenses[0].params.sigma", "defenses[1].params.sigma"]
    assert field_name(same[0], same) == same[0]
    row = _row(dict(zip(same, ["1", "2"])), dict(zip(same, [1, 2])))
    assert point_of(row) == f"{same[0]}=1, {same[1]}=2"


def test_two_grids_setting_different_fields_to_one_value_stay_apart():
    rows = [
        _row({"protocol.params.support_size": "3"}, {"protocol.params.support_size": 3}, "a"),
        _row({"protocol.params.iterations": "3"}, {"protocol.params.iterations": 3}, "b"),
    ]
    names = {point_of(r) for r in distinct_points(rows)}
    assert names == {"support_size=3", "iterations=3"}
