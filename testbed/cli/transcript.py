"""``testbed transcript RUN``: what was exchanged in a run, message by message and summed
per kind and route, with the defenses that acted on each message (its meta's ``defended_by``,
:func:`testbed.exchange.envelope.defended_by`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

import numpy as np

from testbed.cli._common import find_run_dir, fmt_bytes, table
from testbed.errors import TestbedError
from testbed.exchange.bus import Transcript
from testbed.measure import Measure
from testbed.run.rundir import finished_cells, is_sweep, run_dir_lock


def payload_summary(p) -> str:
    if isinstance(p, Measure):
        return f"measure {p.n}x{p.d}"
    if isinstance(p, np.ndarray):
        return f"array {'x'.join(map(str, p.shape))}"
    if isinstance(p, Mapping):
        return "{" + ", ".join(f"{k}: {payload_summary(v)}" for k, v in p.items()) + "}"
    if isinstance(p, float):
        return f"{p:.6g}"
    return repr(p)


def run(args) -> int:
    run_dir = find_run_dir(args.run_dir, "transcript")
    if is_sweep(run_dir) and (
        cells := [c for c in finished_cells(run_dir) if (c / "envelopes.jsonl").is_file()]
    ):  # one transcript per cell
        raise TestbedError(
            f"{run_dir} is a sweep of {len(cells)} cells, each with its own transcript: "
            f"give one cell, e.g. testbed transcript {cells[0]}"
        )
    with run_dir_lock(run_dir, write=False):  # held for the whole read
        return _show(args, Transcript.load(run_dir))


def _show(args, tr) -> int:
    envs = list(tr)
    shown = envs if args.all or len(envs) <= args.limit else envs[: args.limit]
    rows = [
        [
            e.seq,
            e.round,
            f"{e.sender} -> {e.receiver}",
            e.kind,
            payload_summary(e.payload),
            fmt_bytes(e.nbytes),
            ", ".join(e.defended_by) or "-",
        ]
        for e in shown
    ]
    print(table(rows, ["#", "round", "route", "kind", "payload", "size", "defended by"]))
    if len(shown) < len(envs):
        print(f"... {len(envs) - len(shown)} more (use --all)")
    by = defaultdict(lambda: [0, 0, {}])
    acted = Counter()  # messages each defense acted on
    for e in envs:
        group = by[(e.kind, e.sender, e.receiver)]
        group[0] += 1
        group[1] += e.nbytes
        group[2].update(dict.fromkeys(e.defended_by))  # in order of first appearance
        acted.update(e.defended_by)
    print()
    print(
        table(
            [
                [k, f"{s} -> {r}", n, fmt_bytes(b), ", ".join(d) or "-"]
                for (k, s, r), (n, b, d) in sorted(by.items())
            ],
            ["kind", "route", "messages", "bytes", "defended by"],
        )
    )
    print(
        f"total: {len(envs)} messages, {fmt_bytes(tr.nbytes)}, transcript digest {tr.digest()[:16]}"
    )
    print(
        "defenses: "
        + (
            ", ".join(f"{d} acted on {n} of {len(envs)} messages" for d, n in acted.items())
            or "none acted on any message"
        )
    )
    return 0
