"""Every row kind of the results files under one versioned schema (issue 49): a run's
results.json carries ``schema_version`` and is checked before it is written; the report parses
results.json, results.jsonl, attacks-*.json and audit.json once through the typed models, so a
misspelt or missing field is one line naming the file and the field (exit 2); a results.json
written before the version field reads as version 1; a newer version is refused by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from testbed.cli.audit import write_audit_rows
from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.report.model import load_rows
from testbed.run import execute
from testbed.run.manifest import write_manifest
from testbed.run.results import results_digests
from testbed.scenario.loading import load_scenario
from testbed.scoring.names import Metric
from testbed.scoring.results_models import RunResults
from testbed.scoring.results_schema import (
    RESULTS_SCHEMA_VERSION,
    read_results,
    read_sweep_rows,
    results_json_schema,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rows") / "run"
    execute(load_scenario(ROOT / "scenarios" / "contract_tiny.yaml"), out)
    return out


def _copy(run_dir: Path, tmp_path: Path, edit=None) -> Path:
    """A copy of the run with ``edit`` applied to its results.json, sealed again (its digests
    and manifest), as a run of another testbed version would have written it."""
    work = tmp_path / "run"
    shutil.copytree(run_dir, work)
    if edit is not None:
        res = json.loads((work / "results.json").read_text())
        edit(res)
        res["digests"].update({k: v for k, v in results_digests(res).items() if k != "format"})
        (work / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True))
        write_manifest(work)
    return work


def _report(work: Path, capsys) -> tuple[int, str]:
    code = main(["report", str(work)])
    return code, capsys.readouterr().err.strip()


def test_a_run_writes_its_schema_version_and_a_schema_row(run_dir):
    res = json.loads((run_dir / "results.json").read_text())
    assert res["schema_version"] == RESULTS_SCHEMA_VERSION == 2
    typed = read_results(run_dir / "results.json")
    assert isinstance(typed, RunResults) and typed.seed == res["seed"]
    # the model's JSON form is the file (nothing added, dropped or rounded)
    assert typed.model_dump(mode="json", by_alias=True, exclude_unset=True) == res


def test_the_report_parses_results_once_into_the_typed_model(run_dir):
    (row,), _ = load_rows(run_dir)
    assert isinstance(row["results"], RunResults)
    # a name the schema does not declare is an error, never a silent None
    with pytest.raises(TestbedError, match="RunResults has no field 'privacy_epsilom'"):
        row["results"].get("privacy_epsilom")
    assert row["results"].get(Metric.PRIVACY_EPSILON) == "inf"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (
            lambda r: r.update(privacy_epsilom=r.pop("privacy_epsilon")),
            "privacy_epsilom: Extra inputs are not permitted (did you mean 'privacy_epsilon'?)",
        ),
        (lambda r: r.pop("seed"), "seed: Field required"),
        (lambda r: r["accuracy"]["wasserstein"].pop("relative_error"), "relative_error"),
        (lambda r: r["transcript"].update(mesages=1), "transcript.mesages"),
    ],
    ids=["misspelt", "missing", "missing-metric", "misspelt-nested"],
)
def test_a_wrong_results_field_is_one_line_naming_file_and_field(
    run_dir, tmp_path, capsys, edit, field
):
    work = _copy(run_dir, tmp_path, edit)
    code, err = _report(work, capsys)
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert str(work / "results.json") in err and field in err, err


def test_results_without_a_version_read_as_version_1(run_dir, tmp_path, capsys):
    # results.json written before the field: the same layout without it
    work = _copy(run_dir, tmp_path, lambda r: r.pop("schema_version"))
    assert read_results(work / "results.json").schema_version is None
    code, err = _report(work, capsys)
    assert code == 0, err


def test_a_newer_schema_version_is_refused_by_name(run_dir, tmp_path, capsys):
    work = _copy(run_dir, tmp_path, lambda r: r.update(schema_version=3))
    code, err = _report(work, capsys)
    assert code == 2
    assert err.endswith(
        "results.json: results schema 3; this testbed reads versions 1 to 2 "
        "(a newer testbed wrote it?)"
    ), err


def test_a_wrong_sweep_line_names_its_line(tmp_path, run_dir):
    res = json.loads((run_dir / "results.json").read_text())
    good = {"cell": "c0", "index": 0, "seed": 7, "setting": {}, "labels": {}, "label": "base"}
    bad = {**good, "cell": "c1", "results": {**res, "atacks": []}}
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({**good, "results": res}) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TestbedError, match=r"results.jsonl:2: results.atacks: Extra inputs"):
        read_sweep_rows(path)


def test_audit_rows_are_checked_before_audit_json_is_written(tmp_path):
    row = {"party": "alice", "method": "one-run", Metric.EPS_LOWER: 0.5, "violated": False}
    write_audit_rows([row], tmp_path)  # a schema row: written
    assert json.loads((tmp_path / "audit.json").read_text())[0]["eps_lower"] == 0.5
    with pytest.raises(TestbedError, match=r"audit.json: row 0: eps_lowr: Extra inputs"):
        write_audit_rows([{"party": "alice", "eps_lowr": 0.5}], tmp_path / "bad")
    assert not (tmp_path / "bad" / "audit.json").exists()


def test_the_published_schema_has_every_row_kind():
    schema = results_json_schema()
    assert {"RunResults", "AttackRow", "SweepRow", "AttackRowsFile", "AuditRow"} <= set(
        schema["$defs"]
    )
    assert schema["properties"]["schema_version"] and "seed" in schema["required"]
    for section in ("AccuracyEntry", "TranscriptInfo", "PrivacyClaim", "Digests"):
        assert schema["$defs"][section]["additionalProperties"] is False, section
