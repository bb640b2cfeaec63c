"""``testbed plugins``: list the registered protocols, attacks, defenses, datasets,
partitioners and transforms (broken plugins listed with the reason, never fatal). Nothing
built in is imported: names and descriptions come from the registries' table and the plugins'
source (testbed/registry.py).

``testbed plugins NAME [--json]``: one plugin's reference (its module is imported to read its
parameter model): :mod:`testbed.plugins.reference`."""

from __future__ import annotations

import json

from testbed.errors import TestbedError
from testbed.registry import ATTACKS, DATASETS, DEFENSES, PARTITIONERS, PROTOCOLS, TRANSFORMS


def run(args) -> int:
    if getattr(args, "name", None):
        return _describe(args.name, args.json)
    if getattr(args, "json", False):
        raise TestbedError(
            "--json describes one plugin: give its NAME (`testbed plugins NAME --json`)"
        )
    for title, reg in [
        ("protocols", PROTOCOLS),
        ("attacks", ATTACKS),
        ("defenses", DEFENSES),
        ("datasets", DATASETS),
        ("partitioners", PARTITIONERS),
        ("transforms", TRANSFORMS),
    ]:
        print(f"{title}:")
        items = reg.listing()  # built-ins described from their source, not imported
        if not items:
            print("  (none)")
        width = max((len(n) for n, _ in items), default=0)
        for name, doc in items:
            print(f"  {name.ljust(width)}  {doc}")
        for name, why in reg.broken().items():  # listed, never fatal: only its users fail
            print(f"  {name.ljust(width)}  BROKEN: {why}")
    return 0


def _describe(name: str, as_json: bool) -> int:
    from testbed.plugins.reference import describe, render_text  # lazy: only `plugins NAME`

    records = describe(name)  # an unknown name: one line with the closest names (exit 2)
    if as_json:
        print(json.dumps(records[0] if len(records) == 1 else records, indent=2))
    else:
        print("\n\n".join(render_text(r) for r in records))
    return 0
