"""``testbed report RUN``: render report.html/.md and results.csv of a run directory (or of a
scenario's latest run)."""

from __future__ import annotations

from testbed.cli._common import find_run_dir
from testbed.report.writer import write_report


def run(args) -> int:
    run_dir = find_run_dir(args.run_dir, "report")
    print(f"report: {write_report(run_dir)}")
    return 0
