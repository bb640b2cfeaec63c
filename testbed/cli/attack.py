"""``testbed attack RUN``: re-run attacks on a saved run's transcript (the protocol is not
re-run); rows go to ``attacks-<tag>.json`` beside the results, which ``testbed report``
merges in."""

from __future__ import annotations

import json

from testbed.cli._common import failed_attacks, find_run_dir, print_attack_rows
from testbed.errors import TestbedError
from testbed.run.rerun import attack_run_or_sweep, why_no_rows
from testbed.run.rundir import cell_labels
from testbed.scenario.labels import params_digest


def _attack_specs(specs):
    if not specs:
        return None
    attacks = []
    for spec_text in specs:
        name, _, params = spec_text.partition(":")
        try:
            p = json.loads(params) if params else {}
        except json.JSONDecodeError as exc:
            raise TestbedError(
                f"--attack {spec_text!r}: params after ':' must be JSON ({exc.msg})"
            ) from None
        if not isinstance(p, dict):
            raise TestbedError(f"--attack {spec_text!r}: params after ':' must be a JSON object")
        spec = {"name": name, "params": p}
        if p:  # two runs of `testbed attack` with other params must not share their columns
            spec["label"] = f"{name}-{params_digest(p)}"
        if spec in attacks:
            raise TestbedError(f"--attack {spec_text!r} is given twice")
        attacks.append(spec)
    return attacks


def run(args) -> int:
    attacks = _attack_specs(args.attack)
    colluders = args.colluders.split(",") if args.colluders else None
    run_dir = find_run_dir(args.run_dir, "attack")
    done = attack_run_or_sweep(run_dir, attacks, args.observer, colluders, args.sign)
    total, every = 0, []
    labels = cell_labels(run_dir)  # a sweep: each block names its cell; a single run: none
    for rows, sc, out in done:
        total += len(rows)
        every.extend(rows)
        cell = labels.get(out.parent.name)
        name = f"{sc.name} [{cell[1]}]" if cell else sc.name
        print(f"{name}: {len(rows)} attack row(s) on the saved transcript (protocol not re-run)")
        print_attack_rows(rows)
        for line in why_no_rows(sc, rows):
            print(f"  no row: {line}")
        print(f"rows: {out}")
    if len(done) > 1:
        print(f"{len(done)} cells, {total} rows; `testbed report {run_dir}` shows them")
    return failed_attacks(every)
