"""A scenario resolved: every default and every plugin's params filled in, as JSON; its
SHA-256 (``config_hash``) names the run directory and keys the sweep's cache.

How and where a run was done (``UNHASHED``: whether the transcript is saved, the resource
limits, the engine) is kept in the resolved scenario, so that re-running ``resolved.yaml``
(``testbed verify --rerun``, ``testbed attack``) runs under the same settings, but it is left out
of the hash: it does not change the results, and runs that differ only there share a hash.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from testbed.scenario.limits import effective_limits
from testbed.scenario.params import validate_plugins
from testbed.scenario.schema import Scenario

__all__ = ["UNHASHED", "config_hash", "resolve"]

UNHASHED = ("output", "limits", "engine", "engine_params")


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
        for key in ("label", "input"):  # unset: older configs' hashes unchanged
            if a.get(key) is None:
                a.pop(key, None)
        if a.get("if_not_applicable", "error") == "error":  # the default: hashes unchanged
            a.pop("if_not_applicable", None)  # (a skip stays: a re-run must skip it too)
    if out.get("membership") is None:
        out.pop("membership", None)
    if not out["data"].get("public"):  # unset: older configs' hashes unchanged
        out["data"].pop("public", None)
    # not hashed (config_hash): whether the transcript is saved (not where: a path of this
    # machine), the limits the run was checked against (the command line's overrides included),
    # where parties computed; each only when it differs from the default
    out["output"] = {"save_transcript": sc.output.save_transcript}
    limits = effective_limits(sc)
    if limits:
        out["limits"] = limits
    else:
        out.pop("limits", None)
    if out.get("engine") == "inprocess" and not out.get("engine_params"):
        out.pop("engine", None)
        out.pop("engine_params", None)
    for k in ("sweep", "seeds"):  # a single run's hash does not depend on these when unset
        if out.get(k) is None:
            out.pop(k, None)
    return out


def config_hash(resolved: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a resolved scenario, without its ``UNHASHED`` keys."""
    hashed = {k: v for k, v in resolved.items() if k not in UNHASHED}
    blob = json.dumps(hashed, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
