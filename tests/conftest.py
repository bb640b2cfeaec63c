"""Shared fixtures. The bus guard is always on in tests (scenarios default to guard: stop)."""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# as the testbed command does (testbed/cli/main.py), for this process and those it starts: POT
# without its torch backend, registered by the solves on torch tensors (testbed.ot.pot_on_torch)
os.environ.setdefault("POT_BACKEND_DISABLE_PYTORCH", "1")

from testbed.threads import limit_blas_threads  # noqa: E402

limit_blas_threads()  # as the CLI does: small BLAS products run single-threaded

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
# bench/ (the benchmarks) ships with the checkout and is not installed: a `pytest` console script
# does not put the checkout on sys.path as `python -m pytest` does. Appended, so it finds bench
# only and never shadows an installed testbed
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def scenarios_dir() -> Path:
    return SCENARIOS


@pytest.fixture(scope="session")
def tiny_observed():
    """The small FedWAD run (``_scenarios.tiny``, observed by the server) executed in memory
    once per test process, as the server sees it: ``observe(...)``'s View and PublicInfo, what
    an attack is given. Read-only: the View's arrays cannot be written."""
    from _scenarios import tiny

    from testbed.run import execute
    from testbed.run.view import observe
    from testbed.scenario.loading import parse_scenario

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = tiny("tiny_observed", "threat_model: {observer: server}")
        run = execute(parse_scenario(text), until="results", write=False)
    return observe(run.world, run.transcript, run.results["estimates"])


@dataclass(frozen=True)
class SavedSweep:
    """A sweep written to disk: its directory and the rows ``run_sweep`` returned."""

    dir: Path
    rows: list


@pytest.fixture(scope="session")
def noise_sweep(tmp_path_factory) -> SavedSweep:
    """``_scenarios.NOISE_SWEEP`` (the tiny FedWAD run with no defense and Gaussian noise at
    three levels, five seeds: 20 cells) run once per test process, for the tests that read its
    rows (test_defenses) or render its report (test_report: report.html and the files beside
    it are written into this directory, the rows and cells are never changed). A test that
    edits a row copies the files it needs into its own ``tmp_path``."""
    from _scenarios import NOISE_SWEEP

    from testbed.run.sweep import run_sweep
    from testbed.scenario.loading import parse_scenario

    out = tmp_path_factory.mktemp("noise_sweep")
    return SavedSweep(out, run_sweep(parse_scenario(NOISE_SWEEP), out).rows)


#: the longest files of make test (README commands 20 s, the report in chromium 14 s), run first:
#: pytest-xdist's workers then end on short tests, where one long test at the tail would keep a
#: core idle while the other waits for it
RUN_FIRST = ("tests/test_readme.py::", "tests/test_report_browser.py::")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not item.nodeid.startswith(RUN_FIRST))  # stable: order kept


# a forked child that runs on into pytest is ended before it reports (tests/_fork_guard.py)
from _fork_guard import (  # noqa: E402
    pytest_runtest_call,  # noqa: F401
    pytest_runtest_setup,  # noqa: F401
    pytest_runtest_teardown,  # noqa: F401
)
