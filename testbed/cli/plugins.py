"""``testbed plugins``: list the registered protocols, attacks, defenses, datasets,
partitioners and transforms (broken plugins listed with the reason, never fatal). Nothing
built in is imported: names and descriptions come from the registries' table and the plugins'
source (testbed/registry.py)."""

from __future__ import annotations

from testbed.registry import ATTACKS, DATASETS, DEFENSES, PARTITIONERS, PROTOCOLS, TRANSFORMS


def run(args) -> int:
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
