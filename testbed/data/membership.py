"""Membership-candidate pools (issue 11): members plus held-out non-members, for every protocol.

A scenario asks for one with ``membership: {members: 50, nonmembers: 50}``. Before the dataset is
partitioned, ``nonmembers`` rows are drawn (seeded, stream ``"membership"``) and removed, so no
party holds them; they come from the same distribution as the parties' rows because they are rows
of the same dataset (transformed like the parties' rows). For each target party, ``members`` of
its rows join them, and the pool is shuffled. Attacks receive the candidate rows through
``PublicInfo.extra["candidates"][target]``; the member labels live in the world's meta and reach
only the scorer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from testbed.data.datasets import Dataset, PartyData
from testbed.errors import TestbedError

__all__ = ["CandidatePool", "draw_candidates", "hold_out"]


@dataclass(frozen=True)
class CandidatePool:
    """``candidates[target]``: rows (public); ``labels[target]``: member flags (scorer only)."""

    candidates: dict[str, np.ndarray]
    labels: dict[str, np.ndarray]


def hold_out(
    dataset: Dataset, n: int, rng: np.random.Generator
) -> tuple[Dataset, np.ndarray, np.ndarray]:
    """Remove ``n`` random rows from ``dataset``.

    Returns the remaining dataset, the original indices of the rows kept (to map a partition's
    indices back to the dataset, e.g. for tokens) and the held-out rows.
    """
    total = dataset.X.shape[0]
    if n >= total:
        raise TestbedError(
            f"membership.nonmembers: {n} held-out rows requested but dataset "
            f"{dataset.name!r} has only {total} rows (the parties need some)"
        )
    held = np.sort(rng.choice(total, size=n, replace=False))
    keep = np.setdiff1d(np.arange(total), held)
    y = None if dataset.y is None else np.asarray(dataset.y)[keep]
    rest = Dataset(np.asarray(dataset.X)[keep], y, dataset.name, dataset.meta)
    return rest, keep, np.asarray(dataset.X, dtype=np.float64)[held]


def reindex(parties: dict[str, PartyData], keep: np.ndarray) -> dict[str, PartyData]:
    """Map the parties' ``source_index`` (into the reduced dataset) back to the full dataset."""
    return {
        p: d
        if d.source_index is None
        else replace(d, source_index=keep[np.asarray(d.source_index)])
        for p, d in parties.items()
    }


def draw_candidates(
    parties: dict[str, PartyData],
    nonmembers: np.ndarray,
    members: int,
    rng: np.random.Generator,
    targets: list[str] | None = None,
) -> CandidatePool:
    """Per target: ``min(members, rows)`` of its rows plus every held-out row, shuffled."""
    targets = list(parties) if targets is None else list(targets)
    unknown = [t for t in targets if t not in parties]
    if unknown:
        raise TestbedError(
            f"membership.targets: unknown part{'y' if len(unknown) == 1 else 'ies'} "
            f"{', '.join(map(repr, unknown))}; parties: {', '.join(parties)}"
        )
    cands, labels = {}, {}
    for t in targets:
        X = np.asarray(parties[t].X, dtype=np.float64)
        k = min(int(members), X.shape[0])
        mem = X[np.sort(rng.choice(X.shape[0], size=k, replace=False))]
        C = np.vstack([mem, nonmembers])
        lab = np.r_[np.ones(k, bool), np.zeros(nonmembers.shape[0], bool)]
        perm = rng.permutation(C.shape[0])
        C, lab = C[perm], lab[perm]
        C.setflags(write=False)
        lab.setflags(write=False)
        cands[t], labels[t] = C, lab
    return CandidatePool(cands, labels)
