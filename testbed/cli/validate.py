"""``testbed validate SCENARIO``: check a scenario without running it."""

from __future__ import annotations

from testbed.cli._common import load_checked, planned_run_dir
from testbed.scenario.preflight import preflight
from testbed.scenario.resolve import config_hash, resolve


def run(args) -> int:
    sc = load_checked(args)  # as run loads it: the memory and data-size checks included
    skipped = preflight(sc)  # what `run` would refuse: before anything runs
    if sc.is_sweep:  # the hash its run directory is named by: the sweep's, over its cells
        from testbed.scenario.cells import expand_cells, sweep_hash

        cells = expand_cells(sc)
        what = f"sweep of {len(cells)} cells, sweep hash {sweep_hash(cells)[:12]}"
    else:
        what = f"config hash {config_hash(resolve(sc))[:12]}"
    print(
        f"{args.scenario}: ok (scenario {sc.name!r}, protocol {sc.protocol.name}, {what}; "
        f"testbed run writes {planned_run_dir(sc, None)}/)"
    )
    for line in skipped:
        print(f"  {line}")
    return 0
