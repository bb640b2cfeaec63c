"""Command line: ``testbed run | audit | attack | report | bench | validate | plugins |
new-attack | new-protocol | new-defense | scorecard | transcript``.

This module only builds the argument parser; each command lives in a module of its own
(``testbed/cli/<command>.py``), imported when that command runs, so ``testbed --help`` and
``testbed validate`` never load the report, torch or POT. Bad input ends with a one-line
``error: ...`` on stderr and exit code 2 (never a traceback); see ``_common.guarded``.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from testbed import __version__
from testbed.cli._common import RUN_HELP, end_process, guarded, interruptible
from testbed.ot import NO_TORCH
from testbed.threads import limit_blas_threads

__all__ = ["build_parser", "main"]


# ----------------------------------------------------------------------------- argument types
def _ints(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def _bounded_int(text: str, hi: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= v <= hi:
        raise argparse.ArgumentTypeError(f"must be between 1 and {hi}, got {v}")
    return v


def _positive_int(text: str) -> int:
    return _bounded_int(text, 1_000_000)


def _folder(text: str) -> str:
    """An output folder: not empty (``--out ''`` once fell back to the default silently)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty folder name; give a folder or leave --out out")
    return text


def _cell_count(text: str) -> int:
    return _bounded_int(text, 100_000_000)


def _pairs_arg(text: str):
    """``all`` or a positive integer (``--pairwise-pairs``)."""
    return "all" if text.strip().lower() == "all" else _positive_int(text)


def _open_unit(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(v) and 0 < v < 1):
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {text}")
    return v


# ----------------------------------------------------------------------------- the commands
def _command(sub, name: str, module: str, help: str, func: str = "run", computes: bool = True):
    """A subcommand whose ``module.func(args)`` (in ``testbed/cli/``) runs it. ``computes``: it
    runs protocols or attacks, so BLAS is limited to one thread before it starts (see
    :func:`main`; POT is loaded where a run's time budget starts,
    :func:`testbed.scenario.limits.cell_budget`, or at the first solve); a command that only
    reads files or prints (``computes=False``) skips it."""
    p = sub.add_parser(name, help=help)
    p.set_defaults(module=module, func=func, computes=computes)
    return p


def _limit_flags(p) -> None:
    p.add_argument(
        "--allow-large",
        action="store_true",
        help="run even when the memory estimate exceeds the available memory",
    )
    p.add_argument(
        "--max-cells",
        type=_cell_count,
        help="accept a sweep of up to N cells (default 10000; also limits: {max_cells: N})",
    )


def _run_commands(sub) -> None:
    p = _command(sub, "run", "run", "run a scenario and write its run directory")
    p.add_argument("scenario")
    p.add_argument("--out", type=_folder, help="run directory (default: runs/<name>-<hash8>)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--sign", metavar="KEYFILE", help="sign the run's manifest (testbed keygen)")
    p.add_argument(
        "-j", "--jobs", type=_positive_int, default=1, help="sweep cells run in this many processes"
    )
    _limit_flags(p)
    p = _command(
        sub, "audit", "audit", "audited ε lower bounds (one run, or many runs) vs the claim"
    )
    p.add_argument("scenario")
    p.add_argument(
        "--party", action="append", help="party to audit (repeatable; default: every party)"
    )
    p.add_argument(
        "--method",
        choices=["one-run", "many-runs", "both"],
        default="one-run",
        help="one-run (m canaries, one protocol run; default), many-runs (reference game), both",
    )
    p.add_argument("--canaries", type=_positive_int, default=256, help="m for the one-run audit")
    p.add_argument("--trials", type=_positive_int, default=200, help="trials per world (many runs)")
    p.add_argument("--per-round", action="store_true", help="also bound each round's messages")
    p.add_argument(
        "--scope",
        choices=["both", "protocol", "mechanism"],
        default="both",
        help="protocol (canaries in real runs), mechanism (the defenses driven on chosen "
        "neighbouring datasets), or both (default)",
    )
    p.add_argument(
        "--mechanism-trials",
        type=_positive_int,
        default=4,
        help="coupled protocol runs per neighbouring pair (mechanism audit; at least 4; the "
        "noise tests also read hundreds of replays of the defenses alone)",
    )
    p.add_argument("--delta", type=_open_unit, default=1e-5)
    p.add_argument("--confidence", type=_open_unit, default=0.95)
    p.add_argument(
        "--no-reconstruction",
        dest="reconstruction",
        action="store_false",
        help="skip running the scenario's attacks for the reconstruction bound",
    )
    p.add_argument("--out", type=_folder, help="write audit.csv and audit.json to this folder")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the verdicts as a JSON list on stdout (one record per party and scope)",
    )
    _limit_flags(p)


def _run_dir_commands(sub) -> None:
    p = _command(
        sub, "attack", "attack", "run attacks on a saved run's transcript (protocol not re-run)"
    )
    p.add_argument("run_dir", nargs="+", metavar="RUN", help=RUN_HELP)
    p.add_argument(
        "--attack",
        action="append",
        help="NAME or NAME:{json params} (repeatable; default: the run's own attacks)",
    )
    p.add_argument("--observer", help="threat model observer (default: the run's)")
    p.add_argument("--colluders", help="comma-separated colluding parties")
    p.add_argument(
        "--sign", metavar="KEYFILE", help="sign the manifest again with the new rows (signed runs)"
    )
    p = _command(
        sub,
        "report",
        "report",
        "render report.html/.md and results.csv of a run directory",
        computes=False,
    )
    p.add_argument("run_dir", nargs="+", metavar="RUN", help=RUN_HELP)
    p = _command(
        sub, "transcript", "transcript", "show what was exchanged in a run", computes=False
    )
    p.add_argument("run_dir", nargs="+", metavar="RUN", help=RUN_HELP)
    many = p.add_mutually_exclusive_group()
    many.add_argument(
        "--limit", type=_positive_int, default=40, help="messages listed (default 40)"
    )
    many.add_argument("--all", action="store_true", help="list every message (no --limit)")
    p = _command(
        sub,
        "verify",
        "verify",
        "re-check every digest of a run directory (transcript, results, files, signature)",
    )
    p.add_argument("run_dir")
    p.add_argument("--pubkey", help="also check manifest.sig against this Ed25519 public key")
    p.add_argument(
        "--rerun",
        action="store_true",
        help="also run the scenario again into a temporary directory and compare results.json",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar for --rerun")
    p = _command(
        sub,
        "keygen",
        "keygen",
        "make an Ed25519 key pair for signed run manifests",
        computes=False,
    )
    p.add_argument("keyfile", help="where the private key goes (the public key: KEYFILE.pub)")


def _bench_command(sub) -> None:
    p = _command(
        sub,
        "bench",
        "bench",
        "time every protocol as a ratio to one exact ot.emd (quick subset by default)",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", action="store_true", help="quick subset for CI smoke runs (the default)"
    )
    size.add_argument(
        "--full",
        action="store_true",
        help="the full grid and the speed targets (docs/findings/benchmarks.md)",
    )
    p.add_argument("--n", dest="ns", type=_ints, help="points per party, e.g. 250,500,1000")
    p.add_argument("--d", dest="ds", type=_ints, help="dimensions, e.g. 2,64,784")
    p.add_argument("--clients", type=_ints, help="client counts N, e.g. 5,20,100")
    p.add_argument(
        "--cases",
        help="comma-separated case keys (default: all registered): fedwad_paper, "
        "fedwad_accurate, triangle_wad, fedbary, fedwad_pairwise, fedwad_public, isolation; "
        "pairwise (no case: with --pairwise, that section alone)",
    )
    p.add_argument("--ray-clients", type=_ints, help="also run the N-client cases on Ray")
    p.add_argument("--scenario", help="also time this scenario end to end (target: 3 min)")
    p.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    p.add_argument(
        "--targets",
        action="store_true",
        help="check the speed targets (docs/findings/benchmarks.md)",
    )
    only = p.add_mutually_exclusive_group()  # each runs one section alone: one at a time
    only.add_argument(
        "--scaling",
        action="store_true",
        help="only the scaling curves: time and peak memory against n (--n) and N (--clients), "
        "every engine available (about 15 min on 2 cores)",
    )
    only.add_argument(
        "--scale",
        action="store_true",
        help="only FedBary and pairwise FedWAD end to end (testbed run) against clients "
        "(--clients, default 10,100), rows (--n) and d (--d), with peak memory and a projection",
    )
    only.add_argument(
        "--sweep-bookkeeping",
        action="store_true",
        help="only the sweep's own bookkeeping per cell at 2000 and 20000 trivial cells",
    )
    only.add_argument(
        "--audit",
        action="store_true",
        help="only the privacy audit: one run vs many runs, null rates, miscalibrated defenses",
    )
    p.add_argument(
        "--pairwise",
        type=_ints,
        help="pairwise FedWAD on Ray for these N, peak RSS of the process tree "
        "(--full: 100,200,400,1000)",
    )
    p.add_argument(
        "--pairwise-pairs",
        type=_pairs_arg,
        help="run the first K pairs of each N, or 'all' (default 500; all pairs when fewer)",
    )
    p.add_argument(
        "--out", type=_folder, default="runs/bench", help="output folder (default: runs/bench)"
    )
    p.add_argument("-q", "--quiet", action="store_true")


def _plugin_commands(sub) -> None:
    p = _command(sub, "validate", "validate", "check a scenario without running it", computes=False)
    p.add_argument("scenario")
    _limit_flags(p)  # validate refuses what run refuses: the resource checks too
    p = _command(
        sub,
        "plugins",
        "plugins",
        "list registered protocols, attacks, defenses, datasets; or describe one (NAME)",
        computes=False,
    )
    p.add_argument(
        "name",
        nargs="?",
        help="a plugin's name: its kind, description, parameters and what it applies to",
    )
    p.add_argument("--json", action="store_true", help="print NAME's description as JSON")
    for kind in ("attack", "protocol", "defense"):
        p = _command(
            sub,
            f"new-{kind}",
            "scaffold",
            f"scaffold {'an' if kind == 'attack' else 'a'} {kind} plugin package",
            func=f"run_new_{kind}",
            computes=False,
        )
        p.add_argument("name", help=f"snake_case {kind} name (== YAML key == entry-point name)")
        p.add_argument("dir", nargs="?", help="target directory (default: ./NAME)")
    p = _command(
        sub,
        "scorecard",
        "scorecard",
        "run a protocol once, then every applicable attack under every threat model",
    )
    p.add_argument("target", help="a protocol name (its small contract scenario) or a scenario")
    p.add_argument(
        "-o", "--out", type=_folder, help="output directory (default: runs/scorecard-<name>)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _version() -> str:
    """The installed distribution's version (its metadata; nothing imported), else the
    package's own."""
    try:
        return version("ot-testbed")
    except PackageNotFoundError:
        return __version__


class _Parser(argparse.ArgumentParser):
    """argparse with the testbed's one-line errors: a bad flag or value is one ``error:`` line
    naming the command (exit 2), with where to find the options, instead of the usage block;
    ``-h`` still prints the whole usage. Sub-commands' parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (`{self.prog} -h` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="testbed",
        description="Privacy-auditing testbed for federated optimal-transport protocols.",
        epilog="Exit codes: 0 done; 1 a plugin (protocol, attack, defense) failed at run time, "
        "or the privacy guard stopped a protocol's leak; 2 bad "
        "input (one line naming the file, line and field); 3 an attack failed while the rest "
        "ran; 130 interrupted (Ctrl-C), 143 stopped by SIGTERM. `testbed COMMAND -h` for "
        "each command's options.",
    )
    ap.add_argument("--version", action="version", version=f"testbed {_version()}")
    ap.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of an error instead of its one line (anywhere on the line)",
    )
    sub = ap.add_subparsers(dest="command", required=True)
    _run_commands(sub)
    _run_dir_commands(sub)
    _bench_command(sub)
    _plugin_commands(sub)
    return ap


#: the -W option the resource tracker is started with (see main)
_QUIET_TRACKER = "ignore::UserWarning:multiprocessing.resource_tracker"


def main(argv: list[str] | None = None) -> int:
    """Parse, then run the command's module under ``_common.guarded`` (one-line errors, exit
    codes 2 / 1 / 130, ``--debug`` for the traceback)."""
    cli = argv is None  # the command line itself, not a caller in this process
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if debug:
        argv.remove("--debug")
    args = build_parser().parse_args(argv)
    interruptible()
    if cli:  # this process and those it starts import POT without torch (testbed/ot.py)
        os.environ.setdefault(NO_TORCH, "1")
        # multiprocessing's resource tracker, a process of its own started with this
        # interpreter's -W options, warns on the user's screen about the sweep pool's semaphores
        # when a SIGTERM or Ctrl-C ends the driver (the testbed releases them itself:
        # _common._release_semaphores; a killed worker's registration can outlive it)
        if _QUIET_TRACKER not in sys.warnoptions:
            sys.warnoptions.append(_QUIET_TRACKER)

    def command(args) -> int:
        if args.computes:
            limit_blas_threads()  # small BLAS products: one thread (see testbed/threads.py)
        module = importlib.import_module(f"testbed.cli.{args.module}")
        return getattr(module, args.func)(args)

    rc = guarded(command, args, debug)
    if cli:
        end_process(rc)  # interrupted: ends here; otherwise a late Ctrl-C ends the teardown
    return rc


if __name__ == "__main__":
    sys.exit(main())
