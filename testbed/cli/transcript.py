"""``testbed transcript RUN``: what was exchanged in a run, message by message and summed
per kind and route."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from testbed.cli._common import find_run_dir, fmt_bytes, table
from testbed.errors import TestbedError
from testbed.exchange.bus import Transcript
from testbed.measure import Measure


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
    from testbed.run.rundir import finished_cells, is_sweep, run_dir_lock

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
        ]
        for e in shown
    ]
    print(table(rows, ["#", "round", "route", "kind", "payload", "size"]))
    if len(shown) < len(envs):
        print(f"... {len(envs) - len(shown)} more (use --all)")
    by = defaultdict(lambda: [0, 0])
    for e in envs:
        by[(e.kind, e.sender, e.receiver)][0] += 1
        by[(e.kind, e.sender, e.receiver)][1] += e.nbytes
    print()
    print(
        table(
            [[k, f"{s} -> {r}", n, fmt_bytes(b)] for (k, s, r), (n, b) in sorted(by.items())],
            ["kind", "route", "messages", "bytes"],
        )
    )
    print(
        f"total: {len(envs)} messages, {fmt_bytes(tr.nbytes)}, transcript digest {tr.digest()[:16]}"
    )
    return 0
