"""The in-process engine with worker processes (``engine_params: {workers: k}``): parties live in
the workers, local computations run there at once, and results and transcripts are bit-identical
to the plain bus for the same seed."""

from __future__ import annotations

import os

import numpy as np
import pytest

from defenses.gaussian_measure_noise import GaussianMeasureNoise, GaussianMeasureNoiseConfig
from protocols.fedbary import FedBary, FedBaryConfig
from testbed.bench.data import make_clients
from testbed.data.datasets import PartyData
from testbed.errors import DataError, ScenarioError, TestbedError
from testbed.exchange.bus import Bus
from testbed.exchange.engines import open_bus
from testbed.exchange.engines.pool import PoolBus


def _where(party, k):
    return party.name, os.getpid(), float(k * party.X.sum())


def _fail_on(party, bad):
    if party.name == bad:
        raise DataError(f"bad row at {party.name}")
    return party.name


def _square(x):
    return x * x


@pytest.fixture
def parties():
    return {p: PartyData(p, np.full((2, 2), i + 1.0)) for i, p in enumerate("abcd")}


def test_parties_live_in_the_workers_and_results_keep_call_order(parties):
    with open_bus("inprocess", {"workers": 2}, parties=parties) as bus:
        assert isinstance(bus, PoolBus) and bus.runs_concurrently
        got = bus.local_map([("d", _where, 1.0), ("a", _where, 2.0), ("b", _where, 1.0)])
        assert [g[0] for g in got] == ["d", "a", "b"]
        assert [g[2] for g in got] == [16.0, 8.0, 8.0]
        pids = {g[1] for g in got}
        assert os.getpid() not in pids and len(pids) == 2  # a, b in different workers
        assert bus.local("c", _where, 1.0)[1] == got[1][1]  # c shares a's worker
        assert bus.map_pure([(_square, 3), (_square, 4)]) == [9, 16]
        assert not hasattr(bus, "_parties") or not bus._parties  # the driver holds no data


def test_errors_are_raised_in_the_driver_in_call_order(parties):
    with PoolBus(parties=parties, workers=2) as bus:
        with pytest.raises(DataError, match="bad row at b"):
            bus.local_map([("a", _fail_on, "b"), ("b", _fail_on, "b"), ("c", _fail_on, "c")])
        with pytest.raises(TestbedError, match="no party 'z'"):
            bus.local("z", _where, 1.0)
        assert bus.local("a", _fail_on, "b") == "a"  # the workers survive a failure
    with pytest.raises(TestbedError, match="no party .a."):  # closed: no workers left
        bus.local("a", _where, 1.0)


def test_bad_worker_count_names_the_field():
    with pytest.raises(ScenarioError, match="engine_params.workers"):
        with open_bus("inprocess", {"workers": 0}):
            pass


@pytest.mark.parametrize(
    "params,defended",
    [
        ({}, False),
        ({"validation": "client_0"}, False),
        ({"barycenter_steps": 3, "interpolation": "exact", "iterations": 3}, False),
        ({"gamma_init": "shared"}, True),
        ({"validation": "client_0"}, True),
    ],
)
def test_fedbary_on_workers_equals_the_sequential_run_bit_for_bit(params, defended):
    # the pool engine runs the clients' solves at once and the server's ahead of time; the
    # transcript (digest over every payload) and every output must be the sequential run's
    parties = make_clients(9, 40, 4, seed=2)
    cfg = FedBaryConfig(**{"iterations": 4, "return_barycenter": True, **params})

    def run(bus):
        res = FedBary(cfg).run(parties, bus, np.random.default_rng(7))
        return bus.transcript.digest(), res

    def defenses():
        if not defended:
            return ()
        noise = GaussianMeasureNoise(
            GaussianMeasureNoiseConfig(noise_multiplier=0.05, kinds=["fedbary.gamma*"])
        )
        return [(noise, np.random.default_rng(3))]

    seq_digest, seq = run(Bus(parties=parties, defenses=defenses()))
    with PoolBus(parties=parties, workers=2, defenses=defenses()) as bus:
        pool_digest, pool = run(bus)
    assert pool_digest == seq_digest
    assert pool.estimates == seq.estimates
    assert pool.history == seq.history
    for c, scores in seq.detection["client"].items():
        assert np.array_equal(pool.detection["client"][c], scores)
    if "barycenter" in seq.outputs:
        assert np.array_equal(pool.outputs["barycenter"], seq.outputs["barycenter"])
