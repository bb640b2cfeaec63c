"""``testbed validate SCENARIO``: check a scenario without running it."""

from __future__ import annotations

from testbed.scenario.loading import load_scenario
from testbed.scenario.resolve import config_hash, resolve
from testbed.scenario.resources import set_cli_overrides


def run(args) -> int:
    set_cli_overrides(max_cells=args.max_cells)
    sc = load_scenario(args.scenario)
    cells = ""
    if sc.is_sweep:
        from testbed.run.sweep import expand_cells

        cells = f", sweep of {len(expand_cells(sc))} cells"
    print(
        f"{args.scenario}: ok (scenario {sc.name!r}, protocol {sc.protocol.name}, "
        f"config hash {config_hash(resolve(sc))[:12]}{cells})"
    )
    return 0
