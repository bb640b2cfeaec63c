"""``testbed bench`` section: what the transcript's content hash and logging path cost.

Kept apart from :mod:`testbed.bench`'s protocol sections. Two measurements:

- **hash**: SHA-256 (the former digest) against BLAKE3 (the current one) over one payload the
  size of a TriangleWad message at n = 2000, d = 784, minimum over repeats;
- **logging**: the share of a protocol run spent in ``Bus.send`` (freezing, sizing, hashing,
  appending) relative to the rest of the same run, for TriangleWad at n = 2000, d = 784 and
  FedWAD (paper mode) on the same data. Issue 15's target is at most 5 %.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from testbed.payload import payload_digest

__all__ = ["bench_transcript_hash"]

#: The cases whose logging share is measured (n, d as in issue 15).
LOGGING_CASES = (("triangle_wad", 2000, 784), ("fedwad_paper", 2000, 784))


def _min_seconds(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def hash_rows(n: int = 2000, d: int = 784, repeats: int = 5, seed: int = 0) -> list[dict]:
    """Seconds per digest of one n x d float64 payload, SHA-256 against BLAKE3."""
    a = np.random.default_rng(seed).normal(size=(n, d))
    rows = []
    for algorithm in ("sha256", "blake3"):
        s = _min_seconds(lambda alg=algorithm: payload_digest(a, alg), repeats)
        rows.append(
            {"algorithm": algorithm, "n": n, "d": d, "seconds": s, "mb_per_s": a.nbytes / s / 1e6}
        )
    return rows


def logging_rows(opts) -> list[dict]:
    """Share of each run spent in ``Bus.send``, against the rest of the run (same run)."""
    from testbed.bench import PAIR_CASES, _in_run_share, _registered, make_pair

    by_key = {c.key: c for c in PAIR_CASES}
    rows = []
    for key, n, d in LOGGING_CASES:
        case = by_key.get(key)
        if case is None or not _registered(case.protocol):
            continue
        opts.log(f"transcript logging: {key} n={n} d={d}")
        share, total = _in_run_share(case, make_pair(n, d, opts.seed), None, opts.seed, 3)
        rows.append({"case": key, "n": n, "d": d, "logging_share": share, "run_seconds": total})
    return rows


def bench_transcript_hash(opts) -> dict[str, Any]:
    """The section's JSON: hash timings always, the logging shares with ``--targets`` (full)."""
    out: dict[str, Any] = {"hash": hash_rows(seed=opts.seed)}
    sha, b3 = out["hash"]
    out["blake3_speedup"] = sha["seconds"] / b3["seconds"]
    if opts.targets:
        out["logging"] = logging_rows(opts)
    return out
