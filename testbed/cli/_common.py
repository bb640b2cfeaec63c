"""What every command shares: number and table formatting, loading a scenario with the
command line's limits, the attack rows' one-line summary, and the mapping of exceptions to
one-line errors and exit codes (bad input 2, a runtime fault 1, Ctrl-C 130)."""

from __future__ import annotations

import os
import sys
import traceback

from testbed.errors import TestbedError
from testbed.scenario.resources import CellTimeoutError

EXIT_OK, EXIT_FAULT, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

ATTACK_KEYS = (
    "leakage",
    "w2_ratio",
    "coverage",
    "exact_recovery",
    "matching_rate",
    "matching_rate_any",
    "auc",
    "tv",
)


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_value(v) -> str:
    """A scalar as 6 significant digits; an array (e.g. a distance matrix) by its shape."""
    if hasattr(v, "shape") and getattr(v, "ndim", 0) > 0:
        return "[" + "x".join(str(n) for n in v.shape) + " array]"
    return f"{v:.6g}"


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([line, sep, *body])


def load_checked(args):
    """Load a scenario with the command line's limit overrides, then check its memory estimate
    (testbed/scenario/resources.py) before anything is allocated."""
    from testbed.scenario.loading import load_scenario
    from testbed.scenario.resources import check_scenario, set_cli_overrides

    set_cli_overrides(
        allow_large=getattr(args, "allow_large", False) or None,
        max_cells=getattr(args, "max_cells", None),
    )
    sc = load_scenario(args.scenario)
    check_scenario(sc)
    return sc


def print_attack_rows(rows) -> None:
    for a in rows:
        keys = [k for k in ATTACK_KEYS if k in a]
        print(
            f"attack {a['attack']}{' (' + a['method'] + ')' if 'method' in a else ''} "
            f"on {a['target']} (observer {a['observer']}): "
            + ", ".join(f"{k}={a[k]:.4g}" for k in keys)
        )


def bench_command() -> str:
    """The command line as typed, for the benchmark files' provenance."""
    return "testbed bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else ""


def stderr_log(quiet: bool):
    return (lambda s: None) if quiet else (lambda s: print(s, file=sys.stderr, flush=True))


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def interruptible() -> None:
    """SIGINT raises KeyboardInterrupt even when the testbed was started with SIGINT ignored
    (a background job of a non-interactive shell inherits that, and Python then leaves it
    ignored), so that `kill -INT` and Ctrl-C always end a run quietly with its results kept."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _error(text: str, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    print(f"error: {text}", file=sys.stderr)


def guarded(fn, args, debug: bool) -> int:
    """Run one command: bad input exits 2 with one line naming file/line/field, a runtime
    fault exits 1 with one line, ``debug`` shows the traceback; a closed pipe and Ctrl-C end
    quietly (results are written atomically as they are computed, so nothing is lost)."""
    try:
        rc = fn(args)
        sys.stdout.flush()  # inside the try: a closed pipe is handled below, not at exit
        return rc
    except BrokenPipeError:
        # the reader stopped early (`testbed transcript RUN | head`): end quietly; stdout goes
        # to /dev/null so the interpreter's final flush does not raise again
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
    except TestbedError as exc:
        if debug:
            traceback.print_exc()
            details = getattr(exc, "details", None)  # e.g. an isolated attack's own traceback
            if details:
                print(f"--- traceback in the attack's process ---\n{details}", file=sys.stderr)
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except CellTimeoutError as exc:  # a runtime stop: finished cells are on disk
        _error(one_line(exc), debug)
        return EXIT_FAULT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (RecursionError, MemoryError) as exc:
        what = "input nested too deeply" if isinstance(exc, RecursionError) else "out of memory"
        _error(f"{what} ({type(exc).__name__}); rerun with --debug for details", debug)
        return EXIT_FAULT
    except OSError as exc:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        _error(f"{where}{exc.strerror or one_line(exc)}", debug)
        return EXIT_FAULT
    except Exception as exc:  # a fault, not bad input: one line, traceback on --debug
        _error(
            f"{type(exc).__name__}: {one_line(exc)} (rerun with --debug for the traceback)", debug
        )
        return EXIT_FAULT
