"""What every command shares: number and table formatting, loading a scenario with the
command line's limits, the attack rows' one-line summary, and the mapping of exceptions to
one-line errors and exit codes (bad input 2, a runtime fault 1, an attack failed 3, Ctrl-C 130)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import traceback
from pathlib import Path

from testbed.errors import TestbedError
from testbed.report.fmt import (
    fmt,
    fmt_bytes,  # noqa: F401  (the commands import it from here)
)
from testbed.scoring.names import Metric

EXIT_OK, EXIT_FAULT, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_TERMINATED = 143  # SIGTERM, handled as Ctrl-C is (testbed/sigint.py)
EXIT_ATTACK_FAILED = 3  # results and report written, but an attack failed (docs/reference/trust.md)

ATTACK_KEYS = (
    Metric.LEAKAGE,
    Metric.W2_RATIO,
    Metric.COVERAGE,
    Metric.EXACT_RECOVERY,
    Metric.MATCHING_RATE,
    Metric.MATCHING_RATE_ANY,
    Metric.AUC,
    Metric.TPR_AT_0_1PCT_FPR,
    Metric.TV,
)
#: how a key of ATTACK_KEYS is written on the summary line (the key itself when not listed)
ATTACK_KEY_NAMES = {Metric.TPR_AT_0_1PCT_FPR: "TPR@0.1%FPR"}


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
    from testbed.scenario.loading import load_scenario  # lazy: --version loads _common
    from testbed.scenario.resources import (  # lazy: --version loads _common
        check_scenario,
        set_cli_overrides,
    )

    set_cli_overrides(
        allow_large=getattr(args, "allow_large", False) or None,
        max_cells=getattr(args, "max_cells", None),
    )
    sc = load_scenario(args.scenario)
    check_scenario(sc)
    from testbed.scenario.clipnorm import clip_norm_warnings  # lazy: --version loads _common

    for line in clip_norm_warnings(sc):  # legal, but probably not meant: said, never refused
        print(f"warning: {line}", file=sys.stderr)
    if sc.seeds is not None and "seed" in sc.model_fields_set:  # legal, but never used
        from testbed.scenario.yamlloc import where  # lazy: --version loads _common

        spot = where(sc._fname, sc._yaml_root, ["seed"])
        print(f"note: {spot} is not used: seeds: gives every run's seed", file=sys.stderr)
    return sc


def print_attack_rows(rows) -> None:
    """One line per attack row, targets in natural order (client_2 before client_10); an
    attack setting run against more than ``summary.POPULATION_MIN`` targets is summarised as
    the distribution over them (``summary.population_lines``)."""
    from testbed.cli.summary import (  # lazy: --version loads _common
        POPULATION_MIN,
        attack_groups,
        population_lines,
    )

    for key, group in attack_groups(list(rows)):
        if len(group) > POPULATION_MIN:
            for line in population_lines(key, group, ATTACK_KEYS, ATTACK_KEY_NAMES):
                print(line)
        else:
            _print_rows(group)


def _print_rows(rows) -> None:
    for a in rows:
        if "failed" in a:
            print(f"attack {a['label']} (observer {a['observer']}): FAILED in {a['failed']}")
            continue
        keys = [k for k in ATTACK_KEYS if k in a]
        name = a.get("label") or a["attack"]  # two settings of one attack: their labels differ
        print(
            f"attack {name}{' (' + a['method'] + ')' if 'method' in a else ''} "
            f"on {a['target']} (observer {a['observer']}): "
            + ", ".join(f"{ATTACK_KEY_NAMES.get(k, k)}={fmt(a[k])}{_floor(a, k)}" for k in keys)
            + _record_words(a)
        )


def _floor(row, key: str) -> str:
    """For TPR at 0.1 % FPR read at a coarser FPR (fewer than 1000 non-members: the floor
    1/#non-members, DESIGN.md), that FPR, so the figure is never read as the 0.1 % one."""
    used = row.get(Metric.ALPHA_USED_0_1PCT)
    if (
        key != Metric.TPR_AT_0_1PCT_FPR
        or not isinstance(used, (int, float))
        or used <= 0.001 + 1e-12
    ):
        return ""
    n = row.get(Metric.N_NONMEMBERS)
    return f" (at FPR {fmt(used)}: {int(n) if n else '?'} non-members)"


def _record_words(a: dict) -> str:
    """The record test of a reconstruction row in the report's words: its figure when it ran,
    "not measured" and why when it could not (never a 0)."""
    from testbed.scoring.vocabulary import (  # lazy: --version loads _common
        MEASURED,
        NOT_MEASURED,
        record_test,
    )

    state, why = record_test(a)
    if state == NOT_MEASURED:
        return f"; record test {NOT_MEASURED} ({why})"
    if state == MEASURED:
        return f"; record_leakage={fmt(a.get(Metric.RECORD_LEAKAGE))} (record test against {why})"
    return ""


def failed_attacks(rows) -> int:
    """One ``error:`` line per failed attack row; exit code 3 when there is any, else 0."""
    failed = [a for a in rows if "failed" in a]
    for a in failed:
        print(
            f"error: attack {a['label']!r} failed in {a['failed']}: {a['reason']}", file=sys.stderr
        )
    return EXIT_ATTACK_FAILED if failed else EXIT_OK


@contextlib.contextmanager
def attack_tracebacks(debug: bool):
    """With --debug, a failed attack's traceback (from its process) and the tail of what each
    attack printed in its sandbox (logged by :mod:`testbed.sandbox.isolation`) go to stderr,
    and so do Ray's own messages (the ``testbed.engine`` logger: ``ray_cluster.ray_verbosity``)."""
    import logging  # lazy: --version loads _common

    if not debug:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    names = ("testbed.attack", "testbed.sandbox.isolation", "testbed.engine")
    logs = [logging.getLogger(n) for n in names]
    old_levels = [log.level for log in logs]
    for log in logs:
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        for log, level in zip(logs, old_levels):
            log.removeHandler(handler)
            log.setLevel(level)


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
    import atexit  # lazy: --version loads _common

    from testbed.sigint import install_first_interrupt  # lazy: --version loads _common

    if threading.current_thread() is threading.main_thread():
        install_first_interrupt()  # raises KeyboardInterrupt, and remembers the signal
        atexit.register(_ignore_late_sigint)  # registered first, so it runs last


#: set when a command ended on Ctrl-C
_interrupted = False


def _ignore_late_sigint() -> None:  # pragma: no cover - runs at interpreter exit
    """The last ``atexit`` handler: once a command has returned (or was interrupted), ignore
    SIGINT for the rest of the interpreter's exit. Late in its shutdown CPython puts every
    Python-level signal handler back to the system default, so a second Ctrl-C landing there
    would kill the process by the signal (status -2 to a parent, not 130); nothing is left to
    stop by then but module teardown.
    Before this point a second Ctrl-C exits 130 at once (:mod:`testbed.run.interrupt`)."""
    import signal  # lazy: --version loads _common

    if _interrupted or _returned:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _error(text: str, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    print(f"error: {text}", file=sys.stderr)


def guarded(fn, args, debug: bool) -> int:
    """Run one command: bad input exits 2 with one line naming file/line/field, a runtime
    fault exits 1 with one line, ``debug`` shows the traceback; a closed pipe and Ctrl-C end
    quietly (results are written atomically as they are computed, so nothing is lost)."""
    try:
        with attack_tracebacks(debug):
            rc = fn(args)
        sys.stdout.flush()  # inside the try: a closed pipe is handled below, not at exit
        if _signal_dropped():  # a Ctrl-C whose KeyboardInterrupt CPython dropped on the way
            return _on_interrupt()
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
        return getattr(exc, "exit_code", EXIT_BAD_INPUT)  # a plugin's own fault: 1
    except KeyboardInterrupt:
        return _on_interrupt()
    except (RecursionError, MemoryError) as exc:
        what = "input nested too deeply" if isinstance(exc, RecursionError) else "out of memory"
        _error(f"{what} ({type(exc).__name__}); rerun with --debug for details", debug)
        return EXIT_FAULT
    except OSError as exc:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        _error(f"{where}{exc.strerror or one_line(exc)}", debug)
        return EXIT_FAULT
    except Exception as exc:  # a fault, not bad input: one line, traceback on --debug
        if _from_interrupt(exc):
            return _on_interrupt()
        _error(
            f"{type(exc).__name__}: {one_line(exc)} (rerun with --debug for the traceback)", debug
        )
        return EXIT_FAULT
    except BaseException as exc:
        if not _cell_timeout(exc):
            raise
        _error(one_line(exc), debug)  # a runtime stop: finished cells are on disk
        return EXIT_FAULT


def _signal_dropped() -> bool:
    """Whether a SIGINT came during the command although it returned (its KeyboardInterrupt
    landed in a weakref callback or a ``__del__``, where CPython prints "Exception ignored" and
    goes on)."""
    from testbed.sigint import was_interrupted  # lazy: --version loads _common

    return was_interrupted()


def _on_interrupt() -> int:
    """Ctrl-C: "interrupted", exit 130; SIGTERM: "terminated (SIGTERM)", exit 143."""
    import signal  # lazy: --version loads _common

    global _interrupted
    _interrupted = True
    from testbed.run.interrupt import second_interrupt_exits  # lazy: --version loads _common
    from testbed.sigint import interrupt_signal  # lazy: --version loads _common

    second_interrupt_exits()  # a second Ctrl-C from here on exits 130 at once
    if interrupt_signal() == signal.SIGTERM:
        print("terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED
    print("interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def _from_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` stands for a Ctrl-C: a compiled module interrupted while it was being
    imported reports ``ImportError: initialization failed`` (pybind11), raised from the
    KeyboardInterrupt."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def end_process(rc: int) -> None:
    """The command line's exit, once a command has returned ``rc`` (results and report are
    on disk, written atomically).

    - Interrupted (130): flush and end the process at once (``os._exit``), without the
      interpreter's teardown. A Ctrl-C may have landed inside a compiled module's import (torch,
      a pybind11 module), and tearing down a half-initialised module can abort the interpreter
      (``Fatal Python error: PyThreadState_Get``) or make CPython kill itself by SIGINT. The
      guard worker ends when its pipe closes with the process; sweep workers die with it
      (``PR_SET_PDEATHSIG``); Ray is shut down by the engine's ``finally``.
    - Otherwise the interpreter exits as usual, and a Ctrl-C during its teardown (about a second
      with torch loaded) ends the process at once with ``rc``, without a traceback: there is
      nothing left to stop.
    """
    import signal  # lazy: --version loads _common

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if rc in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        _release_semaphores()
        os._exit(rc)
    global _returned
    _returned = True
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, lambda signum, frame: os._exit(rc))
        signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(rc))


def _release_semaphores() -> None:
    """Unlink and unregister this process's multiprocessing semaphores before ``os._exit``.

    A sweep's process pool (spawn context) registers the locks of its queues with
    multiprocessing's resource tracker, a process of its own; a normal exit runs their
    finalizers, ``os._exit`` does not. The tracker, seeing this process gone, then cleans up
    and prints ``UserWarning: resource_tracker: There appear to be 2 leaked semaphore objects``
    on the user's screen after an interrupted sweep (5 times in 10 interrupted sweeps on a
    loaded machine). Only those finalizers run here (``SemLock._cleanup``: an unlink and a
    message to the tracker; nothing that waits). ``_finalizer_registry`` is CPython's own
    registry (``multiprocessing.util``), read only when multiprocessing was imported."""
    mp_util = sys.modules.get("multiprocessing.util")
    mp_sync = sys.modules.get("multiprocessing.synchronize")
    if mp_util is None or mp_sync is None:
        return
    cleanup = getattr(mp_sync.SemLock, "_cleanup", None)
    for finalizer in list(getattr(mp_util, "_finalizer_registry", {}).values()):
        if getattr(finalizer, "_callback", None) is cleanup:
            try:
                finalizer()
            except Exception:  # already unlinked, or the tracker gone: nothing to tell it
                pass


#: set when the command has returned: the rest is the interpreter's teardown
_returned = False


def _cell_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``limits.cell_seconds`` stop, without importing the limits (and
    pydantic) for a command that never loaded them: then it cannot be one."""
    limits = sys.modules.get("testbed.scenario.limits")
    return limits is not None and isinstance(exc, limits.CellTimeoutError)


# ----------------------------------------------------------------------------- run directories
#: where ``testbed run`` puts a run by default: ``runs/<name>-<hash8>`` under the current directory
RUNS = Path("runs")
RUN_HELP = (
    "a run directory, or a scenario file or name: its latest run under ./runs/ "
    "(a glob such as runs/NAME-*/ matches every run of a scenario: give one)"
)


def run_hash(sc) -> str:
    """The hash a run directory is named by: the resolved scenario's config hash, or for a
    sweep the hash over its cells."""
    if sc.is_sweep:
        from testbed.scenario.cells import expand_cells, sweep_hash  # lazy: --version loads _common

        return sweep_hash(expand_cells(sc))
    from testbed.scenario.resolve import ResolvedScenario  # lazy: --version loads _common

    return ResolvedScenario.of(sc).config_hash


def planned_run_dir(sc, out: str | None, h: str | None = None) -> Path:
    """Where ``testbed run`` writes ``sc``: ``--out``, else the scenario's ``output.dir``, else
    ``runs/<name>-<hash8>`` under the current directory (:func:`run_hash`; ``h`` when the caller
    has it)."""
    if out or sc.output.dir:
        return Path(out or sc.output.dir)
    return RUNS / f"{sc.name}-{(h or run_hash(sc))[:8]}"


def announce_run_dir(path: Path, scenario: str) -> None:
    """Say once, before the run, where its directory goes; a scenario kept outside the current
    directory is told that its run is not written beside it."""
    where = f"run directory: {path}/"
    here = Path.cwd().resolve()
    if not path.is_absolute() and here not in Path(scenario).resolve().parents:
        where += f" (under the current directory {here}, not beside the scenario; --out to choose)"
    print(where)


def _scenario_target(text: str) -> tuple[str, Path | None]:
    """(scenario name, its ``output.dir`` or None) of a scenario file or a bare name."""
    p = Path(text)
    if p.is_file():
        import yaml  # lazy: --version loads _common

        from testbed.scenario.loading import check_yaml  # lazy: --version loads _common

        try:
            text_of = p.read_text()
            check_yaml(text_of, str(p))  # duplicate keys: the first name: is not the one used
            raw = yaml.safe_load(text_of)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise TestbedError(
                f"{p}: not a run directory, and unreadable as a scenario ({exc})"
            ) from None
        name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(name, str):
            raise TestbedError(f"{p}: not a run directory, and not a scenario (no name: field)")
        out = (raw.get("output") or {}).get("dir") if isinstance(raw.get("output"), dict) else None
        return name, Path(out) if out else None
    if re.fullmatch(r"[A-Za-z0-9_.-]+", text) and not text.endswith((".yaml", ".yml")):
        return text, None
    raise TestbedError(f"{text}: run directory not found, and not a scenario file or name")


def _finished_at(run: Path) -> float | None:
    """When a run (or sweep) finished writing its results; None while it has none."""
    for name in ("results.jsonl", "results.json"):
        if (run / name).is_file():
            return (run / name).stat().st_mtime
    return None


def find_run_dir(targets: list[str], command: str) -> Path:
    """The run directory a ``report``/``attack``/``transcript`` command works on: a directory as
    given, or the latest finished run of a scenario (file or name) under ./runs/, said once.
    What a killed run left instead of a run is refused with one line
    (:func:`testbed.run.rundir.interrupted`), and so are several targets (a glob that matched
    several runs)."""
    if len(targets) > 1:
        shown = ", ".join(targets[:3]) + (", ..." if len(targets) > 3 else "")
        raise TestbedError(
            f"{command}: {len(targets)} run directories given ({shown}); a glob such as "
            f"runs/NAME-*/ matches every run of a scenario: give one, or the scenario "
            f"(testbed {command} SCENARIO.yaml) for its latest run"
        )
    target = targets[0]
    if Path(target).is_dir():
        from testbed.run.rundir import interrupted  # lazy: --version loads _common

        if (why := interrupted(target)) is not None:
            raise TestbedError(why)
        return Path(target)
    name, out = _scenario_target(target)
    if out is not None:
        if not out.is_dir():
            raise TestbedError(f"{target}: its output.dir {out} does not exist (not run yet?)")
        candidates = [out]
    else:
        pattern = re.compile(re.escape(name) + r"-[0-9a-f]{8}")
        candidates = [d for d in RUNS.glob("*-*") if d.is_dir() and pattern.fullmatch(d.name)]
    finished = [(t, d) for d in candidates if (t := _finished_at(d)) is not None]
    if not finished:
        raise TestbedError(
            f"{target}: no finished run of scenario {name!r} under {out or RUNS}/ "
            f"(`testbed run` writes one)"
        )
    # a directory named <name>-<hash8> must hold that config hash: one renamed or copied into
    # the name of another scenario's run is never taken for it
    misnamed = [d for _, d in finished if out is None and not _holds_its_hash(d)]
    finished = [(t, d) for t, d in finished if d not in misnamed]
    if not finished:
        bad = misnamed[0]
        raise TestbedError(
            f"{bad}: its name says config hash {bad.name[-8:]}, but it holds a run of another "
            f"({_config_hash_of(bad)[:8] or 'none'}); not using it"
        )
    run = max(finished)[1]
    more = f"the latest of {len(finished)} runs" if len(finished) > 1 else "its only run"
    more += f" of scenario {name!r}"
    planned = _planned_for_file(target) if out is None else None
    if planned is not None:
        if any(d == planned for _, d in finished):
            run = planned
            more = f"the run of {target} as it is now, one of {len(finished)} runs"
            more = more if len(finished) > 1 else f"the run of {target} as it is now"
        else:
            more += (
                f"; none was made with {target} as it is now ({planned.name[-8:]}): "
                f"`testbed run {target}` makes one"
            )
    print(f"using {run}/ ({more})", file=sys.stderr)
    return run


def _config_hash_of(d: Path) -> str:
    try:
        return (d / "config_hash").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _holds_its_hash(d: Path) -> bool:
    """Whether a run directory named ``<name>-<hash8>`` holds a run of that config hash."""
    return _config_hash_of(d).startswith(d.name[-8:])


def _planned_for_file(target: str) -> Path | None:
    """The run directory ``testbed run TARGET`` would write when TARGET is a valid scenario file
    (by its config hash), else None (a bare name, or a file that does not validate)."""
    if not Path(target).is_file():
        return None
    from testbed.scenario.loading import load_scenario  # lazy: --version loads _common

    try:
        return planned_run_dir(load_scenario(target), None)
    except TestbedError:  # an invalid file still names its scenario: its latest run is used
        return None
