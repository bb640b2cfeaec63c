"""Pairs in lock step (``fedwad_clustering.pairs_in_flight``, ``protocols._base.drive_many``):
the same distances as one pair after another, each run fed only its own results."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from bench.data import make_clients
from protocols._base import drive, drive_many
from protocols.fedwad import FedWAD, FedWADConfig
from protocols.fedwad_clustering import FedWADClustering, FedWADClusteringConfig
from testbed.exchange.bus import Bus


def _cfg(**kw) -> FedWADClusteringConfig:
    fw = FedWADConfig(support_size=4, iterations=3, init_scale=5.0, trace=False)
    return FedWADClusteringConfig(fedwad=fw, n_clusters=2, **kw)


def _pairs(window, parties, limit=None):
    bus = Bus(parties=parties)
    D, done = FedWADClustering(_cfg()).pair_distances(
        dict.fromkeys(parties), bus, np.random.default_rng(5), limit, window=window
    )
    return D, done, bus.transcript


@pytest.fixture(scope="module")
def parties():
    return make_clients(8, 12, 3, 0)


def test_the_window_changes_no_distance(parties):
    D1, n1, t1 = _pairs(1, parties)
    for w in (3, 100):
        D, n, t = _pairs(w, parties)
        assert n == n1 == 28
        np.testing.assert_array_equal(D, D1)  # bit for bit
        # the same messages, interleaved
        key = lambda e: (e.kind, e.sender, e.receiver, e.round, e.digest)  # noqa: E731
        assert Counter(map(key, t)) == Counter(map(key, t1))
        assert t.digest() != t1.digest()
    # each pair equals a FedWAD run alone with the pair's own generator
    rng = np.random.default_rng(5)
    names = list(parties)
    fw = FedWAD(_cfg().fedwad.model_copy(update={"clients": [names[0], names[1]]}))
    alone = fw.run(parties, Bus(parties=parties), rng.spawn(1)[0]).estimates["wasserstein"]
    assert D1[0, 1] == alone


def test_same_window_same_transcript_and_limit(parties):
    a, b = _pairs(4, parties, limit=10), _pairs(4, parties, limit=10)
    assert a[1] == b[1] == 10 and a[2].digest() == b[2].digest()
    np.testing.assert_array_equal(a[0], _pairs(1, parties, limit=10)[0])
    assert np.count_nonzero(np.triu(a[0], 1)) == 10


def test_the_protocol_result_does_not_depend_on_pairs_in_flight(parties):
    out = []
    for w in (1, 6):
        res = FedWADClustering(_cfg(pairs_in_flight=w)).run(
            parties, Bus(parties=parties), np.random.default_rng(2)
        )
        out.append(res)
    np.testing.assert_array_equal(
        out[0].estimates["distance_matrix"], out[1].estimates["distance_matrix"]
    )
    assert out[0].estimates["ari"] == out[1].estimates["ari"]


class _EchoBus:
    """local_map returns (party, argument) for each call and records the batch sizes."""

    def __init__(self):
        self.batches = []

    def local_map(self, calls):
        self.batches.append(len(calls))
        return [(c[0], c[2]) for c in calls]


def _run(tag: str, steps: int, pulled: list):
    pulled.append(tag)
    total = 0
    for k in range(steps):
        got = yield [(tag, None, k), (tag, None, 10 * k)]
        assert got == [(tag, k), (tag, 10 * k)]  # its own results, in its own order
        total += sum(x for _, x in got)
    return tag, total


def test_drive_many_feeds_each_run_its_own_results_within_the_window():
    bus, pulled, done = _EchoBus(), [], {}
    runs = (_run(f"r{i}", i % 4 + 1, pulled) for i in range(9))
    n = drive_many(runs, bus, 3, lambda i, r: done.setdefault(i, r))
    assert n == 9 and sorted(done) == list(range(9))
    for i, (tag, total) in done.items():
        steps = i % 4 + 1
        assert tag == f"r{i}" and total == 11 * steps * (steps - 1) // 2
    assert max(bus.batches) <= 3 * 2  # never more than `window` runs in flight
    assert pulled == [f"r{i}" for i in range(9)]  # started in order
    # drive() of one run gives what drive_many gave it
    assert drive(_run("r5", 2, []), _EchoBus()) == done[5]
    with pytest.raises(ValueError, match="window"):
        drive_many(iter(()), bus, 0, lambda i, r: None)


def test_drive_many_reads_its_source_lazily():
    bus, pulled = _EchoBus(), []

    def source():
        for i in range(1000):
            yield _run(f"r{i}", 2, pulled)

    seen_at_first_step = []
    orig = bus.local_map

    def spy(calls):
        if not seen_at_first_step:
            seen_at_first_step.append(len(pulled))
        return orig(calls)

    bus.local_map = spy
    drive_many(source(), bus, 5, lambda i, r: None)
    assert seen_at_first_step == [5] and len(pulled) == 1000
