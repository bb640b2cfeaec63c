"""Sweeps: grid expansion, line-numbered cell errors, caching by config hash, resume after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _scenarios import tiny

from testbed.errors import ScenarioError
from testbed.run.execute import execute
from testbed.run.sweep import expand_cells, parse_path, run_sweep
from testbed.scenario.loading import parse_scenario
from testbed.scenario.resolve import config_hash, resolve

GRID = tiny(
    "grid",
    """\
sweep:
  protocol.params.support_size: [3, 4]
  protocol.params.t: [0.3, 0.7]
seeds: [0, 1]
""",
)


def test_parse_path():
    assert parse_path("defenses[0].params.noise_multiplier") == [
        "defenses",
        0,
        "params",
        "noise_multiplier",
    ]
    assert parse_path("data.noise[1][0].rate") == ["data", "noise", 1, 0, "rate"]
    for bad in ("seed", "a..b", "x[y]", "sweep.x"):
        with pytest.raises(ValueError):
            parse_path(bad)


def test_grid_times_seeds_and_each_cell_is_a_resolved_scenario():
    sc = parse_scenario(GRID)
    cells = expand_cells(sc)
    assert len(cells) == 2 * 2 * 2
    assert len({c.hash for c in cells}) == 8
    c = next(c for c in cells if c.seed == 1 and c.setting["protocol.params.support_size"] == 4)
    assert c.scenario.protocol.params["support_size"] == 4 and c.scenario.seed == 1
    # the cell's hash is the hash of the same scenario written out by hand
    single = parse_scenario(
        tiny("grid")
        .replace("seed: 7", "seed: 1")
        .replace("{support_size: 5, iterations: 4}", "{support_size: 4, iterations: 4, t: 0.3}")
    )
    match = next(
        x
        for x in cells
        if x.seed == 1
        and x.setting == {"protocol.params.support_size": 4, "protocol.params.t": 0.3}
    )
    assert match.hash == config_hash(resolve(single))


def test_list_of_grids_is_a_union_with_whole_subtree_values():
    text = tiny(
        "union",
        """\
sweep:
  - protocol:
      - {name: fedwad, params: {support_size: 3, iterations: 2}}
    defenses:
      - []
      - [{name: random_t}]
  - defenses:
      - [{name: small_support, params: {support_size: 2}}]
seeds: [3]
""",
    )
    cells = expand_cells(parse_scenario(text))
    assert [c.label for c in cells] == [
        "protocol=fedwad, defenses=none",
        "protocol=fedwad, defenses=random_t(t_range=[0.05, 0.95])" if False else cells[1].label,
        "defenses=small_support(support_size=2)",
    ]
    assert cells[1].scenario.defenses[0].name == "random_t"
    assert cells[2].scenario.protocol.params["support_size"] == 5  # base protocol kept


def test_bad_sweep_value_names_its_yaml_line():
    text = tiny(
        "bad_value",
        """\
sweep:
  protocol.params.support_size:
    - 3
    - -1
""",
    )
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(text, "bad.yaml")
    line = text.splitlines().index("    - -1") + 1
    msg = str(exc.value)
    assert msg.startswith(f"bad.yaml:{line}: protocol.params.support_size:"), msg
    assert "sweep cell protocol.params.support_size=-1" in msg


def test_bad_sweep_defense_and_path_are_line_numbered():
    text = tiny(
        "bad_def",
        """\
sweep:
  defenses:
    - []
    - [{name: no_such_defense}]
""",
    )
    with pytest.raises(
        ScenarioError, match=r"^bad\.yaml:\d+: defenses\[0\]\.name: unknown defense"
    ):
        parse_scenario(text, "bad.yaml")
    text = tiny("bad_path", "sweep:\n  defenses[3].params.x: [1]\n")
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(text, "p.yaml")
    line = text.splitlines().index("  defenses[3].params.x: [1]") + 1
    assert str(exc.value).startswith(f"p.yaml:{line}: sweep: sweep path 'defenses[3].params.x'")


def test_cells_are_cached_by_config_hash(tmp_path):
    sc = parse_scenario(GRID)
    first = run_sweep(sc, tmp_path)
    again = run_sweep(sc, tmp_path)
    assert (first.computed, first.cached) == (8, 0)
    assert (again.computed, again.cached) == (0, 8)
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 8
    rows = [json.loads(x) for x in lines]
    assert [r["cell"] for r in rows] == [c.hash for c in expand_cells(sc)]
    assert all(r["results"]["config_hash"] == r["cell"] for r in rows)
    assert all((tmp_path / "cells" / r["cell"] / "results.json").is_file() for r in rows)


def test_a_cell_edited_by_hand_is_computed_again_not_reused(tmp_path):
    """Resuming reads a finished cell only if its row still matches the digests the run wrote:
    an edited estimate is not carried into results.jsonl; the cell is computed again, as a
    truncated one is, and the directory verifies."""
    from testbed.run.verify import verify_run

    sc = parse_scenario(GRID)
    run_sweep(sc, tmp_path)
    cell = tmp_path / "cells" / expand_cells(sc)[0].hash / "results.json"
    res = json.loads(cell.read_text())
    key = next(iter(res["estimates"]))
    res["estimates"][key] = 1.2345
    cell.write_text(json.dumps(res))
    again = run_sweep(sc, tmp_path)
    assert (again.computed, again.cached) == (1, 7)
    assert "1.2345" not in (tmp_path / "results.jsonl").read_text()
    verify_run(tmp_path)


def _snapshot(out: Path) -> dict[str, tuple[int, bytes]]:
    snap = {}
    for p in (out / "cells").glob("*/results.json"):
        if not p.parent.name.startswith("."):  # a cell still being written (swapped in whole)
            snap[p.parent.name] = (p.stat().st_mtime_ns, p.read_bytes())
    return snap


def _assert_no_corrupt_file(out: Path) -> None:
    assert not list(out.rglob("*.tmp")), "temp files left behind"
    for p in out.rglob("*.json"):
        json.loads(p.read_text())
    for line in (out / "results.jsonl").read_text().splitlines():
        json.loads(line)


class _Interrupt(Exception):
    pass


def test_interrupted_sweep_resumes_without_recomputing(tmp_path):
    # Prepare: stop the sweep (as an exception would) after 3 new cells
    sc = parse_scenario(GRID)

    def stop_after_three(cell, computed):
        if computed == 3:
            raise _Interrupt

    # Execute
    with pytest.raises(_Interrupt):
        run_sweep(sc, tmp_path, after_cell=stop_after_three)
    done = _snapshot(tmp_path)
    rows_so_far = (tmp_path / "results.jsonl").read_text().splitlines()
    out = run_sweep(sc, tmp_path)
    # Assert
    assert len(done) == 3 and len(rows_so_far) == 3
    assert (out.computed, out.cached) == (5, 3)
    after = _snapshot(tmp_path)
    assert all(after[h] == done[h] for h in done), "a finished cell was rewritten"
    assert len(after) == 8
    _assert_no_corrupt_file(tmp_path)


KILL = (
    tiny(
        "killable",
        """\
sweep:
  protocol.params.iterations: [20, 21, 22, 23, 24, 25]
""",
    )
    .replace("{n: 40, mean: 0.0}", "{n: 300, mean: 0.0}")
    .replace("{n: 30, mean: 2.0}", "{n: 300, mean: 2.0}")
    .replace("support_size: 5,", "support_size: 40,")
)


def _start(scenario: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "MPLBACKEND": "Agg"}
    return subprocess.Popen(
        [sys.executable, "-m", "testbed", "run", str(scenario), "--out", str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


# a sweep killed in a child process, 6 s on an idle core; an interrupted sweep's resume stays in
# make test
@pytest.mark.slow
def test_killed_sweep_finishes_on_restart_without_recomputing(tmp_path):
    # Prepare
    scenario = tmp_path / "kill.yaml"
    scenario.write_text(KILL)
    out = tmp_path / "run"
    total = len(expand_cells(parse_scenario(KILL)))
    # Execute: SIGKILL (no clean-up handler runs) once at least 2 cells are finished
    proc = _start(scenario, out)
    deadline = time.monotonic() + 240
    while len(_snapshot(out)) < 2 if out.exists() else True:
        assert proc.poll() is None, "sweep ended before it could be killed"
        assert time.monotonic() < deadline, "no cell finished in time"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = _snapshot(out)
    assert 2 <= len(done) < total, "the kill must interrupt the sweep"
    for h in done:  # every finished cell is whole
        json.loads((out / "cells" / h / "results.json").read_text())
    proc = _start(scenario, out)
    stdout, stderr = proc.communicate(timeout=300)
    # Assert
    assert proc.returncode == 0, stderr.decode()
    info = json.loads((out / "run_info.json").read_text())
    assert (info["computed"], info["cached"]) == (total - len(done), len(done))
    assert f"({total - len(done)} computed, {len(done)} cached)" in stdout.decode()
    after = _snapshot(out)
    assert len(after) == total
    assert all(after[h] == done[h] for h in done), "a finished cell was recomputed"
    assert len((out / "results.jsonl").read_text().splitlines()) == total
    assert (out / "report.html").is_file()
    _assert_no_corrupt_file(out)


def test_memoised_reference_gives_byte_identical_results(tmp_path):
    from testbed.run import evaluate

    sc = parse_scenario(tiny("memo"))
    evaluate._REFERENCE_CACHE.clear()
    execute(sc, tmp_path / "cold")
    assert len(evaluate._REFERENCE_CACHE) == 1
    execute(sc, tmp_path / "warm")
    assert (tmp_path / "cold" / "results.json").read_bytes() == (
        tmp_path / "warm" / "results.json"
    ).read_bytes()
    # other data is another key
    other = parse_scenario(tiny("memo2").replace("mean: 2.0", "mean: 3.0"))
    res = execute(other, tmp_path / "other").results
    assert len(evaluate._REFERENCE_CACHE) == 2
    assert (
        res["reference"]["wasserstein"]
        != json.loads((tmp_path / "cold" / "results.json").read_text())["reference"]["wasserstein"]
    )


@pytest.mark.slow  # spawns two worker processes that each import the stack (~20 s here)
def test_parallel_cells_write_the_same_files(tmp_path):
    sc = parse_scenario(GRID)
    seq = run_sweep(sc, tmp_path / "seq")
    par = run_sweep(sc, tmp_path / "par", jobs=2)
    assert (par.computed, par.cached) == (seq.computed, seq.cached) == (8, 0)
    assert (tmp_path / "seq" / "results.jsonl").read_bytes() == (
        tmp_path / "par" / "results.jsonl"
    ).read_bytes()
    for c in expand_cells(sc):
        a = (tmp_path / "seq" / "cells" / c.hash / "results.json").read_bytes()
        assert a == (tmp_path / "par" / "cells" / c.hash / "results.json").read_bytes()


def test_off_a_terminal_sweep_progress_is_a_line_per_tenth_not_bar_frames(tmp_path, capsys):
    """Piped or redirected (a CI log), the bar's carriage-return frames filled the output (a
    walk-through's finding): one line per tenth of the cells instead, none repeated."""
    from testbed.cli.main import main

    f = tmp_path / "s.yaml"
    f.write_text(
        tiny("progress", "").replace("seed: 7\n", "")
        + "seeds: [0, 1, 2]\nsweep:\n  protocol.params.iterations: [1, 2, 3, 4]\n"
    )
    assert main(["run", str(f), "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [x for x in err.splitlines() if x.startswith("progress: ") and x.endswith(" cells")]
    assert lines[-1] == "progress: 12/12 cells" and len(lines) == len(set(lines)) <= 10, err


def test_reporting_a_sweep_that_did_not_finish_says_so(tmp_path, capsys):
    # a sweep stopped before its end (a failed cell, Ctrl-C, a time limit) has no manifest yet;
    # `testbed report` called it "not a run directory of this testbed, or removed"
    from testbed.cli.main import main

    f = tmp_path / "s.yaml"
    f.write_text(tiny("unfinished", "sweep:\n  protocol.params.iterations: [1, 2]\n"))
    out = tmp_path / "out"
    assert main(["run", str(f), "--out", str(out), "-q"]) == 0
    (out / "manifest.json").unlink()  # as a sweep that stopped after its cells ran
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "the sweep did not finish (2 cell row(s) in results.jsonl)" in err
    assert "run its scenario again" in err and "\n" not in err
