"""A researcher's first scenarios (issue 51, point 4): a sweep over protocols without a dummy
top-level protocol, a warning for a clip_norm far from the rows' norms, scaffold hints that name
this environment's pip."""

from __future__ import annotations

import shlex
import sys

import pytest
from _scenarios import tiny

from testbed.cli.main import main
from testbed.errors import ScenarioError
from testbed.scenario.loading import parse_scenario

PROTOCOL_LINES = "protocol:\n  name: fedwad\n  params: {support_size: 5, iterations: 4}\n"
NO_PROTOCOL = tiny("swept").replace(PROTOCOL_LINES, "")
TWO_PROTOCOLS = (
    "sweep:\n  protocol:\n"
    "    - {name: fedwad, params: {support_size: 5, iterations: 4}}\n"
    "    - {name: triangle_wad, params: {t: 0.4, support_size: 5}}\n"
)


def test_a_sweep_over_protocols_needs_no_top_level_protocol(tmp_path, capsys):
    assert PROTOCOL_LINES in tiny("swept") and "protocol:" not in NO_PROTOCOL
    sc = parse_scenario(NO_PROTOCOL + TWO_PROTOCOLS, "s.yaml")
    assert [c.scenario.protocol.name for c in sc._cells] == ["fedwad", "triangle_wad"]
    f = tmp_path / "s.yaml"
    f.write_text(NO_PROTOCOL + TWO_PROTOCOLS)
    assert main(["validate", str(f)]) == 0
    assert "protocols fedwad, triangle_wad, sweep of 2 cells" in capsys.readouterr().out


def test_a_list_of_grids_each_over_protocols_needs_none_either():
    text = NO_PROTOCOL + (
        "sweep:\n"
        "  - protocol: [{name: fedwad, params: {support_size: 5, iterations: 4}}]\n"
        "    protocol.params.iterations: [2, 3]\n"
        "  - protocol: [{name: triangle_wad, params: {t: 0.4, support_size: 5}}]\n"
    )
    sc = parse_scenario(text, "s.yaml")
    assert [c.scenario.protocol.name for c in sc._cells] == ["fedwad", "fedwad", "triangle_wad"]


def test_an_error_in_the_first_swept_protocol_names_its_sweep_line():
    bad = TWO_PROTOCOLS.replace("iterations: 4}", "iterations: 0}")
    with pytest.raises(ScenarioError, match=r"^s\.yaml:19: protocol\.params\.iterations"):
        parse_scenario(NO_PROTOCOL + bad, "s.yaml")


def test_a_sweep_that_leaves_the_protocol_unset_says_how_to_sweep_it():
    text = NO_PROTOCOL + "sweep: {protocol.params.iterations: [2, 3]}\n"
    with pytest.raises(ScenarioError, match="protocol: required field is missing; a sweep needs"):
        parse_scenario(text, "s.yaml")


CLIP = "defenses: [{{name: gaussian_measure_noise, params: {{noise_multiplier: 0.1{clip}}}}}]\n"


def _validate(tmp_path, capsys, text: str) -> list[str]:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    assert main(["validate", str(f)]) == 0  # a warning, never an error
    return capsys.readouterr().err.strip().splitlines()


def test_a_clip_norm_far_below_the_rows_norms_is_a_warning_with_the_norms(tmp_path, capsys):
    # rows near (5, 5, 5): L2 norm ~8.7; no transform; the default clip_norm 1.0
    text = tiny("c").replace("mean: 0.0", "mean: 5.0").replace("mean: 2.0", "mean: 5.0")
    text = text.replace("  transform: {name: scale, params: {clip_norm: 6.0}}\n", "")
    (line,) = _validate(tmp_path, capsys, text + CLIP.format(clip=""))
    assert line.startswith(f"warning: {tmp_path / 's.yaml'}:19: defenses[0].params.clip_norm: ")
    assert "1 (the default) is far below the rows' L2 norms: median 8." in line
    assert "100 % of the rows would be shortened" in line


def test_a_clip_norm_far_above_every_row_is_a_warning(tmp_path, capsys):
    # the tiny scenario's rows (after its scale transform) have norms up to about 5
    (line,) = _validate(tmp_path, capsys, tiny("c") + CLIP.format(clip=", clip_norm: 100"))
    assert "defenses[0].params.clip_norm: 100 is far above the rows' L2 norms" in line
    assert "(70 rows of the dataset); the noise is calibrated to clip_norm" in line
    # near the rows' norms: nothing said
    assert _validate(tmp_path, capsys, tiny("c") + CLIP.format(clip=", clip_norm: 6.0")) == []


@pytest.mark.parametrize("kind", ["attack", "protocol", "defense"])
def test_the_scaffold_hint_names_this_environments_pip(tmp_path, capsys, kind):
    root = tmp_path / "pkg"
    assert main([f"new-{kind}", f"probe_hint_{kind}", str(root)]) == 0
    hint = capsys.readouterr().out.splitlines()[-1]
    py = shlex.quote(sys.executable)
    assert hint.startswith(f"next: {py} -m pip install -e {shlex.quote(str(root))} && ")
    assert f"{py} -m testbed plugins" in hint and " pip install" not in hint.replace("-m pip", "")
