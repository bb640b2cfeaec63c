"""Fault injection (issue 48, fault 9): the folder a run is being written into is deleted during
the run. The run must fail with one line naming the folder (exit 1) and commit nothing; before
the fix a later write made the folder again and the run was committed without resolved.yaml and
config_hash (exit 0)."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest
from _scenarios import tiny

from testbed.cli.main import main

execute_mod = importlib.import_module("testbed.run.execute")

SCENARIO = tiny("vanishing", "output: {save_transcript: true}\n")


@pytest.mark.parametrize("what", ["working folder", "whole runs folder"])
def test_a_run_whose_working_folder_vanished_fails_and_commits_nothing(
    tmp_path, monkeypatch, capsys, what
):
    # Prepare: the protocol's stage deletes the folder it is written into once it has run
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    runs = tmp_path / "runs"
    out = runs / "r"
    real = execute_mod.run_and_evaluate
    gone = []

    def then_delete(world, progress=False, spill_dir=None):
        res = real(world, progress, spill_dir)
        victim = Path(spill_dir) if what == "working folder" else runs
        shutil.rmtree(victim)
        gone.append(Path(spill_dir))
        return res

    monkeypatch.setattr(execute_mod, "run_and_evaluate", then_delete)

    # Execute
    rc = main(["run", str(scenario), "--out", str(out)])

    # Assert: exit 1, one line naming the vanished folder, no run committed
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1, err
    assert len(err) == 1 and err[0].startswith(f"error: {gone[0]}: "), err
    assert "vanished" in err[0]
    assert not (out / "results.json").exists()
    assert not (out / "resolved.yaml").exists()
    leftovers = [p for p in runs.glob("*")] if runs.exists() else []
    assert leftovers in ([], [out]) and not any(out.glob("*.json")), leftovers
