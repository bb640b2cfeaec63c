"""``testbed report RUN``: render report.html/.md and results.csv of a run directory (or of a
scenario's latest run)."""

from __future__ import annotations

from testbed.cli._common import find_run_dir
from testbed.report.writer import write_report


def run(args) -> int:
    from contextlib import nullcontext

    from testbed.run.manifest import sweep_of
    from testbed.run.rundir import run_dir_lock
    from testbed.run.verify import verify_in_sweep

    run_dir = find_run_dir(args.run_dir, "report")
    sweep = sweep_of(run_dir)  # a sweep's cell: checked with its sweep (its lock first)
    with (
        run_dir_lock(sweep, write=False) if sweep is not None else nullcontext(),
        run_dir_lock(run_dir, write=False),  # the whole read; a run directory that does not
    ):
        verify_in_sweep(run_dir)  # verify is refused with the first mismatch
        print(f"report: {write_report(run_dir)}")
    return 0
