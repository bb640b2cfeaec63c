"""pytest-benchmark timings (``make bench``; marker ``benchmark``, outside the default suite).

Each protocol is timed on the same data as one exact ``ot.emd``, so the pytest-benchmark table
shows their ratio directly. The full grid, plots and targets come from ``testbed bench --full``.
"""

from __future__ import annotations

import numpy as np
import ot
import pytest

from bench.cases import (
    CLIENT_CASES,
    PAIR_CASES,
    fedwad_public_algorithm,
    registered,
    run_protocol,
)
from bench.data import make_clients, make_pair
from bench.timing import BareBus

pytestmark = pytest.mark.benchmark
pytest.importorskip("pytest_benchmark")

N, D = 1000, 64


@pytest.fixture(scope="module")
def pair():
    return make_pair(N, D, seed=0)


def test_one_exact_emd(benchmark, pair):
    X, Y = pair["alice"].X, pair["bob"].X
    a, b, M = ot.unif(N), ot.unif(N), ot.dist(X, Y)
    G = benchmark(ot.emd, a, b, M, numItermax=10_000_000)
    np.testing.assert_allclose(G.sum(), 1.0, rtol=1e-9)


@pytest.mark.parametrize("case", PAIR_CASES, ids=lambda c: c.key)
def test_pair_protocol(benchmark, pair, case):
    if not registered(case.protocol):
        pytest.skip(f"{case.protocol} not registered")
    if case.max_n is not None and N > case.max_n:
        pytest.skip("over the case's size budget")
    res = benchmark.pedantic(run_protocol(case, pair), rounds=3, iterations=1)
    assert np.isfinite(next(iter(res.estimates.values())))


def test_public_fedwad_algorithm(benchmark, pair):
    X, Y = pair["alice"].X, pair["bob"].X
    w = benchmark.pedantic(
        fedwad_public_algorithm, args=(X, Y, 10, 20, 0.5, np.random.default_rng(0)), rounds=3
    )
    assert w > 0


@pytest.mark.parametrize("bus", ["normal", "bare"])
def test_transcript_overhead(benchmark, pair, bus):
    factory = (lambda p: BareBus(parties=p)) if bus == "bare" else None
    res = benchmark.pedantic(run_protocol(PAIR_CASES[0], pair, factory), rounds=5)
    assert res.estimates["wasserstein"] > 0


@pytest.mark.parametrize("clients", [5, 20])
@pytest.mark.parametrize("case", CLIENT_CASES, ids=lambda c: c.key)
def test_clients_protocol(benchmark, case, clients):
    if not registered(case.protocol):
        pytest.skip(f"{case.protocol} not registered")
    parties = make_clients(clients, case.points_per_client, case.dim, seed=0)
    res = benchmark.pedantic(run_protocol(case, parties), rounds=1, iterations=1)
    assert res.estimates
