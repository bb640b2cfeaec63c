"""``testbed verify RUN [--pubkey PUB] [--rerun]``: re-check every digest of a run directory
(testbed/run/verify.py) under its shared lock; "ok" and what was checked, or one line naming the
first mismatch (exit 2)."""

from __future__ import annotations

from testbed.cli._common import find_run_dir
from testbed.run.rerun import rerun_compare
from testbed.run.verify import verified_for_reading

__all__ = ["run"]


def run(args) -> int:
    run_dir = find_run_dir([args.run_dir], "verify")
    with verified_for_reading(run_dir, pubkey=args.pubkey) as checked:  # a cell: with its sweep
        if args.rerun:
            checked += rerun_compare(run_dir, progress=not args.quiet)
    print(f"{run_dir}: ok")
    for line in checked:
        print(f"  {line}")
    return 0
