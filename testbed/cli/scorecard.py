"""``testbed scorecard PROTOCOL|SCENARIO``: run a protocol once, then every applicable attack
under every threat model."""

from __future__ import annotations

from testbed.plugins.scorecard import scorecard


def run(args) -> int:
    card = scorecard(args.target, args.out, progress=not args.quiet)
    for line in card.summary_lines():
        print(line)
    print(f"scorecard: {card.paths['html']}")
    # as testbed run: 3 = an attack failed while the rest ran (the card lists each error)
    return 3 if card.errors else 0
