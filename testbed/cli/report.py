"""``testbed report RUN``: render report.html/.md and results.csv of a run directory (or of a
scenario's latest run)."""

from __future__ import annotations

from testbed.cli._common import find_run_dir
from testbed.report.writer import write_report
from testbed.run.verify import verified_for_reading


def run(args) -> int:
    run_dir = find_run_dir(args.run_dir, "report")
    # the whole read under the lock; a run directory (a cell: with its sweep) that does not
    # verify is refused with the first mismatch
    with verified_for_reading(run_dir):
        print(f"report: {write_report(run_dir, progress=not getattr(args, 'quiet', False))}")
    return 0
