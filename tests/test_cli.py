"""Malformed scenarios end in one line naming the file/line/field, exit code 2, no traceback,
and nothing from the file is ever executed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.cli.main import main

# written out (not tests/_scenarios.gaussians): the malformed-scenario cases assert line numbers
GOOD = """\
name: tiny
seed: 3
data:
  dataset:
    name: gaussians
    params:
      d: 2
      components:
        - {n: 20, mean: 0.0}
        - {n: 15, mean: 3.0}
  partition: {name: class_subsets, params: {classes: [[0], [1]]}}
  parties: [alice, bob]
protocol:
  name: fedwad
  params: {support_size: 4, iterations: 3}
"""


def _with_dataset(spec: str) -> str:
    """GOOD with its dataset (and class partition) replaced by ``dataset: <spec>``."""
    start = GOOD.index("  dataset:")
    end = GOOD.index("  parties:")
    return GOOD[:start] + f"  dataset: {spec}\n" + GOOD[end:]


def _run(tmp_path: Path, text: str, capsys, *extra: str, command: str = "validate"):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    code = main([command, str(f), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_good_scenario_validates(tmp_path, capsys):
    code, out, err = _run(tmp_path, GOOD, capsys)
    assert code == 0, err
    assert "ok" in out


@pytest.mark.parametrize(
    ("mutate", "line", "needle"),
    [
        (lambda s: s.replace("seed: 3", "seed: 3\ncolour: red"), 3, "colour: unknown key"),
        (
            lambda s: s.replace("support_size: 4", "support_size: four"),
            15,
            "protocol.params.support_size",
        ),
        (
            lambda s: s.replace("name: fedwad", "name: fedwat"),
            14,
            "unknown protocol 'fedwat'; known: ",
        ),
        (
            lambda s: s.replace("{n: 15, mean: 3.0}", "{n: -15, mean: 3.0}"),
            10,
            "data.dataset.params.components[1].n",
        ),
        (
            lambda s: s.replace("iterations: 3}", "iterations: 3, bogus: 1}"),
            15,
            "protocol.params.bogus: unknown key",
        ),
        (
            lambda s: s.replace("parties: [alice, bob]", "parties: [alice, alice]"),
            12,
            "data.parties",
        ),
        (
            lambda s: s.replace("  name: fedwad\n", ""),
            13,
            "protocol.name: required field is missing",
        ),
        (
            lambda s: s + "threat_model: {observer: carol}\n",
            16,
            "threat_model.observer: unknown party 'carol'",
        ),
        (lambda s: s.replace("seed: 3", "seed: [3"), 3, "YAML syntax error"),
    ],
    ids=[
        "unknown-key",
        "wrong-type",
        "unknown-plugin",
        "negative-size",
        "unknown-param",
        "duplicate-party",
        "missing-field",
        "unknown-observer",
        "yaml-syntax",
    ],
)
def test_malformed_scenarios_fail_with_one_line(tmp_path, capsys, mutate, line, needle):
    code, out, err = _run(tmp_path, mutate(GOOD), capsys)
    assert code == 2
    assert err.count("\n") == 1, err  # exactly one line
    assert err.startswith("error: ")
    assert f"s.yaml:{line}:" in err, err
    assert needle in err, err
    assert "Traceback" not in err


def test_python_tag_is_refused_and_never_executed(tmp_path, capsys):
    marker = tmp_path / "pwned"
    text = GOOD.replace("seed: 3", f'seed: !!python/object/apply:os.system ["touch {marker}"]')
    code, _, err = _run(tmp_path, text, capsys)
    assert code == 2
    assert "not allowed" in err and "s.yaml:2:" in err
    assert not marker.exists()


def test_missing_data_file_names_the_field(tmp_path, capsys):
    text = _with_dataset("{name: csv, params: {path: nowhere.csv}}")
    code, _, err = _run(tmp_path, text, capsys)
    assert code == 2
    assert "data.dataset.params.path: data file not found" in err
    assert "s.yaml:4:" in err


def test_nan_in_data_names_file_and_line(tmp_path, capsys):
    csv = tmp_path / "pts.csv"
    csv.write_text("x,y\n1,2\n3,nan\n5,6\n")
    text = _with_dataset("{name: csv, params: {path: pts.csv}}")
    code, _, err = _run(tmp_path, text, capsys, "--out", str(tmp_path / "run"), "-q", command="run")
    assert code == 2
    assert "pts.csv:3: NaN or inf in column 1" in err
    assert err.count("\n") == 1


def test_missing_scenario_file(capsys, tmp_path):
    code = main(["validate", str(tmp_path / "nope.yaml")])
    assert code == 2
    assert "scenario file not found" in capsys.readouterr().err


def test_process_exit_code_and_no_traceback(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(GOOD.replace("seed: 3", "seed: -1"))
    proc = subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(f)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "bad.yaml:2: seed" in proc.stderr


def test_run_writes_run_directory_and_transcript_command(tmp_path, capsys):
    code, out, err = _run(
        tmp_path, GOOD, capsys, "--out", str(tmp_path / "run"), "-q", command="run"
    )
    assert code == 0, err
    run = tmp_path / "run"
    for f in [
        "results.json",
        "resolved.yaml",
        "config_hash",
        "envelopes.jsonl",
        "payloads.npz",
        "run_info.json",
    ]:
        assert (run / f).exists(), f
    assert "rel. error" in out and "results:" in out
    assert main(["transcript", str(run)]) == 0
    shown = capsys.readouterr().out
    assert "fedwad.xi_mu" in shown and "server -> alice" in shown
    assert main(["plugins"]) == 0
    assert "fedwad" in capsys.readouterr().out


def test_run_prints_the_tasks_own_metrics(tmp_path, capsys):
    """FedBary's pinned task metrics (contribution Spearman, detection AUC) are printed under
    the quantities, as results.json has them; a distance protocol prints no such line (its
    distance_accuracy is only 1 - the error above it)."""
    import json

    scenario = Path(__file__).parents[1] / "scenarios" / "contract_tiny_fedbary.yaml"
    assert main(["run", str(scenario), "--out", str(tmp_path / "fb"), "-q"]) == 0
    out = capsys.readouterr().out
    util = json.loads((tmp_path / "fb" / "results.json").read_text())["utility"]
    line = next(x for x in out.splitlines() if x.startswith("task utility:"))
    assert line == (
        f"task utility: contribution_spearman {util['contribution_spearman']:.3f}, "
        f"detection_auc {util['detection_auc']:.3f}"
    )
    code, out, err = _run(tmp_path, GOOD, capsys, "--out", str(tmp_path / "w"), "-q", command="run")
    assert code == 0 and "task utility" not in out, err


def _modules_after(code: str) -> set[str]:
    """The heavy modules a fresh interpreter has loaded after running ``code``."""
    names = ("torch", "ot", "matplotlib", "testbed.report.writer", "testbed.run.execute")
    probe = f"import sys\n{code}\nprint('\\nloaded:', *(m for m in {names!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=Path.cwd()
    )
    return set(out.stdout.rsplit("loaded:", 1)[1].split())


def test_help_imports_no_command(tmp_path):
    """`testbed --help` builds the parser only: no command module, so no torch, POT, report."""
    code = (
        "from testbed.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
    )
    assert _modules_after(code) == set()


def test_validate_does_not_load_the_report_or_the_runner(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(GOOD)
    code = f"from testbed.cli.main import main\nassert main(['validate', {str(f)!r}]) == 0\n"
    loaded = _modules_after(code)
    assert not loaded & {"testbed.report.writer", "testbed.run.execute", "matplotlib"}


# ----------------------------------------------------------------------------- a new user's path
def test_a_scenario_elsewhere_announces_its_run_directory(tmp_path, monkeypatch, capsys):
    """Issue 24, user's list 1 and 2: the run of a scenario kept in another folder goes under
    ./runs/ and the first line says so; report/attack/transcript take the scenario (file or
    name) and use its latest run, saying which; two runs given at once are one clear line."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    scenario = elsewhere / "tiny.yaml"
    scenario.write_text(GOOD)
    monkeypatch.chdir(work)
    assert main(["run", str(scenario), "-q"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    (run1,) = (work / "runs").iterdir()
    assert first.startswith(f"run directory: runs/{run1.name}/ (under the current directory")
    assert "not beside the scenario" in first
    # a second run of the edited scenario: a new hash, a second directory
    scenario.write_text(GOOD.replace("seed: 3", "seed: 4"))
    assert main(["run", str(scenario), "-q"]) == 0
    capsys.readouterr()
    (run2,) = set((work / "runs").iterdir()) - {run1}
    os.utime(run1 / "results.json", (1, 1))  # run1 finished long ago
    # a name: its latest run; the file: the run of its settings as they are now, said on stderr
    assert main(["transcript", "tiny", "--limit", "1"]) == 0
    cap = capsys.readouterr()
    assert cap.err.splitlines() == [
        f"using runs/{run2.name}/ (the latest of 2 runs of scenario 'tiny')"
    ]
    assert "using" not in cap.out
    os.utime(run2 / "results.json", (1, 1))  # now run1 is the latest, but not the file's
    os.utime(run1 / "results.json", (2, 2))
    assert main(["transcript", str(scenario), "--limit", "1"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"using runs/{run2.name}/ (the run of {scenario} as it is now, one of 2 runs)"
    ]
    scenario.write_text(GOOD.replace("seed: 3", "seed: 5"))  # edited, not run again
    assert main(["transcript", str(scenario), "--limit", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"using runs/{run1.name}/ (the latest of 2 runs of scenario 'tiny'; none was made with "
        f"{scenario} as it is now ("
    )
    assert err[0].endswith(f"`testbed run {scenario}` makes one)")
    # what the README's old glob gave: two run directories
    assert main(["report", "runs/" + run1.name, "runs/" + run2.name]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 run directories given" in err[0]
    assert "testbed report SCENARIO.yaml" in err[0] and "unrecognized" not in err[0]
    # a run directory given as such is used without a word
    assert main(["transcript", str(run1), "--limit", "1"]) == 0
    assert "using" not in str(capsys.readouterr())
    # nothing to use: one line, exit 2
    assert main(["attack", "no_such_scenario"]) == 2
    assert "no finished run of scenario 'no_such_scenario'" in capsys.readouterr().err


def test_out_onto_another_scenarios_run_is_refused_before_running(tmp_path, capsys):
    """`--out` onto a directory holding another scenario's run: one line, exit 2, that run kept
    (a rerun of the same scenario with other settings replaces its own run)."""
    (tmp_path / "tiny.yaml").write_text(GOOD)
    (tmp_path / "other.yaml").write_text(GOOD.replace("name: tiny", "name: other"))
    out = str(tmp_path / "here")
    assert main(["run", str(tmp_path / "tiny.yaml"), "-q", "--out", out]) == 0
    before = (tmp_path / "here" / "results.json").read_bytes()
    capsys.readouterr()
    assert main(["run", str(tmp_path / "other.yaml"), "-q", "--out", out]) == 2
    cap = capsys.readouterr()
    assert cap.err.strip() == (
        f"error: {out}: holds a run of scenario 'tiny', not 'other'; choose another --out, "
        "or delete that directory to replace it"
    )
    assert cap.out == "" and (tmp_path / "here" / "results.json").read_bytes() == before
    (tmp_path / "tiny.yaml").write_text(GOOD.replace("seed: 3", "seed: 4"))
    assert main(["run", str(tmp_path / "tiny.yaml"), "-q", "--out", out]) == 0
    assert (tmp_path / "here" / "results.json").read_bytes() != before


def test_a_scenario_in_the_current_directory_is_announced_plainly(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(GOOD)
    assert main(["run", "tiny.yaml", "-q", "--out", "here"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "run directory: here/"


SWEPT = (
    GOOD
    + """\
defenses:
  - {name: gaussian_measure_noise, params: {clip_norm: 6.0, noise_multiplier: 1.0}}
sweep:
  - defenses[0].params.noise_multiplier: [1.0, 0.1]
  - defenses: [[]]
"""
)


def test_sweep_summary_names_fields_and_puts_the_baseline_first(tmp_path, capsys):
    f = tmp_path / "swept.yaml"
    f.write_text(SWEPT)
    assert main(["run", str(f), "-q", "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("protocol"))
    cols = [re.split(r"\s{2,}", line.strip()) for line in lines[head : head + 5]]
    assert cols[0] == ["protocol", "setting", "seeds", "rel. error", "claimed eps"]
    # the baseline first, then the sweep's own order (1.0 before 0.1, not alphabetical)
    assert [c[1] for c in cols[2:]] == ["no defense", "noise_multiplier=1", "noise_multiplier=0.1"]
    # the report's number format (testbed.report.fmt): three significant figures, a relative
    # error from 1000 % on in words; no "120770.24 %"
    errors = [c[3] for c in cols[2:]]
    assert all(re.fullmatch(r"\d{1,3}(\.\d+)? %|over 1000 % \(.+×\)", e) for e in errors)
    assert errors[1].startswith("over 1000 %")  # sigma = 1 on 20 points: the estimate is lost
    assert all(re.fullmatch(r"\d{1,3}(\.\d+)?|∞", c[4]) for c in cols[2:]), cols
    assert "rel. error: relative error of wasserstein, mean over seeds" in lines
    # a sweep has one transcript per cell: `testbed transcript SWEEP` says so and names one
    assert main(["transcript", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a sweep of 3 cells" in err[0], err
    cell = err[0].rsplit("testbed transcript ", 1)[1]
    assert main(["transcript", cell, "--limit", "1"]) == 0


def test_run_summary_folds_long_per_party_groups():
    """One quantity per party and kind (FedBary with 100 clients: 200 rows) would fill a screen:
    a group of more than five shows its first three, in natural order, and one row with how many
    more and the largest error among them; short groups and single quantities stay whole."""
    from testbed.cli.run import quantity_rows
    from testbed.run.evaluate import accuracy_of

    parties = {f"client_{i}": {} for i in range(12)} | {"server": {}}
    acc = {}
    for i in reversed(range(12)):  # the stored order is not the natural one
        acc[f"distance_client_{i}"] = accuracy_of(1.0 + i / 100, 1.0)
    acc["contribution_client_1"] = accuracy_of(0.5, 0.5)
    acc["contribution_client_2"] = accuracy_of(0.5, 0.4)
    acc["wasserstein"] = accuracy_of(2.0, 1.0)
    rows, hidden = quantity_rows(acc, parties)
    names = [r[0] for r in rows]
    assert names == [
        "distance_client_0",
        "distance_client_1",
        "distance_client_2",
        "... 9 more distance_*",
        "contribution_client_1",
        "contribution_client_2",
        "wasserstein",
    ]
    assert hidden == 9
    assert rows[3][3] == "max 11 %"  # client_11's error, the largest of those folded
    assert rows[1][3] == "1 %" and rows[-1][3] == "100 %"
