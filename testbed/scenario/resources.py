"""Resource limits checked before a run allocates anything (issue 12).

A scenario may hold a ``limits`` block::

    limits:
      memory_gb: 4          # budget for the estimate (default: the memory available now)
      allow_large: true     # run even when the estimate exceeds the budget
      cell_seconds: 600     # wall-clock budget of one run (of each cell of a sweep)
      max_cells: 50000      # a sweep larger than MAX_CELLS (default 10 000) is refused otherwise
      data_file_mb: 500     # a csv/npy file above MAX_DATA_FILE_MB (64 MiB) is refused otherwise

``testbed run --allow-large`` and ``--max-cells N`` override the same checks from the command
line. :func:`check_memory` estimates the largest arrays a run builds from the scenario alone
(dataset rows x dimension, the n_a x n_b cost matrix and plan of the largest exact OT the run and
its reference solve, each party against its support, covariance matrices, projections) and stops
with one line naming the field, its YAML line and the estimate. Party sizes come from the
partitioner's :meth:`~testbed.data.partitions.PartitionerPlugin.party_rows` (exact, or an upper
bound for a random split; an equal split when it does not say), the pairs from the protocol's
:meth:`~protocols._base.Protocol.exact_ot_pairs` (default: any two parties). The estimate is an
order of magnitude, not an accounting: it exists so that a typo such as ``n: 10000000`` ends in a
message instead of a MemoryError or a swapping machine.
:func:`cell_budget` stops a run that runs past ``cell_seconds`` (checked between Python steps:
a single long native call finishes first); a sweep keeps its finished cells and resumes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from testbed.data.partitions import equal_rows
from testbed.errors import ScenarioError
from testbed.registry import PARTITIONERS, PROTOCOLS, plugin_phase
from testbed.scenario.cells import expand_cells
from testbed.scenario.limits import (
    _CLI,
    MAX_CELLS,
    MAX_DATA_FILE_MB,
    CellTimeoutError,
    LimitsSpec,
    ResourceLimitError,
    _limits,
    _where,
    cell_budget,
    check_cell_count,
    set_cli_overrides,
)
from testbed.scenario.resolve import ResolvedScenario
from testbed.scenario.schema import Scenario

if TYPE_CHECKING:
    from testbed.data.partitions import PartyRows

__all__ = [
    "MAX_CELLS",
    "CellTimeoutError",
    "Estimate",
    "LimitsSpec",
    "ResourceLimitError",
    "available_memory",
    "cell_budget",
    "check_cell_count",
    "check_data_file",
    "check_memory",
    "check_party_rows",
    "check_scenario",
    "estimate_memory",
    "set_cli_overrides",
]

_F8 = 8  # bytes per float64


# ----------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class Estimate:
    """One array family a run builds: the field that sizes it, bytes, and how it was counted."""

    loc: tuple
    nbytes: float
    formula: str


def available_memory() -> int:
    """Bytes available now: MemAvailable, capped by a cgroup v2 memory limit when one is set."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            avail = 8 << 30
    try:
        cg = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        if cg != "max":
            avail = min(avail, max(int(cg) - used, 0))
    except (OSError, ValueError):
        pass
    return int(avail)


def _fmt(nbytes: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes / 1024:.1f} KiB"


def _dataset_shape(name: str, p: dict) -> tuple[int, int, tuple, str] | None:
    """(rows, dim, field that sizes the rows, its description) from the dataset's params."""
    loc = ("data", "dataset", "params")
    if name == "gaussians":
        n = sum(int(c.get("n", 0)) for c in p.get("components") or [])
        return n, int(p.get("d", 2)), (*loc, "components"), "sum of components' n"
    if name == "valence_arousal":
        return sum(p.get("n_per_class") or []), int(p.get("d", 16)), (*loc, "n_per_class"), ""
    if name == "npy" and p.get("path"):
        try:
            arr = np.load(p["path"], mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError):
            return None  # the loader reports an unreadable file with its own message
        shape = tuple(arr.shape) + (1, 1)
        return int(shape[0]), int(shape[1]), (*loc, "path"), "rows in the file"
    if name == "csv" and p.get("path"):
        try:
            rows, cols = _csv_shape(p["path"])
        except OSError:
            return None  # the loader reports an unreadable file with its own message
        return rows, cols, (*loc, "path"), "lines in the file"
    n = p.get("n_samples")
    if isinstance(n, int):
        return n, 64, (*loc, "n_samples"), ""
    return None


def _csv_shape(path: str) -> tuple[int, int]:
    """Lines and first-line columns of a CSV file, read in 1 MiB blocks (no parsing)."""
    rows, cols = 0, 1
    with open(path, "rb") as f:
        first = f.readline()
        cols = first.count(b",") + 1
        rows = 1 if first else 0
        last = b"\n"
        while block := f.read(1 << 20):
            rows += block.count(b"\n")
            last = block[-1:]
    return rows + (last != b"\n"), cols  # a last line without its newline counts too


def _class_rows(name: str, p: dict) -> dict[int, int] | None:
    """Rows per label when the dataset's params fix them (label = component / class index)."""
    if name == "gaussians":
        return {i: int(c.get("n", 0)) for i, c in enumerate(p.get("components") or [])}
    if name == "valence_arousal" and p.get("n_per_class"):
        return dict(enumerate(int(n) for n in p["n_per_class"]))
    return None


def _partitioner(rs: ResolvedScenario):
    """The scenario's partitioner with its config, or ``None`` when it cannot be built (its
    constructor's error is reported by the run, with its own message)."""
    try:
        return PARTITIONERS.get(rs.scenario.data.partition.name)(rs.configs.partition)
    except Exception:
        return None


def _protocol(rs: ResolvedScenario):
    """The scenario's protocol with its config (as the scenario gives it)."""
    return PROTOCOLS.get(rs.scenario.protocol.name)(rs.configs.protocol)


def _known_party_rows(rs: ResolvedScenario, N: int, plugin=None) -> PartyRows | None:
    """Each party's rows from the partition's params (exact, or an upper bound where the
    partition is random); ``None`` when the partitioner does not say. ``plugin``: the
    :func:`_partitioner`, when the caller built it already."""
    names = rs.scenario.data.party_names()
    ds = _dataset(rs)
    plugin = plugin if plugin is not None else _partitioner(rs)
    try:
        rows = plugin.party_rows(N, names, _class_rows(ds["name"], ds.get("params") or {}))
    except Exception:  # a bad partition (or none) is reported by the run, with its own message
        rows = None
    return None if rows is None or set(rows.rows) != set(names) else rows


def _dataset(rs: ResolvedScenario) -> dict[str, Any]:
    """The dataset's name and params (defaults filled in), as ``resolved.yaml`` gives them."""
    return {
        "name": rs.scenario.data.dataset.name,
        "params": rs.configs.dataset.model_dump(mode="json"),
    }


def _party_rows(rs: ResolvedScenario, N: int) -> PartyRows:
    """:func:`_known_party_rows`, or an equal split when the partitioner does not say."""
    rows = _known_party_rows(rs, N)
    return rows if rows is not None else equal_rows(N, rs.scenario.data.party_names())


def check_party_rows(sc: Scenario | ResolvedScenario) -> None:
    """A partition (:meth:`~testbed.data.partitions.PartitionerPlugin.check_rows`) or protocol
    parameter (:meth:`protocols._base.Protocol.check_rows`) the dataset's rows cannot satisfy,
    when the scenario tells the rows before loading: refused as the run would be."""
    rs = ResolvedScenario.of(sc)
    sc = rs.scenario
    ds = _dataset(rs)
    shape = _dataset_shape(ds["name"], ds["params"])
    if shape is None or sc.data.transform is not None:  # a transform may change the rows
        return
    plugin = _partitioner(rs)
    problem = plugin.check_rows(shape[0], sc.data.party_names()) if plugin else None
    if problem:
        loc = ["data", "partition", *problem[0]]
        given = getattr(getattr(sc.data, "partition", None), "params", None) or {}
        if problem[0][:1] == ("params",) and problem[0][-1] not in given:
            loc = ["data", "partition", "name"]  # a default: the partition's own line
        raise ScenarioError(f"{_where(sc, loc)}: {problem[1]}")
    rows = _known_party_rows(rs, shape[0], plugin)
    name = sc.protocol.name
    check = PROTOCOLS.get(name).check_rows
    if rows is None or check is None:
        return
    with plugin_phase("protocol", name, f"setup ({_where(sc, ['protocol', 'name'])})"):
        protocol = _protocol(rs)
    problem = check(protocol, rows)
    if problem:
        raise ScenarioError(f"{_where(sc, list(problem[0]))}: {problem[1]}")


def _largest_pair(rs: ResolvedScenario, rows: PartyRows) -> tuple[int, int]:
    """``(n_a, n_b)`` of the largest exact OT the run and its reference solve: the protocol's
    pairs (:meth:`protocols._base.Protocol.exact_ot_pairs`), by default any two parties."""
    try:
        pairs = _protocol(rs).exact_ot_pairs(rows)
    except Exception:  # a bad protocol config is reported by the run, with its own message
        pairs = None
    if not pairs:  # any two parties: the largest bound is that of the two largest
        big = sorted(rows.rows, key=rows.pooled, reverse=True)[:2]
        pairs = [(big[0], big[-1] if len(big) > 1 else big[0])] if big else []
    sizes = [rows.pair(a, b) for a, b in pairs]
    return max(sizes, key=lambda ab: ab[0] * ab[1], default=(0, 0))


def estimate_memory(sc: Scenario | ResolvedScenario) -> list[Estimate]:
    """The array families a run of ``sc`` builds, largest first (an order of magnitude)."""
    rs = ResolvedScenario.of(sc)
    ds = _dataset(rs)
    shape = _dataset_shape(ds["name"], ds["params"])
    if shape is None:
        return []
    N, d, n_loc, n_how = shape
    rows = _party_rows(rs, N)
    n_a, n_b = _largest_pair(rs, rows)
    n_party = rows.largest()  # the largest party's rows: one side of its support's OT
    out = [
        Estimate(
            n_loc,
            4.0 * N * d * _F8,
            f"{N} rows{' (' + n_how + ')' if n_how else ''} x dimension {d} x 8 B x 4 copies",
        ),
        # the largest exact OT of the run and its reference: cost matrix and plan
        Estimate(
            n_loc,
            3.0 * n_a * n_b * _F8,
            f"{n_a} x {n_b} pairwise cost matrix and plan x 8 B x 3",
        ),
    ]
    if ds["name"] == "gaussians":
        n_comp = len(ds["params"].get("components") or [])
        out.append(
            Estimate(
                ("data", "dataset", "params", "d"),
                (4.0 * n_comp + 4) * d * d * _F8,
                f"{d} x {d} covariance matrices x 8 B x {4 * n_comp + 4}",
            )
        )
    else:
        out.append(Estimate(n_loc, 4.0 * d * d * _F8, f"{d} x {d} covariance x 8 B x 4"))
    for key, val in _int_fields(rs.configs.protocol.model_dump(mode="json")):
        path = ("protocol", "params", *key)
        leaf = key[-1]
        if "support" in leaf or "coreset_size" in leaf:
            out.append(
                Estimate(
                    path,
                    3.0 * val * max(n_party, val) * _F8 + val * d * _F8,
                    f"{max(n_party, val)} x {val} cost matrix and plan x 8 B x 3",
                )
            )
        elif "projections" in leaf or leaf == "noise_inputs":
            out.append(
                Estimate(
                    path,
                    2.0 * val * max(N, d) * _F8,
                    f"{max(N, d)} x {val} projected values x 8 B x 2",
                )
            )
    return sorted(out, key=lambda e: -e.nbytes)


def _int_fields(params: Any, prefix: tuple = ()) -> Iterator[tuple[tuple, int]]:
    if isinstance(params, dict):
        for k, v in params.items():
            if isinstance(v, bool):
                continue
            if isinstance(v, int):
                yield (*prefix, k), v
            elif isinstance(v, dict):
                yield from _int_fields(v, (*prefix, k))


def check_memory(sc: Scenario | ResolvedScenario) -> None:
    """Stop with one line when the estimated arrays exceed the budget (``limits.memory_gb``, else
    the memory available now), unless ``limits.allow_large`` or ``--allow-large`` is set."""
    rs = ResolvedScenario.of(sc)
    sc = rs.scenario
    lim = _limits(sc)
    if lim.allow_large or _CLI.get("allow_large"):
        return
    est = estimate_memory(rs)
    if not est:
        return
    total = sum(e.nbytes for e in est)
    budget = lim.memory_gb * (1 << 30) if lim.memory_gb is not None else available_memory()
    if total <= budget:
        return
    top = est[0]
    source = "limits.memory_gb" if lim.memory_gb is not None else "available"
    raise ResourceLimitError(
        f"{_where(sc, list(top.loc))}: the run would need about {_fmt(total)} of memory "
        f"(largest: {top.formula} = {_fmt(top.nbytes)}) but {_fmt(budget)} is {source}; "
        "make it smaller, or set limits: {allow_large: true} (or run with --allow-large)"
    )


# ----------------------------------------------------------------------------- wall clock
def check_data_file(sc) -> None:
    """A csv/npy data file larger than ``limits.data_file_mb`` (default MAX_DATA_FILE_MB) is
    refused before it is read, unless ``limits.allow_large`` or ``--allow-large``."""
    lim = _limits(sc)
    path = (sc.data.dataset.params or {}).get("path")
    if sc.data.dataset.name not in ("csv", "npy") or not isinstance(path, str):
        return
    if lim.allow_large or _CLI.get("allow_large"):
        return
    p = Path(path)
    if not p.is_absolute():
        p = Path(getattr(sc, "_base_dir", ".")) / p
    try:
        size = p.stat().st_size
    except OSError:
        return  # the loader names a missing or unreadable file
    limit_mb = lim.data_file_mb or MAX_DATA_FILE_MB
    if size > limit_mb * (1 << 20):
        raise ResourceLimitError(
            f"{_where(sc, ['data', 'dataset', 'params', 'path'])}: {p} is {_fmt(size)}, above "
            f"the {limit_mb:g} MiB limit for a data file; raise it with limits: "
            "{data_file_mb: N} (or run with --allow-large)"
        )


def check_scenario(sc: Scenario | ResolvedScenario) -> None:
    """The one pre-run check (``testbed run`` and ``audit``): the memory estimate of the run, or
    of every cell of a sweep, before anything is allocated."""
    rs = ResolvedScenario.of(sc)
    sc = rs.scenario
    check_data_file(sc)
    if not sc.is_sweep:
        check_party_rows(rs)
        check_memory(rs)
        return
    seen: set[str] = set()
    for cell in expand_cells(sc):
        if cell.hash not in seen:
            seen.add(cell.hash)
            check_party_rows(cell.rs)
            check_memory(cell.rs)
