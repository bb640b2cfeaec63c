"""Engine selection: the in-process default, engine errors, the config hash ignores the engine."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from testbed.data.datasets import PartyData
from testbed.errors import ScenarioError, TestbedError
from testbed.exchange.bus import Bus
from testbed.exchange.engines import open_bus
from testbed.scenario.loading import load_scenario, parse_scenario
from testbed.scenario.resolve import config_hash, resolve
from testbed.threads import blas_threads


def _sq(party, k):
    return float(k * np.sum(party.X**2))


def test_inprocess_bus_is_the_plain_bus_and_local_map_keeps_order():
    parties = {p: PartyData(p, np.full((2, 2), i + 1.0)) for i, p in enumerate("abc")}
    with open_bus("inprocess", parties=parties) as bus:
        assert type(bus) is Bus
        got = bus.local_map([("c", _sq, 1.0), ("a", _sq, 2.0)])
    np.testing.assert_allclose(got, [36.0, 8.0])


def test_inprocess_engine_takes_only_workers():
    with pytest.raises(ScenarioError, match="engine_params"):
        with open_bus("inprocess", {"actors": 2}):
            pass


def test_unknown_engine_is_named():
    with pytest.raises(ScenarioError, match="unknown engine 'spark'"):
        with open_bus("spark"):
            pass


def test_ray_missing_gives_one_line_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(TestbedError, match=r"pip install '\.\[ray\]'"):
        with open_bus("ray", parties={}):
            pass


def test_engine_does_not_change_the_config_hash(scenarios_dir):
    path = scenarios_dir / "contract_tiny.yaml"
    text = path.read_text()
    sc = load_scenario(path)
    sc_ray = parse_scenario(text + "engine: ray\nengine_params: {actors: 2}\n", "x.yaml")
    assert sc_ray.engine == "ray"
    assert config_hash(resolve(sc_ray)) == config_hash(resolve(sc))


def test_bad_engine_is_rejected_at_load_time(scenarios_dir):
    text = (scenarios_dir / "contract_tiny.yaml").read_text() + "engine: dask\n"
    with pytest.raises(ScenarioError, match="engine"):
        parse_scenario(text, "x.yaml")


def test_blas_threads_env(monkeypatch):
    monkeypatch.setenv("OT_TESTBED_BLAS_THREADS", "0")
    assert blas_threads() is None
    monkeypatch.setenv("OT_TESTBED_BLAS_THREADS", "2")
    assert blas_threads() == 2
    monkeypatch.setenv("OT_TESTBED_BLAS_THREADS", "two")
    with pytest.raises(TestbedError, match="OT_TESTBED_BLAS_THREADS"):
        blas_threads()


def test_bad_engine_params_fail_at_load_time_with_the_line(scenarios_dir):
    text = (scenarios_dir / "contract_tiny.yaml").read_text()
    with pytest.raises(ScenarioError, match=r"x\.yaml:\d+: engine_params\.actors"):
        parse_scenario(text + "engine: ray\nengine_params: {actors: 0}\n", "x.yaml")
    with pytest.raises(ScenarioError, match=r"x\.yaml:\d+: engine_params\.actors"):
        parse_scenario(text + "engine_params: {actors: 2}\n", "x.yaml")


def test_workers_auto_is_the_default_and_starts_workers_only_for_large_runs(monkeypatch):
    from testbed.exchange.engines.pool import (
        AUTO_MIN_ROWS,
        IN_SWEEP_WORKER,
        InProcessEngineConfig,
        PoolBus,
        resolve_workers,
    )

    monkeypatch.delenv(IN_SWEEP_WORKER, raising=False)
    assert InProcessEngineConfig().workers == "auto"
    small = {p: PartyData(p, np.zeros((10, 2))) for p in "abc"}
    per = AUTO_MIN_ROWS // 2
    large = {p: PartyData(p, np.zeros((per, 1))) for p in "abc"}
    cpus = len(os.sched_getaffinity(0))
    assert resolve_workers("auto", small) == 1
    assert resolve_workers("auto", large) == min(cpus, 3)
    assert resolve_workers(5, small) == 3  # never more workers than parties
    with open_bus("inprocess", parties=small) as bus:
        assert type(bus) is Bus
    if cpus > 1:
        with open_bus("inprocess", parties=large) as bus:
            assert isinstance(bus, PoolBus)
    # in a --jobs sweep's worker the cores are taken: auto is one worker
    monkeypatch.setenv(IN_SWEEP_WORKER, "1")
    assert resolve_workers("auto", large) == 1
    with pytest.raises(ScenarioError, match="engine_params.workers"):
        with open_bus("inprocess", {"workers": 0}):
            pass
