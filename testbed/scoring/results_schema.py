"""The results schema: the typed attack row the scorer emits, made from :data:`METRIC_KEYS`
(each metric's name, meaning and direction are written there and nowhere else), versioned and
published as JSON Schema in ``docs/reference/results.schema.json``.

Every attack row (a scored output or a failure) is checked against :class:`AttackRow` when it
is made (:func:`attack_row`): a key the schema does not name stops the run there, instead of
reaching results.json, results.csv and the report under a name nothing reads. Regenerate the
published file after changing a metric::

    python -m testbed.scoring.results_schema > docs/reference/results.schema.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, create_model

from testbed.errors import TestbedError
from testbed.scoring.metrics import METRIC_KEYS

__all__ = ["RESULTS_SCHEMA_VERSION", "AttackRow", "attack_row", "results_json_schema"]

#: raised when a row's fields change meaning or type; adding an optional metric keeps it
RESULTS_SCHEMA_VERSION = 1

#: the keys whose values are text (names, labels, reasons); every other key holds a number
TEXT_KEYS = frozenset(
    {
        "attack",
        "label",
        "target",
        "observer",
        "isolation",
        "failed",
        "reason",
        "kind",
        "method",
        "score",
        "source",
        "population_method",
        "eps_method",
    }
)
#: the keys every row has (a failure row's target may be None: every target)
REQUIRED = ("attack", "label", "target", "observer", "isolation")


def _field(key: str, meaning: str, higher: bool | None):
    typ: Any = str | None if key in TEXT_KEYS else float | None
    if key in ("attack", "label", "observer", "isolation"):
        typ = str
    extra = None if higher is None else {"leakage": "higher" if higher else "lower"}
    if key in REQUIRED:
        return (typ, Field(..., description=meaning, json_schema_extra=extra))
    return (typ, Field(None, description=meaning, json_schema_extra=extra))


#: one attack row of results.json (``attacks``): identity, then the metrics of its output's
#: kind; a metric a kind does not have is absent from the row. ``leakage`` in a field's schema:
#: whether a higher or a lower value means more leakage (absent: context, not a leakage measure).
AttackRow = create_model(
    "AttackRow",
    __config__=ConfigDict(extra="forbid", frozen=True),
    **{k: _field(k, meaning, higher) for k, (meaning, higher) in METRIC_KEYS.items()},
)


def attack_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row``, once :class:`AttackRow` accepts it (unchanged: results.json keeps the values as
    the scorer computed them); a key outside the schema or a value of the wrong type is the
    testbed's error, said in one line."""
    try:
        AttackRow.model_validate(row)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise TestbedError(
            f"attack row of {row.get('label') or row.get('attack')!r}: {where}: {err['msg']} "
            f"(results schema {RESULTS_SCHEMA_VERSION}: testbed/scoring/metrics.py METRIC_KEYS)"
        ) from None
    return row


def results_json_schema() -> dict[str, Any]:
    """The published schema (JSON Schema 2020-12) of results.json's attack rows."""
    row = AttackRow.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://ot-testbed.invalid/results/{RESULTS_SCHEMA_VERSION}",
        "title": "OT privacy testbed results (results.json)",
        "description": (
            "The attack rows of results.json (`attacks`), one per attack and target. "
            "Generated from testbed/scoring/metrics.py (METRIC_KEYS) by "
            "`python -m testbed.scoring.results_schema`; do not edit by hand."
        ),
        "version": RESULTS_SCHEMA_VERSION,
        "type": "object",
        "properties": {"attacks": {"type": "array", "items": {"$ref": "#/$defs/AttackRow"}}},
        "$defs": {"AttackRow": row},
    }


def dumps() -> str:
    """The published file's text."""
    return json.dumps(results_json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(dumps())
