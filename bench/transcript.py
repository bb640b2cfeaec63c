"""``testbed bench`` section: what the transcript's content hash and logging path cost.

Kept apart from the protocol sections (:mod:`bench.sections`). Two measurements:

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

from testbed.exchange.payload import payload_digest

__all__ = ["bench_transcript_hash"]


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


def bench_transcript_hash(opts) -> dict[str, Any]:
    """The section's JSON, hash part (:mod:`bench.main` adds the logging shares with
    ``--targets``)."""
    out: dict[str, Any] = {"hash": hash_rows(seed=opts.seed)}
    sha, b3 = out["hash"]
    out["blake3_speedup"] = sha["seconds"] / b3["seconds"]
    return out
