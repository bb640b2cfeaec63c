"""Run directories under concurrent processes, and a run into a used --out (issue 21, break 13
and point 5): `testbed attack` holds the lock from its first read to its last write;
`report`, `transcript` and `verify` hold a shared lock for their whole read; `testbed run`
writes its report before releasing; a new run replaces an earlier one whole, or refuses."""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from pathlib import Path

import pytest

from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.run.execute import execute
from testbed.run.rundir import RunDirLockedError, run_dir_lock
from testbed.scenario.loading import parse_scenario

TRIANGLE = """\
name: lock_triangle
seed: {seed}
data:
  dataset:
    name: gaussians
    params:
      d: 2
      components:
        - {{n: 30, mean: 0.0}}
        - {{n: 20, mean: 3.0}}
  partition: {{name: class_subsets, params: {{classes: [[0], [1]]}}}}
  parties: [alice, bob]
protocol:
  name: triangle_wad
  params: {{support_size: 4, t: 0.5}}
{rest}
"""
ATTACKS = "attacks:\n  - {name: measure_inversion}\n"


def _scenario(seed=7, rest=ATTACKS):
    return parse_scenario(TRIANGLE.format(seed=seed, rest=rest), "t.yaml", ".")


def _wait_for(path: Path, timeout=120.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > end:
            raise TimeoutError(path)
        time.sleep(0.02)


def _paused(flag: Path, go: Path, fn):
    """``fn`` that first says it started (``flag``) and waits for ``go``."""

    def wrapper(*a, **kw):
        flag.touch()
        _wait_for(go)
        return fn(*a, **kw)

    return wrapper


def _slow_attack(run_dir: str, flag: str, go: str) -> None:
    """Child: `testbed attack RUN --observer eavesdropper`, paused while it computes."""
    import testbed.run.rerun as rerun

    rerun.execute = _paused(Path(flag), Path(go), rerun.execute)
    raise SystemExit(main(["attack", run_dir, "--observer", "eavesdropper"]))


def _slow_reader(cmd: str, run_dir: str, flag: str, go: str) -> None:
    """Child: `testbed report|transcript RUN`, paused in the middle of its read."""
    if cmd == "report":
        import testbed.report.writer as writer

        writer.write_report = _paused(Path(flag), Path(go), writer.write_report)
    else:
        import testbed.cli.transcript as cli_transcript

        cli_transcript._show = _paused(Path(flag), Path(go), cli_transcript._show)
    raise SystemExit(main([cmd, run_dir]))


def _hold_write_lock(run_dir: str, flag: str, go: str) -> None:
    """Child: a writer at work in ``run_dir`` (holds its exclusive lock until ``go``)."""
    with run_dir_lock(run_dir, write=True):
        Path(flag).touch()
        _wait_for(Path(go))


def _start(target, *args):
    # spawn: a fresh interpreter (a forked child would share this process's forkserver)
    p = mp.get_context("spawn").Process(target=target, args=tuple(str(a) for a in args))
    p.start()
    return p


# a spawned child that imports the stack and attacks, 4.5 s on an idle core; the run directory's
# lock against readers and writers stays in make test
@pytest.mark.slow
def test_attack_rows_never_land_in_another_run(tmp_path):
    """Break 13: rows computed on a seed-7 run landed in a seed-8 run started meanwhile."""
    run = tmp_path / "run"
    execute(_scenario(7), run)
    flag, go = tmp_path / "computing", tmp_path / "go"
    child = _start(_slow_attack, run, flag, go)
    try:
        _wait_for(flag)
        with pytest.raises(RunDirLockedError, match="another testbed process"):
            execute(_scenario(8), run)  # a new run while the attack computes: refused
    finally:
        go.touch()
        child.join(300)
    assert child.exitcode == 0
    assert json.loads((run / "results.json").read_text())["seed"] == 7
    rows = json.loads(next(run.glob("attacks-*.json")).read_text())["rows"]
    assert rows and all(r["observer"] == "eavesdropper" for r in rows)
    from testbed.run.verify import verify_run

    verify_run(run)  # the rows belong to this run's transcript and results


@pytest.mark.parametrize("cmd", ["report", "transcript", "verify"])
def test_readers_are_refused_while_a_writer_is_at_work(tmp_path, cmd, capsys):
    run = tmp_path / "run"
    execute(_scenario(7, ""), run)  # no attack: no forkserver to start
    flag, go = tmp_path / "locked", tmp_path / "go"
    child = _start(_hold_write_lock, run, flag, go)
    try:
        _wait_for(flag)
        capsys.readouterr()
        assert main([cmd, str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "another testbed process is writing" in err
    finally:
        go.touch()
        child.join(60)
    assert main([cmd, str(run)]) == 0


@pytest.mark.parametrize("cmd", ["report", "transcript"])
def test_a_run_is_refused_while_a_reader_reads(tmp_path, cmd):
    run = tmp_path / "run"
    execute(_scenario(7, ""), run)  # no attack: no forkserver to start
    flag, go = tmp_path / "reading", tmp_path / "go"
    child = _start(_slow_reader, cmd, run, flag, go)
    try:
        _wait_for(flag)
        with pytest.raises(RunDirLockedError):
            execute(_scenario(8, ""), run)
    finally:
        go.touch()
        child.join(120)
    assert child.exitcode == 0
    assert json.loads((run / "results.json").read_text())["seed"] == 7


# an attacked run through the command line, 4 s on an idle core; the lock's refusals of readers and
# writers stay in make test
@pytest.mark.slow
def test_run_writes_its_report_before_releasing_the_lock(tmp_path, monkeypatch):
    import testbed.report.writer as writer

    seen = []
    real = writer.write_report

    def checking(run_dir, **kw):
        with pytest.raises(RunDirLockedError):  # a reader arriving now is refused
            with run_dir_lock(run_dir, write=False):
                pass
        seen.append(Path(run_dir))
        return real(run_dir, **kw)

    import testbed.cli.run as cli_run

    monkeypatch.setattr(writer, "write_report", checking)
    monkeypatch.setattr(cli_run, "write_report", checking)  # the run command's own name for it
    f = tmp_path / "s.yaml"
    f.write_text(TRIANGLE.format(seed=7, rest=ATTACKS))
    assert main(["run", str(f), "--out", str(tmp_path / "run"), "-q"]) == 0
    assert seen == [tmp_path / "run"] and (tmp_path / "run" / "report.html").exists()


# ----------------------------------------------------------------------------- used --out
def test_a_run_into_a_used_out_replaces_it_whole(tmp_path, capsys):
    """Break 6: re-running into the same --out left old results beside the new resolved.yaml."""
    run = tmp_path / "run"
    execute(_scenario(7), run)
    assert main(["attack", str(run), "--observer", "eavesdropper"]) == 0
    old = {p.name for p in run.iterdir()}
    assert {"envelopes.jsonl", "payloads.npz"} <= old and any(n.startswith("attacks-") for n in old)
    execute(_scenario(8, "output: {save_transcript: false}\n"), run)
    new = {p.name for p in run.iterdir()}
    assert not {"envelopes.jsonl", "payloads.npz", "leakage.npz"} & new
    assert not [n for n in new if n.startswith("attacks-")]
    assert "seed: 8" in (run / "resolved.yaml").read_text()
    from testbed.run.verify import verify_run

    verify_run(run)
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temp directory left


def test_a_failed_run_leaves_the_earlier_run_as_it_was(tmp_path, monkeypatch):
    import importlib

    ex = importlib.import_module(
        "testbed.run.execute"
    )  # the module (the package exports the function)
    run = tmp_path / "run"
    execute(_scenario(7), run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}

    def broken(*a, **kw):
        raise RuntimeError("the run broke before writing results")

    monkeypatch.setattr(ex, "write_json", broken)
    with pytest.raises(RuntimeError):
        execute(_scenario(8), run)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    from testbed.run.verify import verify_run

    verify_run(run)


def test_an_out_that_is_not_a_run_directory_is_refused(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    with pytest.raises(TestbedError, match="not a testbed run directory"):
        execute(_scenario(7), mine)
    f = tmp_path / "s.yaml"
    f.write_text(TRIANGLE.format(seed=7, rest=""))
    capsys.readouterr()
    assert main(["run", str(f), "--out", str(mine), "-q"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"]


def test_a_forked_child_does_not_keep_the_run_directory_locked(tmp_path):
    """A process forked while a run holds its directory's lock (a pool worker, or what a
    protocol's code forks) does not hold the lock: once the writer is gone, the directory is
    free although the child lives on (a child surviving a killed driver cannot lock it for ever)."""
    import os
    import signal

    r, w = os.pipe()
    with run_dir_lock(tmp_path, write=True):
        pid = os.fork()
        if pid == 0:  # the child: say it started, then outlive the writer's lock
            os.write(w, b"1")
            time.sleep(30)
            os._exit(0)
    assert os.read(r, 1) == b"1"
    os.close(r)
    os.close(w)
    try:
        with run_dir_lock(tmp_path, write=True):  # refused while the child held it
            pass
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
