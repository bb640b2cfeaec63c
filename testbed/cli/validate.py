"""``testbed validate SCENARIO``: check a scenario without running it."""

from __future__ import annotations

from testbed.scenario.resources import set_cli_overrides
from testbed.scenario.schema import config_hash, load_scenario, resolve


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
