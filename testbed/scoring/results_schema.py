"""The results schema: every row kind the results files carry, typed
(:mod:`testbed.scoring.results_models`; the names of their numbers in
:mod:`testbed.scoring.names`), under one version (:data:`RESULTS_SCHEMA_VERSION`, written into
each results.json as ``schema_version``) and published as JSON Schema in
``docs/reference/results.schema.json``.

Rows are checked where they are made (an attack row by :func:`attack_row` as the scorer makes
it, a run's results by :func:`check_results` before results.json is written, audit rows before
audit.json is) and parsed once where they are read (:func:`read_results`,
:func:`read_sweep_rows`, :func:`read_attack_rows`, :func:`read_audit_rows`): a misspelt or
missing field is one line naming the file and the field. Regenerate the published file after
changing a model or a metric::

    python -m testbed.scoring.results_schema > docs/reference/results.schema.json
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from testbed.errors import TestbedError
from testbed.scoring.results_models import (
    AttackRow,
    AttackRowsFile,
    AuditRow,
    RunResults,
    SweepRow,
)

__all__ = [
    "RESULTS_SCHEMA_VERSION",
    "SCHEMA_VERSIONS",
    "AttackRow",
    "attack_row",
    "check_results",
    "parse_row",
    "read_attack_rows",
    "read_audit_rows",
    "read_results",
    "read_sweep_rows",
    "results_json_schema",
]

#: raised when a field changes meaning or type, or a required one is added; adding an optional
#: metric keeps it. 1: the attack rows only (and every results.json written before the
#: ``schema_version`` field, which reads as 1: the same layout without it); 2: every row kind.
RESULTS_SCHEMA_VERSION = 2
#: the versions this testbed reads
SCHEMA_VERSIONS = (1, 2)
#: the field of results.json that holds its version
VERSION_FIELD = "schema_version"

M = TypeVar("M", bound=BaseModel)


def _loc(err: dict) -> str:
    return ".".join(str(x) for x in err["loc"]) or "(top)"


def _first_error(exc: ValidationError) -> str:
    """The first wrong field; a field the schema does not name comes first, with the missing
    field it is likely a misspelling of (``privacy_epsilom``: did you mean ``privacy_epsilon``?)."""
    errors = exc.errors()
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    if not extra:
        return f"{_loc(errors[0])}: {errors[0]['msg']}"
    err = extra[0]
    missing = [
        str(e["loc"][-1])
        for e in errors
        if e["type"] == "missing" and tuple(e["loc"][:-1]) == tuple(err["loc"][:-1])
    ]
    near = difflib.get_close_matches(str(err["loc"][-1]), missing, 1)
    return f"{_loc(err)}: {err['msg']}" + (f" (did you mean {near[0]!r}?)" if near else "")


def attack_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row``, once :class:`AttackRow` accepts it (unchanged: results.json keeps the values as
    the scorer computed them); a key outside the schema or a value of the wrong type is the
    testbed's error, said in one line."""
    try:
        AttackRow.model_validate(row)
    except ValidationError as exc:
        raise TestbedError(
            f"attack row of {row.get('label') or row.get('attack')!r}: {_first_error(exc)} "
            f"(results schema {RESULTS_SCHEMA_VERSION}: testbed/scoring/names.py)"
        ) from None
    return row


def parse_row(model: type[M], data: Any, where: str) -> M:
    """``data`` as ``model``; anything else is one line naming ``where`` (a file, a line of
    it) and the first field that is wrong."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise TestbedError(
            f"{where}: {_first_error(exc)} (results schema {RESULTS_SCHEMA_VERSION}: "
            "docs/reference/results.schema.json)"
        ) from None


def check_results(results: dict[str, Any], where: str = "results.json") -> dict[str, Any]:
    """``results`` (a run's results row, as written), once :class:`RunResults` accepts it."""
    parse_row(RunResults, _versioned(results, where), where)
    return results


def _versioned(data: Any, where: str) -> Any:
    """``data`` after its version is checked: absent reads as 1 (files written before the
    field); a version this testbed does not read stops with one line naming it."""
    if not isinstance(data, dict):
        raise TestbedError(f"{where}: not a results object")
    version = data.get(VERSION_FIELD, 1)
    if version not in SCHEMA_VERSIONS:
        raise TestbedError(
            f"{where}: results schema {version!r}; this testbed reads versions "
            f"{SCHEMA_VERSIONS[0]} to {SCHEMA_VERSIONS[-1]} (a newer testbed wrote it?)"
        )
    return data


def _load(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TestbedError(f"{path}: not a readable results file ({type(exc).__name__})") from None


def read_results(path: Path) -> RunResults:
    """A run's ``results.json``, parsed once."""
    return parse_row(RunResults, _versioned(_load(path), str(path)), str(path))


def read_sweep_rows(path: Path) -> list[SweepRow]:
    """A sweep's ``results.jsonl``, one :class:`SweepRow` per line (a wrong line names its
    number)."""
    rows = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line:
            continue
        where = f"{path}:{i}"
        try:
            data = json.loads(line)
        except ValueError:
            raise TestbedError(f"{where}: not a JSON line") from None
        if isinstance(data, dict):
            _versioned(data.get("results"), f"{where}: results")
        rows.append(parse_row(SweepRow, data, where))
    return rows


def read_attack_rows(path: Path) -> AttackRowsFile:
    """``attacks-<tag>.json`` of a ``testbed attack`` re-run."""
    return parse_row(AttackRowsFile, _load(path), str(path))


def read_audit_rows(path: Path) -> list[AuditRow]:
    """``audit.json``'s rows (``testbed audit --out``)."""
    data = _load(path)
    if not isinstance(data, list):
        raise TestbedError(f"{path}: not a list of audit rows")
    return [parse_row(AuditRow, r, f"{path}: row {i}") for i, r in enumerate(data)]


def results_json_schema() -> dict[str, Any]:
    """The published schema (JSON Schema 2020-12): results.json, with the other files' rows
    (a sweep's results.jsonl lines, attacks-*.json, audit.json) under ``$defs``."""
    defs: dict[str, Any] = {}
    for model in (RunResults, SweepRow, AttackRowsFile, AuditRow):
        schema = model.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        defs[model.__name__] = schema
    top = dict(defs["RunResults"])
    top.pop("title", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://ot-testbed.invalid/results/{RESULTS_SCHEMA_VERSION}",
        "title": "OT privacy testbed results (results.json)",
        "description": (
            "A run's results.json; $defs also holds the rows of a sweep's results.jsonl "
            "(SweepRow), of testbed attack's attacks-*.json (AttackRowsFile) and of "
            "audit.json (AuditRow). Generated from testbed/scoring/results_models.py and "
            "testbed/scoring/names.py by `python -m testbed.scoring.results_schema`; do not "
            "edit by hand."
        ),
        "version": RESULTS_SCHEMA_VERSION,
        **top,
        "$defs": defs,
    }


def dumps() -> str:
    """The published file's text."""
    return json.dumps(results_json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(dumps())
