"""A pytest plugin (loaded by conftest.py): a process that a test forks must end with
``os._exit``. One that returns or raises into pytest instead goes on running the worker's queue
and reports on the worker's channel: pytest-xdist then sees tests completed twice and stops the
whole run with an INTERNALERROR that names neither test (``list.remove(x): x not in list``, seen
once in CI). Such a child is ended at the end of the phase it escaped from, before it can report
anything, with one line on the terminal (pytest's capture suspended) naming the test, what it
raised and where it was forked (the innermost frames at the fork); the test itself fails with
that line when its phase ends after the child's."""

from __future__ import annotations

import os
import tempfile
import traceback
from pathlib import Path

import pytest

#: the exit status of an escaped child (EX_SOFTWARE)
ESCAPED = 70


def _note(pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"pytest-fork-escape-{pid}"


#: where this process was forked (the innermost frames of the parent's stack at the fork)
_FORKED_AT: list[str] = []


def _remember_the_fork() -> None:
    _FORKED_AT[:] = [
        f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
        for f in traceback.extract_stack()[-8:-1]
    ]


os.register_at_fork(after_in_child=_remember_the_fork)


def _end_the_child(item, parent: int) -> None:
    how = traceback.format_exc().strip().splitlines()[-1:]
    what = how[0] if how and how[0] != "NoneType: None" else "returned"
    line = (
        f"{item.nodeid}: a child it forked (pid {os.getpid()}) ran on into pytest "
        f"({what}); ended (exit {ESCAPED}); forked at {' < '.join(reversed(_FORKED_AT))}"
    )
    try:
        with open(_note(parent), "a") as fh:
            fh.write(line + "\n")
        capture = item.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.suspend_global_capture(in_=False)
        os.write(2, f"\n{line}\n".encode())
    finally:
        os._exit(ESCAPED)


def _stay_in_the_test(item):
    pid = os.getpid()
    _note(pid).unlink(missing_ok=True)
    try:
        return (yield)
    finally:
        if os.getpid() != pid:
            _end_the_child(item, pid)
        note = _note(pid)
        if note.exists():
            text = note.read_text().strip()
            note.unlink()
            pytest.fail(text, pytrace=False)


pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_stay_in_the_test)
pytest_runtest_call = pytest.hookimpl(wrapper=True)(_stay_in_the_test)
pytest_runtest_teardown = pytest.hookimpl(wrapper=True)(_stay_in_the_test)
