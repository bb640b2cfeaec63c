"""Mutation score per module from mutmut's results (docs/guide/development.md, "Mutation testing").

    mutmut results --all true | python scripts/mutation_score.py [EQUIVALENT_LIST]

Reads ``mutmut results --all true`` on stdin and prints, per mutated module: total mutants,
killed (a test failed, or it timed out: an endless loop is caught; a listed
equivalent mutant that timed out counts as equivalent), survived, equivalent (listed
in ``EQUIVALENT_LIST``, default ``scripts/mutation_equivalent.txt``: one mutant name per line,
then its reason), not run (no selected test reaches the function: ``canary_audit``, which only
the integration tests of tests/test_audit.py run), the score killed / run and the score without
the equivalent ones killed / (run - equivalent). Exits 1 when a listed equivalent mutant is killed (the list is
stale) or when a mutant was not checked.
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

_LINE = re.compile(r"^\s*(testbed\.(\w+)\.\S+):\s*(.+?)\s*$")
_KILLED = {"killed", "timeout"}


def equivalent_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(line.split()[0])
    return names


def main(argv: list[str]) -> int:
    eq_path = Path(argv[0]) if argv else Path(__file__).with_name("mutation_equivalent.txt")
    equivalent = equivalent_names(eq_path) if eq_path.exists() else set()
    status: dict[str, Counter] = defaultdict(Counter)
    stale, unchecked = [], []
    for line in sys.stdin:
        m = _LINE.match(line)
        if not m:
            continue
        name, module, state = m.groups()
        killed = state in _KILLED
        status[module]["total"] += 1
        status[module]["killed"] += killed
        if state == "not checked":
            unchecked.append(name)
        if state == "no tests":
            status[module]["not run"] += 1
        elif name in equivalent:
            # a listed mutant that timed out is counted equivalent (a hung forked worker); one
            # that a test failed on is not equivalent: the list is stale
            status[module]["equivalent"] += 1
            status[module]["killed"] -= killed
            if state == "killed":
                stale.append(name)
        elif not killed:
            status[module]["survived"] += 1
    print(
        f"{'module':10} {'total':>6} {'not run':>7} {'killed':>6} {'equiv':>6} {'survived':>8} "
        f"{'score':>7} {'w/o equiv':>9}"
    )
    for module in sorted(status) + ["all"]:
        c = status[module] if module != "all" else sum(status.values(), Counter())
        total, killed, eq, idle = c["total"], c["killed"], c["equivalent"], c["not run"]
        run = total - idle
        print(
            f"{module:10} {total:6d} {idle:7d} {killed:6d} {eq:6d} {c['survived']:8d} "
            f"{killed / max(run, 1):7.1%} {killed / max(run - eq, 1):9.1%}"
        )
    for name in stale:
        print(f"listed as equivalent but killed: {name}", file=sys.stderr)
    if unchecked:
        print(f"{len(unchecked)} mutants not checked (run `mutmut run` first)", file=sys.stderr)
    return 1 if stale or unchecked else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
