"""A results.json a test writes by hand (a real run of the size it needs would take minutes):
the smallest mapping the results schema accepts, with the fields a test sets on top."""

from __future__ import annotations

from typing import Any

from testbed.scoring.results_models import RunResults

__all__ = ["run_results"]


def run_results(**fields: Any) -> dict[str, Any]:
    """A valid single run's results (schema checked here), ``fields`` replacing the defaults."""
    parties = fields.get("parties", {"alice": {"dim": 2, "rows": 10}})
    view = {"by_kind": {}, "bytes": 0, "messages": 0}
    out: dict[str, Any] = {
        "scenario": "hand_written",
        "seed": 0,
        "config_hash": "0" * 64,
        "protocol": {"name": "fedwad", "mode": "paper", "params": {}},
        "defenses": [],
        "parties": parties,
        "estimates": {},
        "reference": {},
        "accuracy": {},
        "history": {},
        "outputs": {},
        "diagnostics": {},
        "detection": {},
        "transcript": {**view, "digest": None, "guard": "off", "rounds": 0},
        "observer_view": {**view, "colluders": [], "observer": "server"},
        "privacy": {},
        "privacy_epsilon": "inf",  # as results.json writes it
        "utility": {},
        "privacy_assumptions": [],
        "guard": {},
        "attacks": [],
    }
    out.update(fields)
    RunResults.model_validate(out)
    return out
