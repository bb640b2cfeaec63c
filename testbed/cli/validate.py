"""``testbed validate SCENARIO``: check a scenario without running it."""

from __future__ import annotations

from testbed.cli._common import load_checked, planned_run_dir, run_hash
from testbed.scenario.cells import expand_cells
from testbed.scenario.preflight import preflight


def run(args) -> int:
    sc = load_checked(args)  # as run loads it: the memory and data-size checks included
    skipped = preflight(sc)  # what `run` would refuse: before anything runs
    h = run_hash(sc)  # the hash its run directory is named by: for a sweep, over its cells
    protocol = f"protocol {sc.protocol.name}"
    if sc.is_sweep:
        cells = expand_cells(sc)
        what = f"sweep of {len(cells)} cells, sweep hash {h[:12]}"
        names = list(dict.fromkeys(c.scenario.protocol.name for c in cells))  # the cells' own
        protocol = f"protocol{'s' if len(names) > 1 else ''} {', '.join(names)}"
    else:
        what = f"config hash {h[:12]}"
    print(
        f"{args.scenario}: ok (scenario {sc.name!r}, {protocol}, {what}; "
        f"testbed run writes {planned_run_dir(sc, None, h)}/)"
    )
    for line in skipped:
        print(f"  {line}")
    return 0
