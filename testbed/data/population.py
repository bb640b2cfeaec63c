"""Population rows: rows of the same distribution as a party's data that no party holds.

The scorer compares every reconstruction with the target's private rows *and* with these rows
(DESIGN.md, "Metrics", record-level leakage vs the population): a reconstruction that matches the
population as well as it matches the party's rows shows distributional inference, not a record
leak. Built by the roster stage, stored in the world's meta beside the membership labels, and read
only by the scorer (never by an attack).

Where they come from, in order:

1. **fresh draws** of a synthetic dataset whose plugin can draw more rows
   (``DatasetPlugin.fresh_rows(rng, labels, n)``, e.g. ``gaussians``), from a stream of their own
   (``"population"``), so the parties' rows and every other result are unchanged;
2. **held-out rows**: rows of the dataset that the partition gave to no party (and that are not in
   a membership pool: attacks see those).

For a party with labels the population is stratified like the party's rows (the same label
histogram), so a party of a label-skewed partition is compared with rows of its own labels, not
with the whole dataset. ``factor`` × the party's rows are drawn (at least ``floor``); held-out rows
are used as far as they go. Without either source the party has no population and the scorer says
so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from testbed.contract import provides
from testbed.data.datasets import Dataset, PartyData

__all__ = ["LazyPopulation", "Population", "population_rows"]

FRESH = "fresh draws of the synthetic dataset"
HELD = "held-out rows of the dataset (no party holds them)"
NONE = "none (every row of the dataset is held by a party)"


@dataclass(frozen=True)
class Population:
    """``rows[party]``: population rows for that party (scorer only), ``labels[party]`` their
    labels (None without labels); ``method``: their source."""

    rows: dict[str, np.ndarray]
    labels: dict[str, np.ndarray | None]
    method: str


class LazyPopulation:
    """A :class:`Population` drawn at its first use (the scorer's): the rows come from a stream
    of their own, so when they are drawn changes no number, and a run without attacks never
    draws them (fresh draws are 4 x every party's rows: 1 GB at 1000 clients x 500 rows,
    d = 64, which every forked worker would map too). Pickled as the :class:`Population`."""

    def __init__(self, make: Callable[[], Population]):
        self._make: Callable[[], Population] | None = make
        self._got: Population | None = None
        self._lock = threading.Lock()

    def get(self) -> Population:
        with self._lock:
            if self._got is None:
                assert self._make is not None
                self._got, self._make = self._make(), None  # what it held can go
            return self._got

    @property
    def rows(self) -> dict[str, np.ndarray]:
        return self.get().rows

    @property
    def labels(self) -> dict[str, np.ndarray | None]:
        return self.get().labels

    @property
    def method(self) -> str:
        return self.get().method

    def __reduce__(self):
        return (Population, (self.rows, self.labels, self.method))


def _stratified_counts(y, total: int) -> dict[int, int]:
    labels, counts = np.unique(np.asarray(y, dtype=np.int64), return_counts=True)
    share = counts / counts.sum()
    return {int(c): max(1, int(round(s * total))) for c, s in zip(labels, share)}


def _fresh(plugin, parties, rng, factor: int, floor: int) -> dict[str, tuple]:
    out = {}
    for name, d in parties.items():
        total = max(factor * d.n, floor)
        if d.y is None:
            out[name] = (np.asarray(plugin.fresh_rows(rng, None, total), np.float64), None)
            continue
        counts = _stratified_counts(d.y, total)
        labels = np.concatenate([np.full(k, c) for c, k in counts.items()])
        out[name] = (np.asarray(plugin.fresh_rows(rng, labels, labels.size), np.float64), labels)
    return out


def _held(dataset: Dataset, parties, rng, factor: int, floor: int) -> dict[str, tuple]:
    used = np.concatenate([np.asarray(d.source_index) for d in parties.values()])
    free = np.setdiff1d(np.arange(dataset.n), used)
    if free.size < 2:
        return {}
    X = np.asarray(dataset.X, dtype=np.float64)
    out = {}
    for name, d in parties.items():
        total = max(factor * d.n, floor)
        if d.y is None or dataset.y is None:
            pick = rng.permutation(free)[:total]
        else:
            fy = np.asarray(dataset.y)[free]
            pick = np.concatenate(
                [
                    rng.permutation(free[fy == c])[:k]
                    for c, k in _stratified_counts(d.y, total).items()
                ]
            )
        if pick.size >= 2:
            pick = np.sort(pick)
            out[name] = (X[pick], None if dataset.y is None else np.asarray(dataset.y)[pick])
    return out


def population_rows(
    plugin,
    dataset: Dataset,
    parties: Mapping[str, PartyData],
    rng: np.random.Generator,
    factor: int = 4,
    floor: int = 200,
) -> Population:
    """Population rows per party (see the module docstring); ``parties`` as partitioned from
    ``dataset`` (their ``source_index`` refers to its rows)."""
    if provides(plugin, "fresh_rows"):
        got, method = _fresh(plugin, parties, rng, factor, floor), FRESH
    else:
        got = _held(dataset, parties, rng, factor, floor)
        method = HELD if got else NONE
    return Population(
        {p: X for p, (X, _) in got.items()}, {p: y for p, (_, y) in got.items()}, method
    )
