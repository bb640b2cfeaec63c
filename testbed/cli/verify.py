"""``testbed verify RUN [--pubkey PUB] [--rerun]``: re-check every digest of a run directory
(testbed/run/verify.py) under its shared lock; "ok" and what was checked, or one line naming the
first mismatch (exit 2)."""

from __future__ import annotations

__all__ = ["run"]


def run(args) -> int:
    from contextlib import nullcontext

    from testbed.cli._common import find_run_dir
    from testbed.run.manifest import sweep_of
    from testbed.run.rerun import rerun_compare
    from testbed.run.rundir import run_dir_lock
    from testbed.run.verify import verify_in_sweep

    run_dir = find_run_dir([args.run_dir], "verify")
    sweep = sweep_of(run_dir)  # a cell is checked with its sweep: the sweep's lock first
    with (
        run_dir_lock(sweep, write=False) if sweep is not None else nullcontext(),
        run_dir_lock(run_dir, write=False),
    ):
        checked = verify_in_sweep(run_dir, pubkey=args.pubkey)
        if args.rerun:
            checked += rerun_compare(run_dir, progress=not args.quiet)
    print(f"{run_dir}: ok")
    for line in checked:
        print(f"  {line}")
    return 0
