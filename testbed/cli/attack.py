"""``testbed attack RUN``: re-run attacks on a saved run's transcript (the protocol is not
re-run); rows go to ``attacks-<tag>.json`` beside the results, which ``testbed report``
merges in."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.cli._common import print_attack_rows
from testbed.errors import TestbedError
from testbed.exchange.bus import atomic_write_bytes
from testbed.run.rerun import rerun_attacks
from testbed.run.results import jsonable
from testbed.scenario.resolve import config_hash


def _attack_specs(specs):
    if not specs:
        return None
    attacks = []
    for spec in specs:
        name, _, params = spec.partition(":")
        try:
            p = json.loads(params) if params else {}
        except json.JSONDecodeError as exc:
            raise TestbedError(
                f"--attack {spec!r}: params after ':' must be JSON ({exc.msg})"
            ) from None
        if not isinstance(p, dict):
            raise TestbedError(f"--attack {spec!r}: params after ':' must be a JSON object")
        attacks.append({"name": name, "params": p})
    return attacks


def run(args) -> int:
    attacks = _attack_specs(args.attack)
    colluders = args.colluders.split(",") if args.colluders else None
    run_dir = Path(args.run_dir)
    if (run_dir / "results.jsonl").is_file():  # a sweep: every finished cell
        cells = sorted(d for d in (run_dir / "cells").glob("*") if (d / "results.json").is_file())
        if not cells:
            raise TestbedError(f"{run_dir}: a sweep directory without finished cells")
    else:
        cells = [run_dir]
    total = 0
    for cell in cells:
        rows, sc, out = attack_run_dir(cell, attacks, args.observer, colluders)
        total += len(rows)
        print(f"{sc.name}: {len(rows)} attack row(s) on the saved transcript (protocol not re-run)")
        print_attack_rows(rows)
        print(f"rows: {out}")
    if len(cells) > 1:
        print(f"{len(cells)} cells, {total} rows; `testbed report {run_dir}` shows them")
    return 0


def attack_run_dir(run_dir, attacks, observer, colluders):
    """Re-run attacks on one saved run (or sweep cell); write ``attacks-<tag>.json`` beside its
    results, which ``testbed report`` merges in (labels suffixed ``@observer``)."""
    rows, sc = rerun_attacks(run_dir, attacks, observer, colluders)
    spec = {
        "attacks": [a.model_dump(mode="json") for a in sc.attacks],
        "threat_model": sc.threat_model.model_dump(mode="json"),
    }
    tag = config_hash(spec)[:8]
    out = Path(run_dir) / f"attacks-{tag}.json"
    for r in rows:
        r["label"] = f"{r.get('label') or r['attack']}@{sc.threat_model.observer}"
        r["source"] = out.name
    payload = {**spec, "rows": rows}
    atomic_write_bytes(
        out, (json.dumps(jsonable(payload), indent=2, sort_keys=True) + "\n").encode()
    )
    return rows, sc, out
