"""``testbed new-attack``, ``new-protocol`` and ``new-defense NAME [DIR]``: scaffold a plugin
package."""

from __future__ import annotations

import shlex
import sys

from testbed.plugins.scaffold import new_attack, new_defense, new_protocol


def next_steps(root, tests: bool = True) -> str:
    """The commands that install and check a scaffolded package, with this interpreter's own
    pip, testbed and pytest (``python -m``): a bare ``pip`` may be another environment's, or
    none, outside the activated virtual environment."""
    py = shlex.quote(sys.executable)
    steps = [f"{py} -m pip install -e {shlex.quote(str(root))}", f"{py} -m testbed plugins"]
    if tests:
        steps.append(f"{py} -m pytest {shlex.quote(str(root / 'tests'))}")
    return "next: " + " && ".join(steps)


def run_new_attack(args) -> int:
    root = new_attack(args.name, args.dir)
    print(f"created attack plugin {args.name!r} in {root}")
    print(next_steps(root, tests=False))
    return 0


def run_new_protocol(args) -> int:
    root = new_protocol(args.name, args.dir)
    print(f"created protocol plugin {args.name!r} in {root}")
    print(next_steps(root))
    return 0


def run_new_defense(args) -> int:
    root = new_defense(args.name, args.dir)
    print(f"created defense plugin {args.name!r} in {root}")
    print(next_steps(root))
    return 0
