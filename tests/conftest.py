"""Shared fixtures. The bus guard is always on in tests (scenarios default to guard: stop)."""

from __future__ import annotations

import os
import sys
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
