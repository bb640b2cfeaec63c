"""``testbed report RUN``: render report.html/.md and results.csv of a run directory."""

from __future__ import annotations

from pathlib import Path

from testbed.errors import TestbedError
from testbed.report.writer import write_report


def run(args) -> int:
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise TestbedError(f"{run_dir}: run directory not found")
    print(f"report: {write_report(run_dir)}")
    return 0
