"""Ray engine: same transcript and results as the in-process bus, and nothing left behind.

Not in the default suite (marker ``ray``; needs ``pip install '.[ray]'``): ``make test-ray``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from protocols.fedwad import FedWAD  # noqa: E402
from testbed.data.datasets import PartyData  # noqa: E402
from testbed.errors import DataError, PrivacyGuardError, TestbedError  # noqa: E402
from testbed.exchange.bus import Bus, PrivacyGuard  # noqa: E402
from testbed.exchange.engines import open_bus  # noqa: E402
from testbed.exchange.engines.ray_bus import RayBus, RaySession, session_processes  # noqa: E402
from testbed.run.execute import execute  # noqa: E402
from testbed.scenario.loading import load_scenario  # noqa: E402

pytestmark = pytest.mark.ray


def _short_root() -> str:
    # Ray's Unix sockets live under the session folder: keep the path short
    return tempfile.mkdtemp(prefix="rtt", dir="/tmp")


def _assert_clean(root: str) -> None:
    assert session_processes(root) == []
    assert list(Path(root).iterdir()) == []


@pytest.fixture(scope="module")
def cluster():
    """One local cluster shared by the tests that do not test the lifecycle itself."""
    root = _short_root()
    session = RaySession(num_cpus=2, temp_root=root)
    try:
        yield session
    finally:
        session.stop()
        _assert_clean(root)
        Path(root).rmdir()


def _parties(k=4, n=30, d=3, seed=0):
    g = np.random.default_rng(seed)
    return {f"c{i}": PartyData(f"c{i}", g.normal(i, 1.0, size=(n, d))) for i in range(k)}


def _sq_norm(party, scale):
    return float(scale * np.sum(party.X**2))


def _fail(party):
    raise DataError(f"bad data at {party.name}")


def _leak(party):
    return party.X[:2].copy()


def test_scenario_on_ray_equals_in_process(tmp_path, scenarios_dir):
    # Prepare: the same scenario on both engines; Ray owns its cluster in a fresh folder
    root = _short_root()
    sc = load_scenario(scenarios_dir / "fedwad_gaussians.yaml")
    sc_ray = sc.model_validate(
        {**sc.model_dump(), "engine": "ray", "engine_params": {"temp_root": root, "actors": 2}}
    )
    sc_ray._base_dir = sc._base_dir
    # Execute
    a = execute(sc, out_dir=tmp_path / "inprocess")
    b = execute(sc_ray, out_dir=tmp_path / "ray")
    # Assert: byte-identical transcript and results; the cluster and its files are gone
    assert len(a.transcript) == len(b.transcript) > 0
    assert a.transcript.digest() == b.transcript.digest()
    for name in ("results.json", "envelopes.jsonl", "payloads.npz"):
        assert (tmp_path / "inprocess" / name).read_bytes() == (
            tmp_path / "ray" / name
        ).read_bytes()
    assert not ray.is_initialized()
    _assert_clean(root)
    Path(root).rmdir()


def test_protocol_transcript_equal_across_seeds_and_actor_counts(cluster):
    parties = _parties(k=2, n=40)
    for seed in (0, 1):
        for actors in (1, 2):
            proto = FedWAD.from_params({"support_size": 5, "iterations": 3, "trace": True})
            ref_bus = Bus(parties=parties)
            ref = proto.run(parties, ref_bus, np.random.default_rng(seed))
            with open_bus("ray", {"actors": actors}, parties=parties) as bus:
                got = proto.run(parties, bus, np.random.default_rng(seed))
            assert bus.transcript.digest() == ref_bus.transcript.digest()
            assert got.estimates == ref.estimates
            assert got.history == ref.history


def test_local_runs_at_the_actor_and_local_map_keeps_order(cluster):
    parties = _parties(k=5)
    calls = [(p, _sq_norm, 2.0) for p in reversed(list(parties))]
    expected = Bus(parties=parties).local_map(calls)
    with RayBus(parties=parties) as bus:
        assert bus._parties == {}  # the driver holds no private data
        assert sorted(bus.party_names) == sorted(parties)
        np.testing.assert_allclose(bus.local_map(calls), expected, rtol=0, atol=0)
        np.testing.assert_allclose(bus.local("c3", _sq_norm, 1.0), expected[1] / 2, rtol=1e-15)


def test_local_map_batches_per_actor_and_raises_the_first_failure(cluster):
    parties = _parties(k=4)
    with RayBus(parties=parties) as bus:
        calls = [("c2", _sq_norm, 1.0), ("c1", _fail), ("c3", _fail), ("c0", _sq_norm, 1.0)]
        with pytest.raises(DataError, match="bad data at c1"):  # the first in call order
            bus.local_map(calls)
        ok = [(p, _sq_norm, float(i)) for i, p in enumerate(list(parties) * 50)]
        assert bus.local_map(ok) == Bus(parties=parties).local_map(ok)


def test_pairs_in_lock_step_on_ray_equal_the_in_process_run(cluster):
    from protocols.fedwad import FedWADConfig
    from protocols.fedwad_clustering import FedWADClustering, FedWADClusteringConfig

    parties = _parties(k=6, n=12)
    cfg = FedWADClusteringConfig(
        fedwad=FedWADConfig(support_size=3, iterations=2, trace=False), n_clusters=2
    )
    ref_bus = Bus(parties=parties)
    D_seq, _ = FedWADClustering(cfg).pair_distances(parties, ref_bus, np.random.default_rng(1))
    lock_bus = Bus(parties=parties)
    D_lock, _ = FedWADClustering(cfg).pair_distances(
        parties, lock_bus, np.random.default_rng(1), window=4
    )
    with RayBus(parties=parties) as bus:
        D_ray, n = FedWADClustering(cfg).pair_distances(
            dict.fromkeys(parties), bus, np.random.default_rng(1), window=4
        )
    assert n == 15
    np.testing.assert_array_equal(D_ray, D_seq)
    assert bus.transcript.digest() == lock_bus.transcript.digest()


def test_errors_raised_at_a_party_keep_their_type(cluster):
    with RayBus(parties=_parties(k=2)) as bus:
        with pytest.raises(DataError, match="bad data at c1"):
            bus.local("c1", _fail)
        with pytest.raises(TestbedError, match="no party 'zed'"):
            bus.local("zed", _sq_norm, 1.0)


def test_guard_and_transcript_stay_in_the_driver(cluster):
    parties = _parties(k=2)
    guard = PrivacyGuard({p: d.X for p, d in parties.items()})
    with RayBus(guard=guard, parties=parties) as bus:
        rows = bus.local("c0", _leak)
        bus.send("c0", "server", "test.leak", rows)
        with pytest.raises(PrivacyGuardError, match="private row of 'c0'"):
            bus.flush()
        assert len(bus.transcript) == 0
        env = bus.send("c0", "server", "test.norm", bus.local("c0", _sq_norm, 1.0))
        assert len(bus.transcript) == 1 and env.payload > 0


def test_bad_engine_params_name_the_field():
    with pytest.raises(TestbedError, match="engine_params.actors"):
        with open_bus("ray", {"actors": 0}, parties=_parties(k=2)):
            pass
