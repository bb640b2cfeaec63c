"""Whole runs with hostile attacks (issue 21, breaks 1, 2 and 6): ``testbed run`` in process.

* break 1: an attack walks ``/proc`` up to the driver, finds the run directory from the lock it
  holds open, reads ``resolved.yaml`` and rebuilds the World: exact recovery 1 unsandboxed, 0 in
  the sandbox;
* break 2: an attack rebuilds the World from its ``rng``'s seed: the seed is no longer there;
* break 6: an attack that raises, one that hangs and one that returns 300 MiB each get a failure
  row beside the honest attack's rows; results and report are written; exit code 3;
* an attack aimed at its own observer is refused at validation;
* an honest attack's rows are the same with and without the sandbox.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import warnings
from pathlib import Path

import pytest
import yaml
from _hostile_attack import Hostile
from _scenarios import tiny

from testbed.cli.main import main
from testbed.registry import ATTACKS
from testbed.sandbox.confine import isolation_level

pytestmark = pytest.mark.skipif(
    isolation_level() == "process",
    reason="this kernel offers no Landlock: attacks cannot be sandboxed here",
)


def _register(monkeypatch) -> None:
    monkeypatch.setitem(ATTACKS._items, Hostile.name, Hostile)
    monkeypatch.setitem(ATTACKS._origins, Hostile.name, f"{Hostile.__module__}.Hostile")


@pytest.fixture(autouse=True)
def _hostile_registered(monkeypatch):
    _register(monkeypatch)


def _run(tmp_path, attacks: list[dict], limits: dict | None = None, seed="7"):
    rest = "threat_model: {observer: server}\nattacks: " + json.dumps(attacks)
    if limits:
        rest += "\nlimits: " + json.dumps(limits)
    text = tiny("hostile", rest).replace("seed: 7", f"seed: {seed}")
    f = tmp_path / "s.yaml"
    f.write_text(text)
    out = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(["run", str(f), "--out", str(out), "--quiet"])
    rows = json.loads((out / "results.json").read_text())["attacks"]
    return rc, rows, out


def _recovered(rows, attack="test_sandbox_hostile") -> list[float]:
    return [r["exact_recovery"] for r in rows if r["attack"] == attack]


@pytest.fixture(scope="module")
def sandboxed_rows(tmp_path_factory) -> list[dict]:
    """One sandboxed run of two hostile attacks (4 s on an idle core, once for the tests that
    read its rows): ``thief`` walks /proc up to the run directory and rebuilds the World,
    ``reseed`` rebuilds it from its rng's seed."""
    text = tiny("hostile", "threat_model: {observer: server}").replace("seed: 7", "seed: {seed}")
    spec = [
        {"name": "test_sandbox_hostile", "label": "thief", "params": {"mode": "thief"}},
        {
            "name": "test_sandbox_hostile",
            "label": "reseed",
            "params": {"mode": "reseed", "arg": text},
        },
    ]
    with pytest.MonkeyPatch.context() as mp:
        _register(mp)
        rc, rows, _ = _run(tmp_path_factory.mktemp("sandboxed"), spec, {"attack_sandbox": True})
    assert rc == 0
    return rows


def _labelled(rows, label) -> list[dict]:
    return [r for r in rows if r["label"] == label]


def test_an_attack_cannot_find_the_run_directory_and_rebuild_the_world(sandboxed_rows):
    rows = _labelled(sandboxed_rows, "thief")
    assert _recovered(rows) == [0.0, 0.0]
    assert all(r["isolation"].startswith("landlock") for r in rows)


# the control: 4 s on an idle core (test_no_row_is_aimed_at_the_coalition runs the same thief
# unsandboxed in make test: it recovers bob's rows)
@pytest.mark.slow
def test_without_the_sandbox_the_attack_rebuilds_the_world(tmp_path):
    spec = [{"name": "test_sandbox_hostile", "params": {"mode": "thief"}}]
    rc, rows, _ = _run(tmp_path, spec, {"attack_sandbox": False})
    assert rc == 0
    assert _recovered(rows) == [1.0, 1.0]
    assert all(r["isolation"].startswith("process") for r in rows)


def test_the_rng_does_not_carry_the_root_seed(sandboxed_rows):
    assert _recovered(_labelled(sandboxed_rows, "reseed")) == [0.0, 0.0]


# a run waiting out a 5 s attack limit, 10 s on an idle core; each failure alone stays in make test
# (test_sandbox.py: raises, hangs, 300 MiB; test_report.py: a run whose every attack failed)
@pytest.mark.slow
def test_failed_attacks_are_rows_and_the_run_is_kept(tmp_path, capsys):
    spec = [
        {"name": "test_sandbox_hostile", "label": "raises", "params": {"mode": "raise"}},
        {"name": "test_sandbox_hostile", "label": "hangs", "params": {"mode": "hang"}},
        {"name": "test_sandbox_hostile", "label": "too_big", "params": {"mode": "big"}},
        {"name": "fedwad_distributional"},
    ]
    rc, rows, out = _run(tmp_path, spec, {"attack_seconds": 5})
    assert rc == 3
    failed = {r["label"]: (r["failed"], r["reason"]) for r in rows if "failed" in r}
    assert set(failed) == {"raises", "hangs", "too_big"}
    assert failed["raises"][0] == "run" and "KeyError" in failed["raises"][1]
    assert failed["hangs"][0] == "time" and "attack_seconds = 5 s" in failed["hangs"][1]
    assert failed["too_big"][0] == "output" and "attack_output_mb" in failed["too_big"][1]
    honest = [r for r in rows if r["attack"] == "fedwad_distributional"]
    assert len(honest) == 2 and all("leakage" in r for r in honest)
    assert (out / "report.html").is_file()
    report = (out / "report.md").read_text()
    assert "Attack isolation: landlock" in report and "hangs (observer server) FAILED" in report
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: attack ") for line in err)


def test_an_attack_aimed_at_its_own_observer_is_refused(tmp_path, capsys):
    rest = (
        "threat_model: {observer: alice}\nattacks: [{name: fedwad_distributional, target: alice}]"
    )
    f = tmp_path / "s.yaml"
    f.write_text(tiny("self", rest))
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "alice" in err[0] and "observer" in err[0]


@pytest.mark.parametrize(
    ("scenario", "attack"),
    [
        ("scenarios/contract_tiny.yaml", "fedwad_distributional"),
        ("scenarios/contract_tiny_triangle_wad.yaml", "measure_inversion"),
    ],
)
# each attack run twice or a forkserver killed: 55-125 s on 2 busy cores; the sandboxed run's
# other tests stay in make test
@pytest.mark.slow
def test_honest_rows_are_the_same_with_and_without_the_sandbox(tmp_path, scenario, attack):
    raw = yaml.safe_load(open(scenario))
    raw["attacks"] = [*(raw.get("attacks") or []), {"name": attack}]
    runs = []
    for sandbox in (True, False):
        raw["limits"] = {**(raw.get("limits") or {}), "attack_sandbox": sandbox}
        f = tmp_path / f"{sandbox}.yaml"
        f.write_text(yaml.safe_dump(raw))
        out = tmp_path / f"run-{sandbox}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert main(["run", str(f), "--out", str(out), "--quiet"]) == 0
        rows = json.loads((out / "results.json").read_text())["attacks"]
        assert rows
        runs.append([{k: v for k, v in r.items() if k != "isolation"} for r in rows])
    assert runs[0] == runs[1]


# slow (5 s: a whole run with an unsandboxed thief): make test keeps the coalition's scoring in
# tests/test_coalition_rule.py (test_run_and_attack_score_a_coalition_against_its_best_members_baseline)
@pytest.mark.slow
def test_no_row_is_aimed_at_the_coalition(tmp_path):
    """A plugin that guesses every party (this one steals every party's rows, unsandboxed)
    gets no row for a colluder: the coalition holds those rows; only bob is scored."""
    text = tiny("hostile", "threat_model: {observer: server, colluders: [alice]}\n")
    text += "attacks: [{name: test_sandbox_hostile, params: {mode: thief}}]\n"
    text += "limits: {attack_sandbox: false}\n"
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["run", str(f), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    rows = json.loads((tmp_path / "run" / "results.json").read_text())["attacks"]
    assert [(r["target"], r["exact_recovery"]) for r in rows] == [("bob", 1.0)]


# fault injection: ~45 s on 2 busy cores
@pytest.mark.slow
def test_a_killed_forkserver_costs_its_attack_a_row_not_the_run(tmp_path, monkeypatch, capsys):
    """Fault 6 (issue 48): SIGKILL of the attacks' forkserver as it is asked for an attack's
    process. Stopped first, so it dies before it forks, whatever the machine's load. Before,
    the run ended with ``EOFError: unexpected EOF``, exit 1 and no run directory."""
    from multiprocessing import forkserver

    real, killed = forkserver.connect_to_new_process, []

    def connect_then_die(fds):
        forkserver.ensure_running()
        pid = forkserver._forkserver._forkserver_pid
        if not killed:
            os.kill(pid, signal.SIGSTOP)  # the request waits in its socket
        got = real(fds)
        if not killed:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        return got

    monkeypatch.setattr(forkserver, "connect_to_new_process", connect_then_die)
    spec = [
        {"name": "test_sandbox_hostile", "label": "first", "params": {"mode": "read"}},
        {"name": "fedwad_distributional"},
    ]
    rc, rows, out = _run(tmp_path, spec)
    assert rc == 3 and killed
    (failed,) = [r for r in rows if "failed" in r]
    assert failed["label"] == "first" and failed["failed"] == "sandbox"
    assert f"forkserver process (pid {killed[0]}) was killed by SIGKILL" in failed["reason"]
    honest = [r for r in rows if r["attack"] == "fedwad_distributional"]
    assert len(honest) == 2 and all("leakage" in r for r in honest)  # a new server started
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: attack 'first' failed in sandbox: {failed['reason']}"]
    assert main(["verify", str(out)]) == 0


# each attack run twice or a forkserver killed: 55-125 s on 2 busy cores; the sandboxed run's
# other tests stay in make test
@pytest.mark.slow
def test_a_forkserver_killed_while_its_attack_runs_is_named_in_that_row(tmp_path):
    """The server killed once it has forked the first attack's process: that attack lives on
    (its result has a pipe of its own); when it then dies without a result, its row names the
    server's death, with which its exit status went (multiprocessing says exit code 255)."""
    from multiprocessing import forkserver

    killed = []

    def kill_once_it_forked():
        while not killed:
            pid = forkserver._forkserver._forkserver_pid
            try:
                forked = pid and Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                forked = None
            if forked:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.02)

    thread = threading.Thread(target=kill_once_it_forked, daemon=True)
    thread.start()
    spec = [
        {"name": "test_sandbox_hostile", "label": "dies", "params": {"mode": "exit", "arg": "3"}},
        {"name": "fedwad_distributional"},
    ]
    try:
        rc, rows, _ = _run(tmp_path, spec)
    finally:
        killed.append(None)
        thread.join(5)
    assert rc == 3
    (failed,) = [r for r in rows if "failed" in r]
    assert failed["label"] == "dies" and failed["failed"] == "run"
    assert failed["reason"] == (
        "its process ended without a readable result (its exit status was lost: the attacks' "
        f"forkserver process (pid {killed[0]}) was killed by SIGKILL while it ran)"
    )
    assert len([r for r in rows if "leakage" in r]) == 2  # the next attack started a new server
