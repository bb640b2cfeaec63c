"""A sweep expanded into cells (grid(s) x seeds), each a fully validated scenario whose errors
name the line of the swept value; labels of swept values for tables and the report."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

from pydantic import ValidationError

from testbed.errors import ScenarioError
from testbed.scenario.limits import check_cell_count
from testbed.scenario.params import validate_plugins
from testbed.scenario.resolve import ResolvedScenario
from testbed.scenario.schema import Scenario
from testbed.scenario.yamlloc import first_error, line_of, node_at, node_set

__all__ = [
    "Cell",
    "axis_labels",
    "expand_cells",
    "parse_path",
    "sweep_hash",
    "value_label",
]

# A sweep expands into cells here, at load time (the scenario stage), so that every cell is
# validated with line-numbered errors before anything runs. testbed.run.sweep runs them.
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


def value_label(v: Any) -> str:
    """Short human label of a swept value (plugin specs as ``name(k=v)``, lists joined by +; a
    list inside a list in brackets, so ``[[0], [1, 2]]`` and ``[[0, 1], [2]]`` read apart)."""
    if isinstance(v, dict) and "name" in v:
        params = v.get("params") or {}
        inner = ",".join(f"{k}={value_label(x)}" for k, x in sorted(params.items()))
        return f"{v['name']}({inner})" if inner else str(v["name"])
    if isinstance(v, list):
        if not v:
            return "none"
        return "+".join(f"[{value_label(x)}]" if isinstance(x, list) else value_label(x) for x in v)
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
    rs: ResolvedScenario  # the cell's scenario, its plugins' configs, its hash
    labels: dict[str, str] = dc_field(default_factory=dict)

    @property
    def scenario(self) -> Scenario:
        return self.rs.scenario

    @property
    def hash(self) -> str:
        return self.rs.config_hash

    @property
    def label(self) -> str:
        return ", ".join(f"{p}={lab}" for p, lab in self.labels.items()) or "base"


def _grids(sc: Scenario) -> list[dict[str, list[Any]]]:
    if sc.sweep is None:
        return [{}]
    return [sc.sweep] if isinstance(sc.sweep, dict) else list(sc.sweep)


def _refuse_repeats(sc: Scenario, gloc: list, path: str, values: list) -> None:
    """A value listed twice on one axis would run the same cells twice and count them as two
    samples (a summary's n and interval); repeating a cell is what ``seeds:`` is for."""
    first: dict[str, int] = {}
    for j, v in enumerate(values):
        key = json.dumps(v, sort_keys=True, default=str)
        if key in first:
            line = line_of(sc._yaml_root, [*gloc, path, j])
            raise ScenarioError(
                f"{sc._fname}:{line}: sweep: {path}: {v!r} is listed twice (items {first[key]} "
                f"and {j}); list each value once (seeds: repeats cells with other seeds)"
            )
        first[key] = j


def expand_cells(sc: Scenario) -> list[Cell]:
    """Every cell of the sweep (grid(s) x seeds), each validated with line-numbered errors.
    A scenario loaded from YAML was expanded once at load time; that list is returned."""
    if sc._cells is not None:
        return list(sc._cells)
    fname, root = sc._fname, sc._yaml_root
    raw = sc._raw if sc._raw is not None else sc.model_dump(mode="json", exclude_none=True)
    raw = {k: v for k, v in raw.items() if k not in ("sweep", "seeds")}
    if root is not None:
        root = copy.copy(root)
        root.value = [(k, v) for k, v in root.value if k.value not in ("sweep", "seeds")]
    seeds = sc.seeds if sc.seeds is not None else [sc.seed]
    grid_list = _grids(sc)
    # refuse a sweep too large before any cell is built
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
                line = line_of(sc._yaml_root, [*gloc, p])
                raise ScenarioError(f"{fname}:{line}: sweep: {exc}") from None
            _refuse_repeats(sc, gloc, p, grid[p])
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
                        line = line_of(sc._yaml_root, [*gloc, p, j])
                        raise ScenarioError(f"{fname}:{line}: sweep: {exc}") from None
                    vnode = node_at(sc._yaml_root, [*gloc, p, j])
                    cell_root = node_set(cell_root, tokens[p], vnode)
                    setting[p] = value
                cell_raw["seed"] = seed
                if sc.seeds is not None:
                    cell_root = node_set(
                        cell_root, ["seed"], node_at(sc._yaml_root, ["seeds", s_i])
                    )
                try:
                    cell = Scenario.model_validate(cell_raw)
                except ValidationError as exc:
                    raise _with_cell(
                        first_error(exc, [], cell_root, fname, Scenario), setting
                    ) from None
                try:
                    configs = validate_plugins(cell, cell_root, fname, sc._base_dir)
                except ScenarioError as exc:
                    raise _with_cell(exc, setting) from None
                cell._base_dir = sc._base_dir
                cell._raw, cell._yaml_root, cell._fname = cell_raw, cell_root, fname
                cells.append(
                    Cell(
                        index=len(cells),
                        seed=seed,
                        setting=setting,
                        rs=ResolvedScenario.build(cell, configs),  # each cell resolved once
                        labels={p: labels[p][j] for p, j in zip(paths, combo)},
                    )
                )
    return cells


def _with_cell(exc: ScenarioError, setting: dict) -> ScenarioError:
    where = ", ".join(f"{p}={value_label(v)}" for p, v in setting.items())
    return ScenarioError(f"{exc} (in sweep cell {where})" if where else str(exc))


def sweep_hash(cells: list[Cell]) -> str:
    return hashlib.sha256("".join(c.hash for c in cells).encode()).hexdigest()
