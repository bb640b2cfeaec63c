"""``testbed verify RUN [--pubkey PUB] [--rerun]``: re-check every digest of a run directory
(testbed/run/verify.py) under its shared lock; "ok" and what was checked, or one line naming the
first mismatch (exit 2)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["add_parser", "cmd_verify"]


def cmd_verify(args) -> int:
    from testbed.run.rundir import run_dir_lock
    from testbed.run.verify import rerun_compare, verify_run

    run_dir = Path(args.run_dir)
    with run_dir_lock(run_dir, write=False):
        checked = verify_run(run_dir, pubkey=args.pubkey)
        if args.rerun:
            checked += rerun_compare(run_dir, progress=not args.quiet)
    print(f"{run_dir}: ok")
    for line in checked:
        print(f"  {line}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="re-check every digest of a run directory (transcript, results, files, signature)",
    )
    p.add_argument("run_dir")
    p.add_argument("--pubkey", help="also check manifest.sig against this Ed25519 public key")
    p.add_argument(
        "--rerun",
        action="store_true",
        help="also run the scenario again into a temporary directory and compare results.json",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar for --rerun")
    p.set_defaults(fn=cmd_verify)
