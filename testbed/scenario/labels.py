"""Attack configuration labels: one per entry of a scenario's ``attacks``, keying its columns in
results.csv and the report (a scenario concept, so ``testbed validate`` checks them without loading
the runner)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from testbed.errors import TestbedError

__all__ = ["attack_labels", "params_digest"]


def params_digest(params: dict[str, Any] | None) -> str:
    """Six hex digits of an attack's params: what tells two configurations' labels apart."""
    blob = json.dumps(params or {}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:6]


def attack_labels(specs: list[dict[str, Any]]) -> list[str]:
    """One label per attack configuration (``{name, params, label?}``), keying its columns in
    results.csv and the report: the explicit ``label``, else the name, plus a short digest of
    the params when another entry of the same attack has different params. Duplicate labels are
    refused."""

    def digest(p):
        return params_digest(p.get("params"))

    variants: dict[str, set[str]] = {}
    for p in specs:
        variants.setdefault(p["name"], set()).add(digest(p))
    labels = []
    for p in specs:
        lab = p.get("label") or (
            p["name"] if len(variants[p["name"]]) == 1 else f"{p['name']}-{digest(p)}"
        )
        labels.append(lab)
    seen: dict[tuple, int] = {}
    for i, (lab, p) in enumerate(zip(labels, specs)):
        key = (lab, p.get("target"))  # one configuration aimed at two targets: rows differ
        if key in seen:
            raise TestbedError(
                f"attacks[{i}]: label {lab!r} already used by attacks[{seen[key]}]; give one "
                "of them an explicit `label:`"
            )
        seen[key] = i
    return labels
