"""Shared fixtures. The bus guard is always on in tests (scenarios default to guard: stop)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

from testbed.threads import limit_blas_threads  # noqa: E402

limit_blas_threads()  # as the CLI does: small BLAS products run single-threaded

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def scenarios_dir() -> Path:
    return SCENARIOS
