"""Stage 8: the results row of a run and its run directory.

``results.json`` holds only seed-determined values, so the same seed gives byte-identical files;
wall-clock times and versions go to ``run_info.json``.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import math
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from testbed.exchange.bus import atomic_write_bytes
from testbed.exchange.payload import canonical_digest
from testbed.run.evaluate import Evaluation
from testbed.run.exchange import Exchange
from testbed.run.roster import World
from testbed.run.score import DELTA
from testbed.scoring.names import Metric
from testbed.scoring.results_schema import RESULTS_SCHEMA_VERSION, VERSION_FIELD

__all__ = [
    "RESULTS_DIGESTS",
    "evidence_digest",
    "json_form",
    "jsonable",
    "results_digests",
    "seal_results",
    "package_versions",
    "results_row",
    "transcript_summary",
    "write_json",
]


def jsonable(x: Any) -> Any:
    """Convert to JSON-safe values: arrays to lists, NaN to null, +-inf to the strings 'inf'/'-inf'."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer, int)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        f = float(x)
        if math.isnan(f):
            return None
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    return x


def json_form(x: Any) -> Any:
    """``x`` as it reads back from the JSON file :func:`write_json` writes."""
    return json.loads(json.dumps(jsonable(x), sort_keys=True))


#: the format of the ``digests`` section of results.json
RESULTS_DIGESTS = "testbed-results/1"


def results_digests(results: Mapping[str, Any]) -> dict[str, Any]:
    """Digests of a results row as it reads back from results.json (``digests`` itself left
    out): the whole row, its estimates and each attack row (so a mismatch names the row)."""
    body = json_form({k: v for k, v in results.items() if k != "digests"})
    return {
        "format": RESULTS_DIGESTS,
        "results": canonical_digest(body),
        "estimates": canonical_digest(body.get("estimates")),
        "attacks": [canonical_digest(r) for r in body.get("attacks") or []],
    }


def evidence_digest(arrays: Mapping[str, np.ndarray]) -> str | None:
    """Digest of the arrays written to leakage.npz (None when there are none)."""
    return canonical_digest(dict(arrays)) if arrays else None


def seal_results(
    results: dict[str, Any], transcript=None, evidence: Mapping[str, np.ndarray] | None = None
) -> dict[str, Any]:
    """Add the ``digests`` section to ``results`` (in place; returned): :func:`results_digests`,
    the transcript's digest, the digest of its spilled part (the spill files a run that did not
    save its transcript leaves) and of leakage.npz's arrays. ``testbed verify`` re-checks them."""
    digests = results_digests(results)
    digests["transcript"] = transcript.digest() if transcript is not None else None
    digests["spill"] = transcript.spill_digest() if transcript is not None else None
    digests["leakage"] = evidence_digest(evidence or {})
    results["digests"] = digests
    return results


def write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(jsonable(obj), indent=2, sort_keys=True) + "\n").encode())


def transcript_summary(envelopes) -> dict[str, dict[str, int]]:
    """Messages and bytes per message kind."""
    out: dict[str, dict[str, int]] = {}
    for e in envelopes:
        k = out.setdefault(e.kind, {"messages": 0, "bytes": 0})
        k["messages"] += 1
        k["bytes"] += e.nbytes
    return dict(sorted(out.items()))


def package_versions() -> dict:
    """Python and package versions (for run_info.json and the report)."""
    versions = {}
    for pkg in (
        "ot-testbed",
        "numpy",
        "POT",
        "torch",
        "scikit-learn",
        "opacus",
        "gensim",
        "pydantic",
        "matplotlib",
    ):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {"python": platform.python_version(), "versions": versions}


def results_row(world: World, exchange: Exchange, ev: Evaluation) -> dict[str, Any]:
    """``results.json`` of one run, without its attack rows."""
    sc = world.scenario
    result, tr, ledger = exchange.result, exchange.transcript, exchange.ledger
    tm = sc.threat_model
    seen = tr.view(tm.observer, tm.colluders).envelopes
    senders = sorted({e.sender for e in tr} & set(world.parties))
    return {
        VERSION_FIELD: RESULTS_SCHEMA_VERSION,
        "scenario": sc.name,
        "seed": sc.seed,
        "config_hash": world.config_hash,
        "protocol": {
            "name": sc.protocol.name,
            "mode": result.mode,
            "deviations": list(result.deviations),
            "roles": world.protocol.roles(world.parties),
            "params": world.protocol.config.model_dump(mode="json"),
        },
        "defenses": [
            {"name": d.name, "params": d.config.model_dump(mode="json")} for d in world.defenses
        ],
        "parties": {p: {"rows": d.n, "dim": d.X.shape[1]} for p, d in world.parties.items()},
        "estimates": dict(result.estimates),
        "reference": ev.reference,
        "accuracy": ev.accuracy,
        **({"accuracy_headline": ev.headline} if ev.headline else {}),
        "history": {k: list(v) for k, v in result.history.items()},
        "outputs": dict(result.outputs),
        "diagnostics": dict(result.diagnostics),
        "detection": ev.detection,
        "transcript": {
            "messages": len(tr),
            "bytes": tr.nbytes,
            "rounds": max((e.round for e in tr), default=0),
            "digest": tr.digest(),
            "guard": exchange.guard.get("mode", "off"),
            "by_kind": transcript_summary(tr),
        },
        "observer_view": {
            "observer": tm.observer,
            "colluders": list(tm.colluders),
            "messages": len(seen),
            "bytes": sum(e.nbytes for e in seen),
            "by_kind": transcript_summary(seen),
        },
        "privacy": ledger.summary(DELTA),
        # one epsilon axis: the worst claim over the parties that sent anything (inf = no claim)
        Metric.PRIVACY_EPSILON: max((ledger.epsilon(p, DELTA) for p in senders), default=0.0),
        "utility": ev.utility,
        "privacy_assumptions": ev.assumptions,
        **({"evaluation": ev.evaluation} if ev.evaluation else {}),
        "guard": exchange.guard,
    }
