"""No result goes missing in silence (issue 22, point 4): each case that used to pass without a
word is an error naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attacks._base import AttackOutput
from testbed.data.files import CsvFile, FileConfig, NpyFile
from testbed.errors import DataError, TestbedError
from testbed.run.attack import AttackRun
from testbed.run.score import score_runs
from testbed.scoring.metrics import MetricError
from testbed.scoring.truth import GroundTruth, PartyTruth

RNG = np.random.default_rng(4)
A, B = RNG.normal(size=(6, 2)), RNG.normal(size=(6, 2)) + 3
POOL_A, POOL_B = np.vstack([A[:3], RNG.normal(size=(3, 2))]), np.vstack([B[:3], B[:3] + 9])
TRUTH = GroundTruth(
    parties={"alice": PartyTruth(A), "bob": PartyTruth(B)},
    candidates={"alice": POOL_A, "bob": POOL_B},
    membership={"alice": np.r_[[True] * 3, [False] * 3], "bob": np.r_[[True] * 3, [False] * 3]},
)
SCORES = np.array([3.0, 2.0, 1.0, 0.0, 0.5, 0.2])


def _run(out, baseline=()):
    return AttackRun(0, "probe", "probe-x", None, "server", (out,), tuple(baseline))


def _base(target, cand):
    return AttackOutput("scores", target, scores=np.zeros(len(cand)), meta={"candidates": cand})


def test_scores_over_another_targets_pool_is_an_error_naming_attack_and_target():
    out = AttackOutput("scores", "bob", scores=SCORES, meta={"candidates": POOL_A})
    with pytest.raises(
        MetricError, match=r"attack probe-x, target 'bob': target mismatch.*'alice'"
    ):
        score_runs([_run(out, [_base("bob", POOL_A)])], TRUTH)


def test_scores_without_candidates_when_a_pool_exists_is_an_error():
    out = AttackOutput("scores", "bob", scores=SCORES)  # whose pool? the old code guessed bob's
    with pytest.raises(MetricError, match=r"attack probe-x, target 'bob'.*meta\['candidates'\]"):
        score_runs([_run(out, [_base("bob", POOL_B)])], TRUTH)


def test_a_membership_row_without_a_baseline_is_an_error_not_missing_columns():
    out = AttackOutput("scores", "alice", scores=SCORES, meta={"candidates": POOL_A})
    with pytest.raises(
        MetricError, match=r"attack probe-x, target 'alice': no prior-only baseline"
    ):
        score_runs([_run(out)], TRUTH)
    row = score_runs([_run(out, [_base("alice", POOL_A)])], TRUTH)[0]
    assert row["auc"] == 1.0 and row["baseline_auc"] == 0.5


def _csv(tmp_path, text):
    f = tmp_path / "d.csv"
    f.write_text(text)
    return CsvFile(FileConfig.model_validate({"path": str(f), "label_column": 2}))


def test_non_integer_labels_are_refused_naming_the_file(tmp_path):
    ds = _csv(tmp_path, "1,2,0\n3,4,1.5\n5,6,1\n")
    with pytest.raises(
        DataError, match=r"d\.csv: label column 2 holds 1\.5 at row 1; class labels"
    ):
        ds.load(None)
    with pytest.raises(DataError, match="integers >= 0"):
        _csv(tmp_path, "1,2,0\n3,4,-1\n").load(None)
    assert list(_csv(tmp_path, "1,2,0\n3,4,1\n").load(None).y) == [0, 1]


@pytest.mark.parametrize(
    "arr, says",
    [
        (np.array([[1 + 2j, 3], [4, 5]]), "complex values"),
        (np.array([[1, None], [2, 3]], dtype=object), "not a plain numeric .npy file"),
        (np.array([[True, False], [False, True]]), "non-numeric data"),
    ],
    ids=["complex", "object", "bool"],
)
def test_npy_of_the_wrong_kind_is_refused_naming_the_file(tmp_path, arr, says):
    f = tmp_path / "d.npy"
    np.save(f, arr, allow_pickle=True)
    with pytest.raises(DataError, match=says) as err:
        NpyFile(FileConfig.model_validate({"path": str(f)})).load(None)
    assert "d.npy" in str(err.value)


@pytest.mark.parametrize(
    "write, says",
    [
        (lambda f: np.savez(f, X=np.zeros((6, 3))), "an .npz archive, not a .npy file"),
        (lambda f: f.write_bytes(b""), "not a .npy file (empty, or another format)"),
        (lambda f: f.write_bytes(b"\x93NUMPY\x01\x00zz"), "not a plain numeric .npy file (EOF"),
    ],
    ids=["npz", "empty", "cut-header"],
)
def test_a_file_that_is_no_npy_is_refused_at_validate_naming_the_field(
    tmp_path, capsys, write, says
):
    """Once an AttributeError or EOFError with exit 1 (an .npz named as .npy, a zero-byte file):
    the header is read when the scenario is validated, one line at the path's line, exit 2."""
    from testbed.cli.main import main

    f = tmp_path / "d.npy"
    write(f)
    if not f.exists():  # np.savez appends .npz
        (tmp_path / "d.npy.npz").rename(f)
    sc, err = _validate_file_scenario(tmp_path, main, capsys, "npy", "d.npy")
    assert err.startswith(f"error: {sc}:") and "data.dataset.params.path: " + says in err, err
    assert err.count("\n") == 1


def _validate_file_scenario(tmp_path, main, capsys, dataset: str, path: str):
    """`testbed validate` of a two-party FedWAD scenario on data file ``path``: exit 2 asserted;
    (the scenario's path, what it printed on stderr)."""
    sc = tmp_path / "s.yaml"
    sc.write_text(
        TINY.split("data:")[0]
        + f"data:\n  dataset: {{name: {dataset}, params: {{path: {path}}}}}\n"
        + "  partition: {name: iid}\n  parties: [alice, bob]\n"
        + "protocol: {name: fedwad, params: {support_size: 5, iterations: 3}}\n"
    )
    assert main(["validate", str(sc)]) == 2
    return sc, capsys.readouterr().err


@pytest.mark.parametrize("text", ["", "\n \n\t\n"], ids=["empty", "blank"])
def test_a_csv_without_rows_is_refused_at_validate(tmp_path, capsys, text):
    from testbed.cli.main import main

    (tmp_path / "d.csv").write_text(text)
    _, err = _validate_file_scenario(tmp_path, main, capsys, "csv", "d.csv")
    assert err.endswith(": data.dataset.params.path: d.csv is empty (no rows)\n"), err


# ----------------------------------------------------------------------------- attacks that do not apply
TINY = (Path(__file__).parent.parent / "scenarios" / "contract_tiny.yaml").read_text()


def _scenario(tmp_path, attacks: str, observer: str = "server"):
    from testbed.scenario.loading import load_scenario

    f = tmp_path / "s.yaml"
    text = TINY.replace("observer: server", f"observer: {observer}")
    f.write_text(text + "output: {save_transcript: true}\n" + attacks)
    return load_scenario(f)


def test_an_attack_that_does_not_apply_is_an_error_before_running(tmp_path):
    from testbed.scenario.preflight import preflight

    sc = _scenario(tmp_path, "attacks:\n  - {name: sent_rows}\n  - name: measure_inversion\n")
    with pytest.raises(TestbedError) as err:
        preflight(sc)
    msg = str(err.value)
    line = TINY.count("\n") + 4  # + output, attacks:, attacks[0]: the line of attacks[1]
    assert msg.startswith(f"{tmp_path / 's.yaml'}:{line}: attacks[1] 'measure_inversion' does")
    assert "'fedwad'" in msg
    assert "triangle_wad" in msg and "\n" not in msg


def test_skip_lists_it_as_skipped(tmp_path):
    from testbed.scenario.preflight import preflight

    sc = _scenario(tmp_path, "attacks:\n  - {name: measure_inversion, if_not_applicable: skip}\n")
    assert preflight(sc) == [
        "attacks[0] measure_inversion: skipped on protocol 'fedwad' (applies to: triangle_wad, "
        "triangle_wad_marketplace)"
    ]


def test_duplicate_labels_are_refused_before_running(tmp_path):
    from testbed.scenario.preflight import preflight

    sc = _scenario(
        tmp_path,
        "attacks:\n  - {name: sent_rows, label: x}\n  - {name: fedwad_distributional, label: x}\n",
    )
    with pytest.raises(TestbedError, match=r"s\.yaml: attacks\[1\]: label 'x' already used"):
        preflight(sc)


def test_the_run_refuses_it_too_and_testbed_attack_says_why_there_are_no_rows(tmp_path):
    from testbed.run import execute
    from testbed.run.rerun import rerun_attacks, why_no_rows

    sc = _scenario(tmp_path, "attacks:\n  - {name: sent_rows}\n")
    execute(sc, tmp_path / "run")
    with pytest.raises(TestbedError, match="does not apply to protocol 'fedwad'"):
        rerun_attacks(tmp_path / "run", [{"name": "measure_inversion", "params": {}}])
    rows, sc2 = rerun_attacks(
        tmp_path / "run",
        [
            {"name": "measure_inversion", "params": {}, "if_not_applicable": "skip"},
            {"name": "sent_rows", "params": {}},
        ],
        observer="alice",
    )
    assert rows == []  # alice sees no row bob sent (fedwad sends interpolating measures)
    why = why_no_rows(sc2, rows)
    assert why[0].startswith("measure_inversion: does not apply to protocol 'fedwad'")
    assert why[1].startswith("sent_rows: ran as alice, but returned no output for any target")


# ----------------------------------------------------------------------------- the report says it
# a run and its report (4.5 s): make test keeps the 'not measured' wording (test_vocabulary) and
# the refusals before running (above); make test-slow
@pytest.mark.slow
def test_report_keeps_labels_and_says_no_output_never_no_leak(tmp_path):
    from testbed.report.writer import write_report
    from testbed.run import execute

    sc = _scenario(
        tmp_path,
        "attacks:\n  - {name: fedwad_distributional, label: geo}\n  - {name: sent_rows}\n",
        observer="alice",
    )
    out = execute(sc, tmp_path / "run")
    assert out.results["attacks_without_output"] == ["sent_rows"]  # alice sees no row of bob
    assert {r["label"] for r in out.results["attacks"]} == {"geo"}
    md = write_report(tmp_path / "run").with_suffix(".md").read_text()
    head = md.split("## Headline", 1)[1].split("\n## ", 1)[0]
    assert "Produced no output: sent_rows" in head and "not evidence of no leak" in head
    assert "geo" in head and "baseline" in head
    cov = md.split("Coverage: protocol × threat", 1)[1].split("\n## ", 1)[0]
    assert "(geo)" in cov and "record" in cov  # under its label, with the record-leak rule


# ~50 s on 2 busy cores; the report's wording test stays in make test
@pytest.mark.slow
def test_testbed_run_names_each_setting_and_says_which_attack_gave_nothing(tmp_path, capsys):
    """`testbed run` prints a line for an attack that ran and gave nothing, and two settings of
    one attack under their own labels (they printed the same line before)."""
    from testbed.cli.main import main

    _scenario(
        tmp_path,
        "attacks:\n  - {name: fedwad_distributional, params: {method: optimisation, steps: 20}}\n"
        "  - {name: fedwad_distributional, params: {method: optimisation, steps: 40}}\n"
        "  - {name: sent_rows}\n",
        observer="alice",
    )
    assert main(["run", str(tmp_path / "s.yaml"), "-q", "--out", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = [ln.split(" on ")[0] for ln in lines if ln.startswith("attack fedwad_distributional")]
    assert len(shown) == 2 and len(set(shown)) == 2, shown  # one label per setting
    said = [ln for ln in lines if ln.startswith("attack sent_rows")]
    assert said == [
        "attack sent_rows: ran as alice, but returned no output for any target (nothing it reads "
        "was in this observer's view)"
    ]
