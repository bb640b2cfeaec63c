"""The in-process engine with worker processes (``engine_params: {workers: k}``): parties live in
the workers, local computations run there at once, and results and transcripts are bit-identical
to the plain bus for the same seed."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from bench.data import make_clients
from defenses.gaussian_measure_noise import GaussianMeasureNoise, GaussianMeasureNoiseConfig
from protocols.fedbary import FedBary, FedBaryConfig
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
    with pytest.raises(TestbedError, match="the bus is closed"):  # no workers left
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


# ---------------------------------------------------------------- a hostile or buggy protocol
# The protocol under test is untrusted code: the functions it runs at the parties may fail in
# any way, and it may catch the error and go on. Each test fails on the engine before this
# change (docs/reference/trust.md, "The protocol under test on the worker-process engine").


def _name(party):
    return party.name


def _die(party, bad):
    if party.name == bad:
        os._exit(3)
    return party.name


def _fork_sleeper(party, pidfile, then_die):
    """Fork a process that outlives this call (it inherits the worker's pipes and its copy of
    the party's data), write its pid, and (``then_die``) let the worker die."""
    pid = os.fork()
    if pid == 0:
        import time

        time.sleep(600)
        os._exit(0)
    with open(pidfile, "w") as f:
        f.write(str(pid))
    if then_die:
        os._exit(4)
    return pid


def _gone(pid: int, seconds: float = 10.0) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie until init reaps it: gone all the same
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:  # reaped between the two looks
            return True
        time.sleep(0.05)
    return False


def test_a_call_that_cannot_be_sent_leaves_no_reply_for_the_next_call(parties):
    with PoolBus(parties=parties, workers=2) as bus:
        with pytest.raises(
            TestbedError, match="was given what cannot be sent to the worker process"
        ):
            bus.local_map([("a", _name), ("b", _where, lambda: 1)])  # b's argument: no pickle
        assert bus.local("a", _name) == "a"  # not the answer to the call above
        assert bus.local_map([("b", _name), ("a", _name)]) == ["b", "a"]


def test_a_dead_worker_fails_its_parties_calls_and_no_reply_is_left_behind(parties):
    with PoolBus(parties=parties, workers=2) as bus:
        # b and d live in worker 1, a and c in worker 0; worker 1 dies in b's call
        with pytest.raises(TestbedError, match=r"holding 'b', 'd' died \(exit code 3\)"):
            bus.local_map([("b", _die, "b"), ("a", _where, 1.0)])
        assert bus.local("a", _name) == "a"  # a's reply to the failed call was read, not kept
        assert bus.local_map([("c", _name), ("a", _name)]) == ["c", "a"]
        for p in "bd":
            with pytest.raises(TestbedError, match=f"holding party '{p}' died"):
                bus.local(p, _name)
        assert bus.map_pure([(_square, 2), (_square, 3), (_square, 4)]) == [4, 9, 16]


def test_a_worker_that_dies_leaving_a_forked_process_is_seen_dead_and_its_group_killed(
    parties, tmp_path
):
    pidfile = tmp_path / "pid"
    with PoolBus(parties=parties, workers=2) as bus:
        # the forked process keeps the worker's pipe and sentinel open: only the worker's
        # own exit status (a pidfd) says that it died; before, the read waited for ever
        with pytest.raises(TestbedError, match=r"holding 'a', 'c' died \(exit code 4\)"):
            bus.local("a", _fork_sleeper, str(pidfile), True)
        assert _gone(int(pidfile.read_text()))  # it held a copy of a's data
        assert bus.local("b", _name) == "b"


def test_closing_the_bus_ends_what_a_party_forked(parties, tmp_path):
    pidfile = tmp_path / "pid"
    with PoolBus(parties=parties, workers=2) as bus:
        pid = bus.local("b", _fork_sleeper, str(pidfile), False)
        assert not _gone(pid, 0.2)
    assert _gone(pid)


def _pot_loaded(party):
    import sys

    return "ot" in sys.modules


def test_workers_are_forked_with_pot_loaded():
    """The driver loads POT (and torch) before forking the workers, so they share it instead of
    each importing it at its first solve: in a fresh interpreter, a worker finds it loaded
    before any solve ran."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from testbed.data.datasets import PartyData\n"
        "from testbed.exchange.engines.pool import PoolBus\n"
        "import numpy as np\n"
        "from tests.test_engine_pool import _pot_loaded\n"
        "assert 'ot' not in sys.modules\n"
        "ps = {p: PartyData(p, np.zeros((3, 2)), None) for p in ('a', 'b')}\n"
        "with PoolBus(parties=ps, workers=2) as bus:\n"
        "    print(bus.local_map([(p, _pot_loaded) for p in ps]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[True, True]", out.stdout


def _count_trim(path):
    def trim(pad):
        with open(path, "a") as fh:
            fh.write(f"{os.getpid()}\n")

    return trim


def test_a_worker_hands_its_freed_heap_back_after_each_batch(tmp_path, monkeypatch):
    """A worker trims its heap (glibc's ``malloc_trim``) after each batch: a batch's arguments
    and results (a quarter of a gigabyte a round at 1000 FedBary clients) are otherwise kept in
    the worker's heap for the next one, and counted in its resident memory."""
    import testbed.exchange.engines.pool as pool

    log = tmp_path / "trims"
    monkeypatch.setattr(pool, "_malloc_trim", lambda: _count_trim(log))  # the forks inherit it
    ps = {p: PartyData(p, np.zeros((3, 2)), None) for p in ("a", "b")}
    with PoolBus(parties=ps, workers=2) as bus:
        before = log.read_text().split() if log.exists() else []
        bus.local_map([(p, _name) for p in ps])
        bus.local_map([(p, _name) for p in ps])
        deadline = time.monotonic() + 10  # a worker trims after it sent its reply
        while len(pids := log.read_text().split()[len(before) :]) < 4:
            assert time.monotonic() < deadline, pids
            time.sleep(0.01)
    assert len(set(pids)) == 2 and len(pids) == 4, pids  # each worker, after each of its batches
