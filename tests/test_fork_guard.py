"""tests/_fork_guard.py: a child a test forks that runs on into pytest is ended before it can
report, with one line naming the test; the test itself and the next one run as usual."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

ESCAPES = """
import os

def test_child_escapes():
    pid = os.fork()
    if pid == 0:
        {escape}
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 70

def test_after():
    pass
"""


@pytest.mark.parametrize(
    ("escape", "what"),
    [
        ("raise RuntimeError('boom in the child')", "RuntimeError: boom in the child"),
        ("return", "returned"),
    ],
)
def test_a_child_that_runs_on_into_pytest_is_ended_before_it_reports(tmp_path, escape, what):
    (tmp_path / "test_escape.py").write_text(ESCAPES.format(escape=escape))
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "-p",
            "_fork_guard",
            "-q",
            "test_escape.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = got.stdout + got.stderr
    # the escaping test fails with the line; the next one runs once (without the guard the
    # child runs it too, and the parent waits for the child's whole session)
    assert got.returncode == 1 and "1 failed, 1 passed" in out, out
    assert out.count("passed") == 1, out
    assert "FAILED test_escape.py::test_child_escapes" in out, out
    assert "test_escape.py::test_child_escapes: a child it forked" in out, out
    assert f"({what}); ended (exit 70)" in out, out
