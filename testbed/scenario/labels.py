"""Attack configuration labels: one per entry of a scenario's ``attacks``, keying its columns in
results.csv and the report (a scenario concept, so ``testbed validate`` checks them without loading
the runner)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from testbed.errors import TestbedError

__all__ = ["attack_labels", "attack_order", "params_digest"]


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


def attack_order(
    labels: list[str], inputs: list[str | None], where: Callable[[int], str] = lambda i: ""
) -> list[int]:
    """The order to run a scenario's attacks in: an entry whose ``input:`` names a label runs
    after every entry with that label (it receives their outputs); otherwise scenario order.
    An unknown label or a cycle (an entry naming itself among them) is refused in one line
    that starts with ``where(i)`` (the entry's ``file:line``)."""
    by_label: dict[str, list[int]] = {}
    for i, lab in enumerate(labels):
        by_label.setdefault(lab, []).append(i)
    for i, inp in enumerate(inputs):
        if inp is not None and inp not in by_label:
            raise TestbedError(
                f"{_at(where, i)}attacks[{i}].input {inp!r} names no attack of this scenario "
                f"(labels: {', '.join(sorted(by_label))})"
            )
    order: list[int] = []
    state: dict[int, str] = {}  # "open" while its inputs are being placed, then "done"

    def place(i: int, path: list[int]) -> None:
        if state.get(i) == "done":
            return
        if state.get(i) == "open":
            loop = [labels[j] for j in path[path.index(i) :]] + [labels[i]]
            first = path[path.index(i)]
            raise TestbedError(
                f"{_at(where, first)}attacks[{first}].input makes a cycle: "
                f"{' -> '.join(loop)} (each label names the attack it runs on)"
            )
        state[i] = "open"
        if inputs[i] is not None:
            for j in by_label[inputs[i]]:
                place(j, [*path, i])
        state[i] = "done"
        order.append(i)

    for i in range(len(labels)):
        place(i, [])
    return order


def _at(where: Callable[[int], str], i: int) -> str:
    w = where(i)
    return f"{w}: " if w else ""
