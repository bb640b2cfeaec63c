"""Sweeps: a scenario's ``sweep:`` grid(s) x ``seeds:``, one fully resolved scenario per cell,
run with a progress bar, cached by resolved-config hash and resumable.

Grammar
-------
``sweep`` maps a *dotted path* into the scenario to a list of values. A path is keys joined by
dots with ``[i]`` for list items: ``protocol.params.support_size``,
``defenses[0].params.noise_multiplier``, or a whole subtree such as ``protocol`` (a list of
protocol specs) or ``defenses`` (a list of defense lists). The cells are the Cartesian product of
the paths' values; ``sweep`` may also be a list of such grids, whose cells are their union (so
protocols that take different knobs can sit in one sweep). Each cell runs once per entry of
``seeds`` (default: the scenario's ``seed``).

Every cell is validated like a scenario file, and its errors name the YAML line of the sweep value
that produced it. A cell's results live in ``cells/<config hash>/results.json``; a cell whose
results file exists (and names its hash) is never recomputed, so an interrupted sweep resumes.
``results.jsonl`` has one row per cell (in grid order once the sweep ends; while it runs, rows are
appended as cells finish). Every other file is written atomically. One sweep at a time per
directory (an ``fcntl`` lock, testbed/run/rundir.py).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed.exchange.bus import TEMP_MARK, atomic_write_bytes
from testbed.run import execute
from testbed.run.manifest import write_manifest
from testbed.run.progress import CellProgress
from testbed.run.results import (
    json_form,
    jsonable,
    package_versions,
    results_digests,
    write_json,
)
from testbed.run.rundir import finished_cells, run_dir_lock
from testbed.scenario.cells import Cell, expand_cells, parse_path, sweep_hash, value_label
from testbed.scenario.resolve import ResolvedScenario
from testbed.scenario.schema import Scenario
from testbed.scoring.results_models import SweepRow
from testbed.scoring.results_schema import parse_row
from testbed.sigint import raise_if_interrupted

__all__ = ["Cell", "SweepOutput", "expand_cells", "parse_path", "run_sweep", "value_label"]


# ----------------------------------------------------------------------------- running
@dataclass
class SweepOutput:
    out_dir: Path
    rows: list[dict]
    computed: int
    cached: int


def _done(cdir: Path, h: str) -> dict | None:
    """The cell's results if it finished (results.json is written last, atomically) and reads
    as the run wrote it: a row whose digests no longer match (edited by hand) is computed again,
    as an unreadable one is, rather than passed on into results.jsonl and the summary."""
    p = cdir / "results.json"
    if not p.is_file():
        return None
    try:
        res = json.loads(p.read_text())
    except (OSError, ValueError, RecursionError):
        return None  # unreadable: recompute (atomic writes make this a foreign file)
    if not isinstance(res, dict) or res.get("config_hash") != h:
        return None
    saved = res.get("digests")
    if not isinstance(saved, dict) or saved.get("results") != results_digests(res)["results"]:
        return None
    return res


def _row(cell: Cell, results: dict) -> dict:
    """A line of results.jsonl, checked against the results schema's :class:`SweepRow`."""
    row = {
        "cell": cell.hash,
        "index": cell.index,
        "seed": cell.seed,
        "setting": cell.setting,
        "labels": cell.labels,
        "label": cell.label,
        "results": results,
    }
    parse_row(SweepRow, json_form(row), f"results.jsonl: cell {cell.hash[:12]}")
    return row


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    text = "".join(json.dumps(jsonable(r), sort_keys=True) + "\n" for r in rows)
    atomic_write_bytes(path, text.encode())


def _append_jsonl(path: Path, rows: list[dict]) -> None:
    """One write per finished cell (bookkeeping linear in the number of cells). After a crash the
    file may end in a partial line; the restart rewrites it from the cells' results.json."""
    text = "".join(json.dumps(jsonable(r), sort_keys=True) + "\n" for r in rows)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def _clean_temps(out: Path) -> int:
    """Remove what an interrupted atomic write of the testbed left (names carrying
    ``TEMP_MARK``): temp files, and the half-written run directories of cells whose workers
    were stopped. Called with the sweep's lock held and no worker running; a user's own
    ``.*.tmp`` files are never touched."""
    n = 0
    for p in list(out.rglob(f".*.{TEMP_MARK}*.tmp")):  # listed first: directories go whole
        if p.is_symlink():
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
            n += 1
        elif p.is_file():
            p.unlink()
            n += 1
    return n


def _run_cell(rs: ResolvedScenario, cdir: Path) -> dict:
    """Run one cell (its record as the sweep resolved it: picklable, for worker processes);
    return its results."""
    execute(rs, cdir)
    return json.loads((cdir / "results.json").read_text())


def _args_of(c: Cell, out: Path) -> tuple:
    return (_run_cell, c.rs.portable(), out / "cells" / c.hash)


def _stop_workers(ex, grace: float = 1.0) -> None:
    """Stop a process pool now: cancel what has not started, end the running workers (SIGTERM,
    then SIGKILL after ``grace`` seconds) instead of waiting for their cells to finish."""
    procs = list((getattr(ex, "_processes", None) or {}).values())
    ex.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(timeout=grace)
    ex.shutdown(wait=True)  # the pool's manager thread sees its workers gone and ends


def _run_parallel(todo: dict[str, Cell], out: Path, jobs: int, finished) -> None:
    import multiprocessing as mp  # lazy: keeps refused input fast
    from concurrent.futures import (  # lazy: keeps refused input fast
        FIRST_COMPLETED,
        ProcessPoolExecutor,
        wait,
    )

    from testbed.run.interrupt import second_interrupt_exits  # lazy: keeps refused input fast
    from testbed.run.workers import worker_init  # lazy: keeps refused input fast

    # workers die with the sweep (kill -9 included), ignore Ctrl-C (this process stops them)
    # and get the CLI's BLAS threading (testbed/threads.py): parallelism comes from processes
    ex = ProcessPoolExecutor(
        max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=worker_init
    )
    try:
        futures = {ex.submit(*_args_of(c, out)): c for h, c in todo.items()}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in sorted(done, key=lambda f: futures[f].index):
                finished(futures[f], f.result())
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            second_interrupt_exits()
        _stop_workers(ex)
        _clean_temps(out)  # cells the stopped workers had half written
        raise
    ex.shutdown(wait=True)


def _write_sweep_files(sc: Scenario, cells: list[Cell], h: str, out: Path) -> None:
    """sweep.json (every cell's hash, index, seed, setting and label), config_hash and the
    scenario as given."""
    write_json(
        out / "sweep.json",
        {
            "scenario": sc.name,
            "sweep_hash": h,
            "sweep": sc.sweep,
            "seeds": sc.seeds if sc.seeds is not None else [sc.seed],
            "cells": [
                {
                    "cell": c.hash,
                    "index": c.index,
                    "seed": c.seed,
                    "setting": c.setting,
                    "label": c.label,
                }
                for c in cells
            ],
        },
    )
    atomic_write_bytes(out / "config_hash", (h + "\n").encode())
    base = {k: v for k, v in (sc._raw or sc.model_dump(mode="json")).items()}
    atomic_write_bytes(out / "scenario.yaml", yaml.safe_dump(base, sort_keys=False).encode())


def _plan(cells: list[Cell], out: Path):
    """(results of finished cells by index, how many were cached, cells by scenario hash, the
    distinct scenarios still to run): two settings may resolve to the same scenario, which runs
    once."""
    results: dict[int, dict] = {}
    for c in cells:
        r = _done(out / "cells" / c.hash, c.hash)
        if r is not None:
            results[c.index] = r
    cached = len(results)
    by_hash: dict[str, list[Cell]] = {}
    for c in cells:
        by_hash.setdefault(c.hash, []).append(c)
    todo: dict[str, Cell] = {}
    for c in cells:
        if c.index not in results and c.hash not in todo:
            if not any(results.get(d.index) for d in by_hash[c.hash]):
                todo[c.hash] = c
    for c in cells:  # cached duplicates of a finished scenario
        if c.index not in results:
            same = next((d for d in by_hash[c.hash] if d.index in results), None)
            if same is not None:
                results[c.index] = results[same.index]
    return results, cached, by_hash, todo


@contextlib.contextmanager
def _removed_if_nothing_finished(out: Path, existed: bool) -> Iterator[None]:
    """A sweep directory this call created is removed when the sweep fails before any cell
    finished (nothing to resume; a Ctrl-C keeps it): no empty run directory is left behind."""
    try:
        yield
    except Exception:
        if not existed and not finished_cells(out):
            shutil.rmtree(out, ignore_errors=True)
        raise


def run_sweep(
    sc: Scenario,
    out_dir: str | Path | None = None,
    progress: bool = False,
    after_cell: Callable[[Cell, int], None] | None = None,
    jobs: int = 1,
    finish: Callable[[Path], None] | None = None,
) -> SweepOutput:
    """Run every cell not already finished in ``out_dir``; write ``results.jsonl``.

    ``after_cell(cell, n_computed)`` is called after each newly computed cell (tests use it to
    inject an interruption). ``jobs > 1`` runs cells in that many worker processes; each cell is
    seeded by its own scenario, so the files are identical to a sequential run. The directory's
    ``manifest.json`` is written last; ``finish(out_dir)`` runs before the lock is released
    (``testbed run`` signs the manifest and writes the report there)."""
    cells = expand_cells(sc)
    h = sweep_hash(cells)
    out = Path(out_dir or sc.output.dir or Path("runs") / f"{sc.name}-{h[:8]}")
    existed = out.exists()
    out.mkdir(parents=True, exist_ok=True)
    # a second sweep in this directory stops with one line
    with run_dir_lock(out, write=True), _removed_if_nothing_finished(out, existed):
        _clean_temps(out)
        _write_sweep_files(sc, cells, h, out)
        results, cached, by_hash, todo = _plan(cells, out)
        computed = 0
        bar = CellProgress(len(cells), cached, sc.name) if progress else None
        # rows known so far, once; then one appended write per finished cell
        _write_jsonl(
            out / "results.jsonl", [_row(c, results[c.index]) for c in cells if c.index in results]
        )

        def finished(c: Cell, res: dict) -> None:
            nonlocal computed
            computed += 1
            same = by_hash[c.hash]
            for d in same:
                results[d.index] = res
            _append_jsonl(out / "results.jsonl", [_row(d, res) for d in same])
            if bar is not None:
                bar.update(len(same), c.label)
            if after_cell is not None:
                after_cell(c, computed)

        try:
            if jobs <= 1:
                for c in todo.values():
                    raise_if_interrupted()  # a Ctrl-C whose exception CPython dropped
                    finished(c, _run_cell(*_args_of(c, out)[1:]))
            else:
                _run_parallel(todo, out, jobs, finished)
        except KeyboardInterrupt:
            from testbed.run.interrupt import (
                second_interrupt_exits,  # lazy: keeps refused input fast
            )

            second_interrupt_exits()  # finished cells are on disk; a second Ctrl-C ends now
            # a worker may have finished a cell this process had not yet taken in: list
            # every finished cell (a restart skips them all)
            for c in cells:
                r = results.get(c.index) or _done(out / "cells" / c.hash, c.hash)
                if r is not None:
                    results[c.index] = r
            _write_jsonl(
                out / "results.jsonl",
                [_row(c, results[c.index]) for c in cells if c.index in results],
            )
            raise
        finally:
            if bar is not None:
                bar.close()
        rows = [_row(c, results[c.index]) for c in cells]
        _write_jsonl(out / "results.jsonl", rows)
        write_json(
            out / "run_info.json",
            {"cells": len(cells), "computed": computed, "cached": cached, **package_versions()},
        )
        write_manifest(out)
        if finish is not None:
            finish(out)
        return SweepOutput(out, rows, computed, cached)
