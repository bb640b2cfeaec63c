"""``testbed new-attack``, ``new-protocol`` and ``new-defense NAME [DIR]``: scaffold a plugin
package."""

from __future__ import annotations

from testbed.plugins.scaffold import new_attack, new_defense, new_protocol


def run_new_attack(args) -> int:
    root = new_attack(args.name, args.dir)
    print(f"created attack plugin {args.name!r} in {root}")
    print(f"next: pip install -e {root} && testbed plugins")
    return 0


def run_new_protocol(args) -> int:
    root = new_protocol(args.name, args.dir)
    print(f"created protocol plugin {args.name!r} in {root}")
    print(f"next: pip install -e {root} && testbed plugins && pytest {root / 'tests'}")
    return 0


def run_new_defense(args) -> int:
    root = new_defense(args.name, args.dir)
    print(f"created defense plugin {args.name!r} in {root}")
    print(f"next: pip install -e {root} && testbed plugins && pytest {root / 'tests'}")
    return 0
