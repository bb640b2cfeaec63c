"""A scenario resolved: every default and every plugin's params filled in, as JSON; its
SHA-256 (``config_hash``) names the run directory and keys the sweep's cache."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from testbed.scenario.params import validate_plugins
from testbed.scenario.schema import Scenario

__all__ = ["config_hash", "resolve"]


def resolve(sc: Scenario) -> dict[str, Any]:
    """The scenario with every default and every plugin's params filled in (JSON-able)."""
    base_dir = getattr(sc, "_base_dir", ".")
    resolved_params = validate_plugins(sc, None, sc.name, base_dir)
    out = sc.model_dump(mode="json")
    out["data"]["dataset"]["params"] = resolved_params["dataset"]
    out["data"]["partition"]["params"] = resolved_params["partition"]
    out["data"]["parties"] = sc.data.party_names()
    if "transform" in resolved_params:
        out["data"]["transform"]["params"] = resolved_params["transform"]
    out["protocol"]["params"] = resolved_params["protocol"]
    for d, p in zip(out["defenses"], resolved_params["defenses"]):
        d["params"] = p
    for a, p in zip(out["attacks"], resolved_params["attacks"]):
        a["params"] = p
        if a.get("label") is None:  # unset labels leave older configs' hashes unchanged
            a.pop("label", None)
        if a.get("if_not_applicable", "error") == "error":  # the default: hashes unchanged
            a.pop("if_not_applicable", None)  # (a skip stays: a re-run must skip it too)
    if out.get("membership") is None:
        out.pop("membership", None)
    if not out["data"].get("public"):  # unset: older configs' hashes unchanged
        out["data"].pop("public", None)
    out.pop("output", None)  # where results go does not change what they are
    out.pop("limits", None)  # nor do the resource limits a run is checked against
    for k in ("engine", "engine_params"):  # nor does where parties compute (same results)
        out.pop(k, None)
    for k in ("sweep", "seeds"):  # a single run's hash does not depend on these when unset
        if out.get(k) is None:
            out.pop(k, None)
    return out


def config_hash(resolved: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a resolved scenario."""
    blob = json.dumps(resolved, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
