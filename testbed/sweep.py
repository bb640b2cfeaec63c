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
directory (an ``fcntl`` lock, testbed/rundir.py).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from testbed.bus import atomic_write_bytes
from testbed.config import (
    Scenario,
    _first_error,
    _line_of,
    config_hash,
    resolve,
    validate_plugins,
)
from testbed.errors import ScenarioError

__all__ = ["Cell", "SweepOutput", "expand_cells", "parse_path", "run_sweep", "value_label"]

_TOKEN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)")
_FORBIDDEN = {"sweep", "seeds", "seed", "name", "output"}


def parse_path(path: str) -> list[str | int]:
    """``"defenses[0].params.sigma"`` -> ``["defenses", 0, "params", "sigma"]``."""
    out: list[str | int] = []
    for part in path.split("."):
        m = _TOKEN.fullmatch(part)
        if m is None:
            raise ValueError(f"bad sweep path {path!r} (near {part!r})")
        out.append(m.group(1))
        out.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    if out[0] in _FORBIDDEN:
        raise ValueError(f"sweep path {path!r}: {out[0]!r} cannot be swept (use `seeds`)")
    return out


def _set(raw: Any, tokens: list[str | int], value: Any, path: str) -> None:
    cur = raw
    for i, tok in enumerate(tokens[:-1]):
        nxt = tokens[i + 1]
        if isinstance(tok, int):
            if not isinstance(cur, list) or tok >= len(cur):
                raise ValueError(f"sweep path {path!r}: no item [{tok}]")
            cur = cur[tok]
        else:
            if not isinstance(cur, dict):
                raise ValueError(f"sweep path {path!r}: {tok!r} is not inside a mapping")
            if tok not in cur or cur[tok] is None:
                cur[tok] = [] if isinstance(nxt, int) else {}
            cur = cur[tok]
    last = tokens[-1]
    if isinstance(last, int):
        if not isinstance(cur, list) or last >= len(cur):
            raise ValueError(f"sweep path {path!r}: no item [{last}]")
        cur[last] = copy.deepcopy(value)
    else:
        if not isinstance(cur, dict):
            raise ValueError(f"sweep path {path!r}: {last!r} is not inside a mapping")
        cur[last] = copy.deepcopy(value)


# ----------------------------------------------------------------------------- YAML nodes
def _child(node, tok):
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if k.value == str(tok):
                return v
    elif isinstance(node, yaml.SequenceNode) and isinstance(tok, int) and tok < len(node.value):
        return node.value[tok]
    return None


def _node_at(node, tokens):
    for tok in tokens:
        if node is None:
            return None
        node = _child(node, tok)
    return node


def _node_set(node, tokens, value_node):
    """A copy of ``node`` with the subtree at ``tokens`` replaced by ``value_node`` (so a cell's
    errors point at the sweep value's line); untouched subtrees are shared."""
    if node is None or value_node is None:
        return node
    if not tokens:
        return value_node
    tok, rest = tokens[0], tokens[1:]
    new = copy.copy(node)
    if isinstance(node, yaml.MappingNode):
        new.value = list(node.value)
        for i, (k, v) in enumerate(new.value):
            if k.value == str(tok):
                if not rest:  # errors are reported at the key's line: point it at the value
                    k = copy.copy(k)
                    k.start_mark = value_node.start_mark
                new.value[i] = (k, _node_set(v, rest, value_node))
                return new
        key = yaml.ScalarNode("tag:yaml.org,2002:str", str(tok), value_node.start_mark)
        filler = yaml.MappingNode("tag:yaml.org,2002:map", [], value_node.start_mark)
        new.value.append((key, _node_set(filler, rest, value_node) if rest else value_node))
        return new
    if isinstance(node, yaml.SequenceNode) and isinstance(tok, int) and tok < len(node.value):
        new.value = list(node.value)
        new.value[tok] = _node_set(node.value[tok], rest, value_node)
        return new
    return node


# ----------------------------------------------------------------------------- labels
def value_label(v: Any) -> str:
    """Short human label of a swept value (plugin specs as ``name(k=v)``, lists joined by +)."""
    if isinstance(v, dict) and "name" in v:
        params = v.get("params") or {}
        inner = ",".join(f"{k}={value_label(x)}" for k, x in sorted(params.items()))
        return f"{v['name']}({inner})" if inner else str(v["name"])
    if isinstance(v, list):
        return "+".join(value_label(x) for x in v) if v else "none"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}={value_label(x)}" for k, x in sorted(v.items())) + "}"
    return str(v)


def axis_labels(values: list[Any]) -> list[str]:
    """Labels for one axis's values; plugin specs show only the params that differ on the axis."""

    def is_spec(v):
        return isinstance(v, dict) and "name" in v

    def specs(v):
        return [v] if is_spec(v) else list(v)

    if len(values) == 1 and is_spec(values[0]):
        return [str(values[0]["name"])]  # a single protocol spec: the series is its name
    if all(is_spec(v) or (isinstance(v, list) and all(map(is_spec, v))) for v in values):
        by_name: dict[str, list[dict]] = {}
        for v in values:
            for sp in specs(v):
                by_name.setdefault(sp["name"], []).append(sp.get("params") or {})
        differ = {
            name: {
                k
                for k in {k for p in ps for k in p}
                # a spec that appears once shows all its params; repeated ones only what differs
                if len(ps) == 1 or len({json.dumps(p.get(k), sort_keys=True) for p in ps}) > 1
            }
            for name, ps in by_name.items()
        }

        def short(sp):
            p = sp.get("params") or {}
            return {
                "name": sp["name"],
                "params": {k: x for k, x in p.items() if k in differ[sp["name"]]},
            }

        return [
            value_label(short(v)) if is_spec(v) else value_label([short(x) for x in v])
            for v in values
        ]
    return [value_label(v) for v in values]


# ----------------------------------------------------------------------------- cells
@dataclass
class Cell:
    """One fully resolved scenario of a sweep."""

    index: int
    seed: int
    setting: dict[str, Any]  # dotted path -> value
    scenario: Scenario
    resolved: dict
    hash: str
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return ", ".join(f"{p}={lab}" for p, lab in self.labels.items()) or "base"


def _grids(sc: Scenario) -> list[dict[str, list[Any]]]:
    if sc.sweep is None:
        return [{}]
    return [sc.sweep] if isinstance(sc.sweep, dict) else list(sc.sweep)


def expand_cells(sc: Scenario) -> list[Cell]:
    """Every cell of the sweep (grid(s) x seeds), each validated with line-numbered errors."""
    fname, root = sc._fname, sc._yaml_root
    raw = sc._raw if sc._raw is not None else sc.model_dump(mode="json", exclude_none=True)
    raw = {k: v for k, v in raw.items() if k not in ("sweep", "seeds")}
    if root is not None:
        root = copy.copy(root)
        root.value = [(k, v) for k, v in root.value if k.value not in ("sweep", "seeds")]
    seeds = sc.seeds if sc.seeds is not None else [sc.seed]
    grid_list = _grids(sc)
    from testbed.resources import check_cell_count  # before any cell is built

    check_cell_count(sc, len(seeds) * sum(math.prod(map(len, g.values())) for g in grid_list))
    cells: list[Cell] = []
    for g, grid in enumerate(grid_list):
        gloc = ["sweep"] if isinstance(sc.sweep, dict) else ["sweep", g]
        paths = list(grid)
        labels = {p: axis_labels(grid[p]) for p in paths}
        tokens = {}
        for p in paths:
            try:
                tokens[p] = parse_path(p)
            except ValueError as exc:
                line = _line_of(sc._yaml_root, [*gloc, p])
                raise ScenarioError(f"{fname}:{line}: sweep: {exc}") from None
        for combo in itertools.product(*(range(len(grid[p])) for p in paths)):
            for s_i, seed in enumerate(seeds):
                cell_raw = copy.deepcopy(raw)
                cell_root = root
                setting = {}
                for p, j in zip(paths, combo):
                    value = grid[p][j]
                    try:
                        _set(cell_raw, tokens[p], value, p)
                    except ValueError as exc:
                        line = _line_of(sc._yaml_root, [*gloc, p, j])
                        raise ScenarioError(f"{fname}:{line}: sweep: {exc}") from None
                    vnode = _node_at(sc._yaml_root, [*gloc, p, j])
                    cell_root = _node_set(cell_root, tokens[p], vnode)
                    setting[p] = value
                cell_raw["seed"] = seed
                if sc.seeds is not None:
                    cell_root = _node_set(
                        cell_root, ["seed"], _node_at(sc._yaml_root, ["seeds", s_i])
                    )
                try:
                    cell = Scenario.model_validate(cell_raw)
                except ValidationError as exc:
                    raise _with_cell(_first_error(exc, [], cell_root, fname), setting) from None
                try:
                    validate_plugins(cell, cell_root, fname, sc._base_dir)
                except ScenarioError as exc:
                    raise _with_cell(exc, setting) from None
                cell._base_dir = sc._base_dir
                cell._raw, cell._yaml_root, cell._fname = cell_raw, cell_root, fname
                resolved = resolve(cell)
                cells.append(
                    Cell(
                        index=len(cells),
                        seed=seed,
                        setting=setting,
                        scenario=cell,
                        resolved=resolved,
                        hash=config_hash(resolved),
                        labels={p: labels[p][j] for p, j in zip(paths, combo)},
                    )
                )
    return cells


def _with_cell(exc: ScenarioError, setting: dict) -> ScenarioError:
    where = ", ".join(f"{p}={value_label(v)}" for p, v in setting.items())
    return ScenarioError(f"{exc} (in sweep cell {where})" if where else str(exc))


def sweep_hash(cells: list[Cell]) -> str:
    return hashlib.sha256("".join(c.hash for c in cells).encode()).hexdigest()


# ----------------------------------------------------------------------------- running
@dataclass
class SweepOutput:
    out_dir: Path
    rows: list[dict]
    computed: int
    cached: int


def _done(cdir: Path, h: str) -> dict | None:
    """The cell's results if it finished (results.json is written last, atomically)."""
    p = cdir / "results.json"
    if not p.is_file():
        return None
    try:
        res = json.loads(p.read_text())
    except (OSError, ValueError):
        return None  # unreadable: recompute (atomic writes make this a foreign file)
    return res if res.get("config_hash") == h else None


def _row(cell: Cell, results: dict) -> dict:
    return {
        "cell": cell.hash,
        "index": cell.index,
        "seed": cell.seed,
        "setting": cell.setting,
        "labels": cell.labels,
        "label": cell.label,
        "results": results,
    }


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    from testbed.runner import jsonable

    text = "".join(json.dumps(jsonable(r), sort_keys=True) + "\n" for r in rows)
    atomic_write_bytes(path, text.encode())


def _append_jsonl(path: Path, rows: list[dict]) -> None:
    """One write per finished cell (bookkeeping linear in the number of cells). After a crash the
    file may end in a partial line; the restart rewrites it from the cells' results.json."""
    from testbed.runner import jsonable

    text = "".join(json.dumps(jsonable(r), sort_keys=True) + "\n" for r in rows)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def _clean_temps(out: Path) -> int:
    """Remove temp files an interrupted atomic write of the testbed left (their names carry
    ``TEMP_MARK``); a user's own ``.*.tmp`` files are never touched."""
    from testbed.bus import TEMP_MARK

    n = 0
    for p in out.rglob(f".*.{TEMP_MARK}*.tmp"):
        if p.is_file() and not p.is_symlink():
            p.unlink()
            n += 1
    return n


def _run_cell(raw: dict, base_dir: str, cdir: Path) -> dict:
    """Run one cell from its raw scenario (picklable, for worker processes); return results."""
    from testbed.runner import run_scenario

    sc = Scenario.model_validate(raw)
    sc._base_dir = base_dir
    run_scenario(sc, cdir)
    return json.loads((cdir / "results.json").read_text())


def _run_parallel(todo: dict[str, Cell], out: Path, jobs: int, finished) -> None:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from testbed.workers import worker_init

    # workers die with the sweep (kill -9 included) and get the CLI's BLAS threading
    # (testbed/threads.py): parallelism comes from processes
    with ProcessPoolExecutor(
        max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=worker_init
    ) as ex:
        futures = {
            ex.submit(_run_cell, c.scenario._raw, c.scenario._base_dir, out / "cells" / h): c
            for h, c in todo.items()
        }
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=lambda f: futures[f].index):
                    finished(futures[f], f.result())
        except BaseException:
            ex.shutdown(wait=False, cancel_futures=True)
            raise


def run_sweep(
    sc: Scenario,
    out_dir: str | Path | None = None,
    progress: bool = False,
    after_cell: Callable[[Cell, int], None] | None = None,
    jobs: int = 1,
) -> SweepOutput:
    """Run every cell not already finished in ``out_dir``; write ``results.jsonl``.

    ``after_cell(cell, n_computed)`` is called after each newly computed cell (tests use it to
    inject an interruption). ``jobs > 1`` runs cells in that many worker processes; each cell is
    seeded by its own scenario, so the files are identical to a sequential run."""
    from testbed.runner import package_versions, write_json

    cells = expand_cells(sc)
    h = sweep_hash(cells)
    out = Path(out_dir or sc.output.dir or Path("runs") / f"{sc.name}-{h[:8]}")
    out.mkdir(parents=True, exist_ok=True)
    from testbed.rundir import run_dir_lock

    with run_dir_lock(out, write=True):  # a second sweep in this directory stops with one line
        _clean_temps(out)
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
        results: dict[int, dict] = {}
        for c in cells:
            r = _done(out / "cells" / c.hash, c.hash)
            if r is not None:
                results[c.index] = r
        cached = len(results)
        computed = 0
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(
                total=len(cells), initial=cached, desc=sc.name, unit="cell", dynamic_ncols=True
            )
        # distinct scenarios still to run (two settings may resolve to the same scenario)
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
                bar.update(len(same))
                bar.set_postfix_str(c.label[:60], refresh=False)
            if after_cell is not None:
                after_cell(c, computed)

        try:
            if jobs <= 1:
                for c in todo.values():
                    finished(
                        c, _run_cell(c.scenario._raw, c.scenario._base_dir, out / "cells" / c.hash)
                    )
            else:
                _run_parallel(todo, out, jobs, finished)
        finally:
            if bar is not None:
                bar.close()
        rows = [_row(c, results[c.index]) for c in cells]
        _write_jsonl(out / "results.jsonl", rows)
        write_json(
            out / "run_info.json",
            {"cells": len(cells), "computed": computed, "cached": cached, **package_versions()},
        )
        return SweepOutput(out, rows, computed, cached)
