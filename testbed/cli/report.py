"""``testbed report RUN``: render report.html/.md and results.csv of a run directory (or of a
scenario's latest run)."""

from __future__ import annotations

from testbed.cli._common import find_run_dir
from testbed.report.writer import write_report


def run(args) -> int:
    from testbed.run.rundir import run_dir_lock
    from testbed.run.verify import verify_run

    run_dir = find_run_dir(args.run_dir, "report")
    with run_dir_lock(run_dir, write=False):  # the whole read; a run directory that does not
        verify_run(run_dir)  # verify is refused with the first mismatch
        print(f"report: {write_report(run_dir)}")
    return 0
