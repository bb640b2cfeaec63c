"""Every command the README shows runs, and the code behind README's claims says the same.

Fenced ``bash`` blocks are run line by line in a scratch directory (``testbed`` = this checkout's
``python -m testbed``); ``make`` targets (they would recurse into this suite) are skipped with the
reason. ``pip install -e plugins/...`` runs offline (``--no-deps --no-build-isolation
--no-index``) into a scratch virtual environment that sees the shared one's packages, and
``testbed`` runs there too, so the next ``testbed plugins`` lists the installed plugin. The YAML block is the
scenario the README asks the reader to save; the Python block is the attack it asks them to
write, run through the public contract kit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SKIP = {"make": "make targets run this suite themselves"}
#: pip as the README's reader runs it, but offline and into the scratch environment only
PIP_FLAGS = "--no-deps --no-build-isolation --no-index --quiet"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def _commands() -> list[str]:
    out = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            cmd = re.sub(r"\s+#\s.*$", "", line).strip()
            if cmd and not cmd.startswith("#"):
                out.append(cmd)
    return out


def test_readme_is_a_short_guide():
    assert len(README.encode()) <= 12_500
    assert "papers/README" not in README
    for link in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (ROOT / link).is_file(), link


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("readme")
    (d / "scenarios").symlink_to(ROOT / "scenarios")
    yaml_blocks = _blocks("yaml")
    assert yaml_blocks, "the README shows no scenario"
    (d / "my_first_audit.yaml").write_text(yaml_blocks[0])
    _scratch_venv(d / "venv")
    return d


def _scratch_venv(venv: Path) -> None:
    """A virtual environment that sees this interpreter's packages (a ``.pth`` file), so that
    ``pip install -e`` of a plugin needs no network and leaves the shared environment alone."""
    import site
    import sysconfig

    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    purelib = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    shared = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    Path(purelib, "_shared_env.pth").write_text("\n".join(dict.fromkeys(shared)) + "\n")


def _run(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    venv = cwd / "venv" / "bin" / "python"
    python = venv if venv.exists() else Path(sys.executable)
    prelude = (
        f'testbed() {{ "{python}" -m testbed "$@"; }}; '
        f'pip() {{ "{python}" -m pip "$@" {PIP_FLAGS}; }}; set -o pipefail; '
    )
    return subprocess.run(
        ["bash", "-c", prelude + cmd], cwd=cwd, env=env, capture_output=True, text=True
    )


#: README commands whose run takes minutes on 2 busy cores and whose command another test of the
#: default suite runs end to end (test_audit, test_scorecard, test_sweep): in make test-slow.
#: Nothing later in the README reads what they write
SLOW_COMMANDS = {
    "testbed audit my_first_audit.yaml",  # ~300 s
    "testbed scorecard fedwad -o runs/scorecard-fedwad",  # ~220 s
    "testbed run my_first_audit.yaml --jobs 2",  # ~150 s
}


def _check_command(cmd: str, scratch: Path) -> None:
    tool = cmd.split()[0]
    assert tool in ("testbed", "pip"), f"unexpected command in README: {cmd}"
    res = _run(cmd, scratch)
    # Assert: success, and no traceback even when `| head` closes the pipe early
    assert res.returncode == 0, f"{cmd}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    assert "Traceback" not in res.stderr and "BrokenPipeError" not in res.stderr, res.stderr
    if cmd.startswith("pip install -e "):  # "then `testbed plugins` lists" the plugin
        plugin = Path(cmd.split()[3]).name
        listed = _run("testbed plugins", scratch)
        assert re.search(rf"^  {plugin}\s", listed.stdout, re.M), listed.stdout


def test_readme_commands_run_in_order(scratch):
    """Every quick README command, in README order, in one folder: a later command reads what an
    earlier one wrote (the run directory before report/transcript/verify), so they are one test
    (as parametrized tests, pytest-xdist could hand them to two workers and two folders)."""
    ran = []
    for cmd in _commands():
        if cmd.split()[0] in SKIP or cmd in SLOW_COMMANDS:
            continue
        _check_command(cmd, scratch)
        ran.append(cmd)
    assert len(ran) >= 8, ran


@pytest.mark.slow
@pytest.mark.parametrize("cmd", sorted(SLOW_COMMANDS))
def test_readme_slow_command_runs(cmd, scratch):
    assert cmd in _commands(), f"{cmd!r} is no longer in the README: update SLOW_COMMANDS"
    _check_command(cmd, scratch)


def test_readme_attack_passes_the_contract_kit():
    from testbed.testing import check_plugin

    code = _blocks("python")[0]
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102 (the README's own example)
    status = check_plugin(ns["MyAttack"])
    assert status and all(v == "passed" for v in status.values()), status


# a run to pipe: ~65 s on 2 busy cores; testbed transcript | head stays in make test
@pytest.mark.slow
def test_transcript_into_a_closed_pipe_ends_quietly(scratch):
    # Prepare: a run directory, and a reader that has gone before the first line is written
    run = scratch / "pipe_run"
    assert _run(f"testbed run scenarios/contract_tiny.yaml --out {run} -q", scratch).returncode == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r, w = os.pipe()
    os.close(r)
    # Execute
    res = subprocess.run(
        [sys.executable, "-m", "testbed", "transcript", str(run), "--all"],
        stdout=w,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    os.close(w)
    # Assert
    assert res.returncode == 0 and res.stderr == "", res.stderr


# the README's example run again, over seeds: ~85 s on 2 busy cores; its commands stay in make test
@pytest.mark.slow
def test_readme_example_shows_a_trade_off(scratch):
    """The first example teaches something (issue 22): leakage falls as the noise rises, at
    errors a reader can believe, not 0 everywhere; the figures the README quotes are these."""
    import json

    # Execute: the README's own run (its cells are cached when the command test ran first)
    res = _run("testbed run my_first_audit.yaml -q --jobs 2", scratch)
    assert res.returncode == 0, res.stderr
    (results,) = (scratch / "runs").glob("my_first_audit-*/results.jsonl")
    cells = [json.loads(line) for line in results.read_text().splitlines()]
    # Assert
    cells.sort(key=lambda c: c["setting"]["defenses[0].params.noise_multiplier"])
    errors = [c["results"]["accuracy"]["wasserstein"]["relative_error"] for c in cells]
    leaks = [max(a["leakage"] for a in c["results"]["attacks"]) for c in cells]
    assert len(cells) == 3 and all(0.005 < e < 0.6 for e in errors), errors
    assert errors == sorted(errors) and leaks == sorted(leaks, reverse=True), (errors, leaks)
    assert leaks[0] > 0.5 and leaks[-1] < 0.4, leaks
    quoted = re.search(
        r"fades \(leakage ([\d.]+), ([\d.]+), ([\d.]+)\) and the error\s+grows "
        r"\((\d+) %, (\d+) %, (\d+) %",
        README,
    )
    assert quoted, "the README no longer quotes the example's figures"
    assert [float(x) for x in quoted.groups()[:3]] == [round(x, 2) for x in leaks]
    assert [int(x) for x in quoted.groups()[3:]] == [round(100 * e) for e in errors]


def test_readme_example_is_the_scenario_docs_measure():
    """docs/findings/findings.md quotes ``scenarios/first_audit_curve.yaml`` for the README's example: the
    same scenario but for its name, seeds and sweep."""
    import yaml

    drop = ("name", "seed", "seeds", "sweep")
    ours = yaml.safe_load(_blocks("yaml")[0])
    measured = yaml.safe_load((ROOT / "scenarios" / "first_audit_curve.yaml").read_text())
    assert {k: v for k, v in ours.items() if k not in drop} == {
        k: v for k, v in measured.items() if k not in drop
    }
    swept = "defenses[0].params.noise_multiplier"
    assert set(ours["sweep"][swept]) <= set(measured["sweep"][swept])
