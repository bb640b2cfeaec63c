"""The scenario's ``limits:`` block, its command-line overrides and the sweep cell-count check.

Kept apart from :mod:`testbed.scenario.resources` (the memory estimates, which resolve scenarios) so that
the scenario schema (:mod:`testbed.scenario.schema`) can use it without an import circle.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from testbed.errors import ScenarioError
from testbed.scenario.yamlloc import where

__all__ = [
    "ATTACK_MEMORY_GB",
    "ATTACK_OUTPUT_MB",
    "ATTACK_SECONDS",
    "MAX_CELLS",
    "MAX_DATA_FILE_MB",
    "CellTimeoutError",
    "LimitsSpec",
    "ResourceLimitError",
    "cell_budget",
    "check_cell_count",
    "effective_limits",
    "set_cli_overrides",
]

_F8 = 8  # bytes per float64

MAX_CELLS = 10_000  # sweep cells accepted without limits.max_cells / --max-cells
MAX_DATA_FILE_MB = 64  # csv/npy data files read without limits.data_file_mb / --allow-large
ATTACK_SECONDS = 1800.0  # wall clock of one attack (run + baseline) without limits.attack_seconds
ATTACK_MEMORY_GB = 8.0  # address space an attack process may add without limits.attack_memory_gb
ATTACK_OUTPUT_MB = 64.0  # encoded outputs of one attack without limits.attack_output_mb


def _bounded(le: float, description: str) -> Any:
    """An optional positive finite limit (None: the default applies)."""
    return Field(None, gt=0, le=le, allow_inf_nan=False, strict=True, description=description)


class LimitsSpec(BaseModel):
    """The scenario's ``limits:`` block (none of it changes results, so none of it is hashed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    memory_gb: float | None = Field(
        None,
        gt=0,
        le=1_000_000,
        allow_inf_nan=False,
        strict=True,
        description="memory budget of the estimate in GiB (default: memory available now)",
    )
    allow_large: bool = Field(
        False, strict=True, description="run even when the memory estimate exceeds the budget"
    )
    cell_seconds: float | None = Field(
        None,
        gt=0,
        le=10_000_000,
        allow_inf_nan=False,
        strict=True,
        description="wall-clock budget of one run (each sweep cell); finished cells are kept",
    )
    data_file_mb: float | None = Field(
        None,
        gt=0,
        le=10_000_000,
        allow_inf_nan=False,
        strict=True,
        description=f"largest csv/npy data file read (default {MAX_DATA_FILE_MB} MiB)",
    )
    max_cells: int | None = Field(
        None,
        ge=1,
        le=100_000_000,
        strict=True,
        description=f"largest sweep accepted (default {MAX_CELLS})",
    )
    attack_seconds: float | None = _bounded(
        10_000_000,
        "wall clock of one attack (run and baseline); past it the attack's "
        f"processes are killed and it gets a failure row (default {ATTACK_SECONDS:g} s)",
    )
    attack_memory_gb: float | None = _bounded(
        1_000_000,
        "address space an attack's process may add to what it maps at start "
        f"(default {ATTACK_MEMORY_GB:g} GiB)",
    )
    attack_output_mb: float | None = _bounded(
        1_000_000, f"largest encoded outputs of one attack (default {ATTACK_OUTPUT_MB:g} MiB)"
    )
    attack_sandbox: bool = Field(
        True,
        strict=True,
        description="confine each attack process in the kernel sandbox (Landlock, namespaces, "
        "no capabilities); false keeps the separate process only (docs/reference/trust.md)",
    )


class ResourceLimitError(ScenarioError):
    """The run would need more memory than the budget, or the sweep has too many cells."""


class CellTimeoutError(BaseException):
    """A run went past ``limits.cell_seconds`` (a runtime stop: exit code 1, one line). A
    BaseException, like KeyboardInterrupt, so no plugin's ``except Exception`` swallows it."""


# overrides from the command line (``--allow-large``, ``--max-cells``); sweep workers get the
# scenario's own limits only, which is enough: the checks run before any cell starts
_CLI: dict[str, Any] = {}


def set_cli_overrides(**kw: Any) -> None:
    """Record command-line overrides (``allow_large=True``, ``max_cells=N``) for this process."""
    _CLI.clear()
    _CLI.update({k: v for k, v in kw.items() if v is not None})


def effective_limits(sc) -> dict[str, Any]:
    """The limits a run is checked against, as JSON: the scenario's ``limits:`` with the command
    line's overrides, only the settings that differ from the defaults (``{}``: all defaults)."""
    merged = _limits(sc).model_copy(update={k: v for k, v in _CLI.items() if v})
    return merged.model_dump(mode="json", exclude_defaults=True)


def _limits(sc) -> LimitsSpec:
    return getattr(sc, "limits", None) or LimitsSpec()


def _where(sc, loc: list) -> str:
    return where(getattr(sc, "_fname", None) or "<scenario>", getattr(sc, "_yaml_root", None), loc)


# ----------------------------------------------------------------------------- cells
def check_cell_count(sc, n_cells: int) -> None:
    """Refuse a sweep of more than ``limits.max_cells`` (default MAX_CELLS) cells before any
    cell is expanded; ``--max-cells`` overrides it."""
    limit = _CLI.get("max_cells") or _limits(sc).max_cells or MAX_CELLS
    if n_cells > limit:
        raise ResourceLimitError(
            f"{_where(sc, ['sweep'] if sc.sweep is not None else ['seeds'])}: "
            f"the sweep has {n_cells} cells, above the limit {limit}; "
            "shrink it, or raise the limit with limits: {max_cells: N} or --max-cells N"
        )


@contextlib.contextmanager
def cell_budget(sc) -> Iterator[None]:
    """Raise :class:`CellTimeoutError` in this run when it passes ``limits.cell_seconds``.
    A timer signal (SIGALRM) of the main thread; elsewhere (a worker thread) no budget applies.
    POT is loaded first, outside any budget."""
    # POT (and the torch it imports) before any clock starts: the plugins import it at their
    # first solve, which would otherwise count towards the first run's budget and its reported
    # time. Not at the command's start: bad input is refused without waiting for it (seconds)
    import ot  # noqa: F401  # ot: here, not at the command start

    seconds = _limits(sc).cell_seconds
    if (
        seconds is None
        or threading.current_thread() is not threading.main_thread()
        or not hasattr(signal, "setitimer")
    ):
        yield
        return

    def expired(signum, frame):
        raise CellTimeoutError(
            f"scenario {sc.name!r} (seed {sc.seed}) ran past limits.cell_seconds = {seconds:g} s "
            "and was stopped; finished runs and sweep cells are kept (rerun to resume)"
        )

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
