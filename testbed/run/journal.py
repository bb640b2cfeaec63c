"""What ``testbed attack`` is about to change, written down before it changes it.

``testbed attack`` adds an ``attacks-<tag>.json`` file to a run (or to each cell of a sweep) and
then writes the manifests again: the cell's, then the sweep's, which lists the cell's files.
Killed in between (``kill -9``, the machine going down), it used to leave a directory whose
manifest no longer matched its files, and ``verify``, ``report`` and ``attack`` refused it with a
tamper message ("changed since the run wrote it") although nobody had touched it.

Before it writes anything into a cell, ``testbed attack`` now records in the journal
(``.testbed-attack.json`` in the run or sweep directory it holds locked: not evidence, never
listed in the manifest) which file it is about to write there; the journal is removed once the
last manifest is written. ``testbed verify`` reads it (:func:`testbed.run.verify.verify_run`):
when the directory does not verify but every mismatch is one the journal announced (those files,
and the manifests that were to list them), it says that an interrupted ``testbed attack`` left
the cell unfinished; any other mismatch is still reported as a change. Running ``testbed
attack`` again completes the interrupted one first (:func:`testbed.run.rerun.attack_saved_run`):
each announced file's rows are computed again and compared, then the manifests are written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from testbed.errors import TestbedError
from testbed.exchange.transcript import atomic_write_bytes
from testbed.run.rundir import ATTACKS_FILE, JOURNAL_NAME, cell_labels

__all__ = ["JOURNAL_NAME", "Journal", "interrupted_line", "read_journal"]

JOURNAL_FORMAT = "testbed-attack-journal/1"


class Journal:
    """The journal of one ``testbed attack`` on ``top`` (a run, or a sweep with its cells)."""

    def __init__(self, top: str | Path):
        self.top = Path(top)
        self.cells: dict[str, str] = {}

    def intend(self, cell: str | Path, file_name: str) -> None:
        """Record, before it is written, that ``file_name`` is about to be written in ``cell``
        (``top`` itself or one of its cells) and the manifests written again."""
        rel = Path(os.path.relpath(Path(cell).resolve(), self.top.resolve())).as_posix()
        self.cells[rel] = file_name
        doc = {"format": JOURNAL_FORMAT, "command": "testbed attack", "cells": self.cells}
        atomic_write_bytes(self.top / JOURNAL_NAME, (json.dumps(doc, indent=2) + "\n").encode())

    def close(self) -> None:
        """Every manifest is written: nothing is left unfinished."""
        (self.top / JOURNAL_NAME).unlink(missing_ok=True)


def read_journal(top: str | Path) -> dict[str, str] | None:
    """The files an interrupted ``testbed attack`` was writing in ``top``: relative cell
    directory (``.`` for a single run) -> attacks file name; None when there is no journal. A
    journal that is not one (hand-made, truncated) is refused with its name."""
    path = Path(top) / JOURNAL_NAME
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        cells = doc["cells"]
        ok = doc.get("format") == JOURNAL_FORMAT and isinstance(cells, dict)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        ok = False
    if not ok or not all(_safe(k, v) for k, v in cells.items()):
        raise TestbedError(f"{path}: not a journal of testbed attack (added later by someone)")
    return dict(cells)


def _safe(rel, name) -> bool:
    if not isinstance(rel, str) or not isinstance(name, str) or not ATTACKS_FILE.fullmatch(name):
        return False
    parts = Path(rel).parts
    return rel == "." or (len(parts) == 2 and parts[0] == "cells" and ".." not in parts)


def interrupted_line(top: str | Path, pending: dict[str, str]) -> str:
    """The one line ``verify`` prints for a directory an interrupted ``testbed attack`` left."""
    top = Path(top)
    last = list(pending)[-1]
    if last == ".":
        what = f"{pending[last]} unfinished (not yet in the manifest)"
    else:
        name = Path(last).name
        label = cell_labels(top).get(name)
        what = f"cell {name}" + (f" ({label[1]})" if label else "") + " unfinished"
        if len(pending) > 1:
            what += f" and the sweep's manifest without the rows of {len(pending) - 1} more"
    return (
        f"{top}: an interrupted `testbed attack` left {what}; run it again "
        f"(`testbed attack {top}` completes it first)"
    )
