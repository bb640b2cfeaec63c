"""Saved transcripts reload byte for byte, and `testbed attack` refuses a directory whose files
come from different runs (issue: trustworthy by construction, points 3 and 4)."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from testbed.errors import TestbedError
from testbed.exchange.bus import Envelope, Transcript
from testbed.measure import Measure
from testbed.run.execute import execute
from testbed.run.rerun import rerun_attacks
from testbed.run.results import jsonable
from testbed.run.rundir import RunDirLockedError, run_dir_lock
from testbed.run.sweep import expand_cells
from testbed.scenario.loading import load_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _measures(weighted: bool) -> list[Measure]:
    rng = np.random.default_rng(0)
    out = []
    for n in range(1, 1001):
        w = rng.random(n) + 0.01 if weighted else None
        out.append(Measure(rng.normal(size=(n, 2)), None if w is None else w / w.sum()))
    return out


@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "arbitrary"])
def test_every_measure_size_reloads_byte_for_byte(tmp_path, weighted):
    # Prepare: one message per size n = 1..1000 (uniform weights renormalise to other bits for
    # 588 of these sizes if the loader goes through the constructor)
    ms = _measures(weighted)
    tr = Transcript()
    for i, m in enumerate(ms):
        tr._append(
            Envelope.make(seq=i, round=0, sender="a", receiver="server", kind="p.s", payload=m)
        )
    # Execute
    tr.save(tmp_path)
    back = Transcript.load(tmp_path)
    # Assert: the exact bytes, the digests, and read-only arrays
    assert back.digest() == tr.digest()
    for sent, got in zip(tr, back):
        assert got.digest == sent.digest
        assert got.payload.weights.tobytes() == sent.payload.weights.tobytes()
        assert got.payload.support.tobytes() == sent.payload.support.tobytes()
        assert not got.payload.weights.flags.writeable
        with pytest.raises(ValueError):
            got.payload.support.setflags(write=True)


def test_loaded_array_payloads_are_read_only(tmp_path):
    tr = Transcript()
    tr._append(
        Envelope.make(
            seq=0, round=0, sender="a", receiver="b", kind="p.s", payload={"c": np.eye(3)}
        )
    )
    tr.save(tmp_path)
    arr = Transcript.load(tmp_path)[0].payload["c"]
    with pytest.raises(ValueError):
        arr[0, 0] = 5.0


#: shipped scenarios whose round trip stays in the default suite: the small ones, one or more per
#: protocol and attack family (contract_tiny_*, distill_tiny); every other shipped scenario's round
#: trip is in the slow target (`make test-slow`): each runs a full-size protocol and scores its
#: attacks twice (run + re-attack), 20 s to several minutes apiece on two cores
DEFAULT_SUITE = ("contract_tiny", "distill_tiny", "engine_pool")
#: shipped for `testbed bench --scale` only: 1000 clients take minutes and a 5 GB transcript
BENCH_ONLY = ("fedbary_1000_clients",)


def _shipped_cells():
    """One cell per protocol of every shipped scenario (sweeps: the first cell of each)."""
    out = []
    for f in sorted(SCENARIOS.glob("*.yaml")):
        if f.stem in BENCH_ONLY:
            continue
        cells = expand_cells(load_scenario(f))
        picks = {c.scenario.protocol.name: c for c in reversed(cells)}
        for proto, c in sorted(picks.items()):
            marks = [] if f.stem.startswith(DEFAULT_SUITE) else [pytest.mark.slow]
            out.append(pytest.param(f, c.index, id=f"{f.stem}[{proto}]", marks=marks))
    return out


@pytest.mark.parametrize("path, index", _shipped_cells())
def test_shipped_scenario_saves_reloads_and_reattacks_identically(tmp_path, path, index):
    cell = expand_cells(load_scenario(path))[index]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ran = execute(cell.scenario, tmp_path / "run")
        back = Transcript.load(tmp_path / "run")
        rows, _ = rerun_attacks(tmp_path / "run")
    assert back.digest() == ran.results["transcript"]["digest"] == ran.transcript.digest()
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert jsonable(rows) == saved["attacks"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    a, b = base / "a", base / "b"
    sc = load_scenario(SCENARIOS / "contract_tiny.yaml")
    execute(sc, a)
    sc2 = load_scenario(SCENARIOS / "contract_tiny_triangle_wad.yaml")
    execute(sc2, b)
    return a, b


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize(
    "swap, needle",
    [
        (("envelopes.jsonl", "payloads.npz"), "do not belong to this run"),
        (("results.json",), "belongs to another run"),
        (("resolved.yaml",), "does not match config_hash"),
        (("payloads.npz",), "corrupt transcript record|digest mismatch"),
    ],
    ids=["transcript", "results", "resolved", "payloads-only"],
)
def test_attack_refuses_files_from_another_run(tmp_path, two_runs, swap, needle):
    a, b = two_runs
    mixed = _copy(a, tmp_path / "mixed")
    for name in swap:
        shutil.copy(b / name, mixed / name)
    with pytest.raises(TestbedError, match=needle):
        rerun_attacks(mixed)


def test_attack_refuses_a_tampered_payload(tmp_path, two_runs):
    a, _ = two_runs
    d = _copy(a, tmp_path / "t")
    with np.load(d / "payloads.npz") as z:
        arrays = {k: z[k].copy() for k in z.files}
    key = next(k for k in arrays if k.endswith("support"))
    arrays[key][0, 0] += 1e-12
    np.savez(d / "payloads.npz", **arrays)
    with pytest.raises(TestbedError, match="digest mismatch"):
        rerun_attacks(d)


def test_a_second_writer_is_refused_and_a_reader_waits_for_none(tmp_path):
    with run_dir_lock(tmp_path, write=True):
        with pytest.raises(RunDirLockedError, match="another testbed process"):
            with run_dir_lock(tmp_path, write=True):
                pass
        with pytest.raises(RunDirLockedError):
            with run_dir_lock(tmp_path, write=False):
                pass
    with run_dir_lock(tmp_path, write=True):  # released: a later writer gets it
        pass


def test_run_into_a_directory_being_written_is_refused(tmp_path):
    # the lock is an fcntl lock on an open file description, so a second holder in the same
    # process conflicts exactly as a second process would
    sc = load_scenario(SCENARIOS / "contract_tiny.yaml")
    with run_dir_lock(tmp_path / "r", write=True):
        with pytest.raises(RunDirLockedError):
            execute(sc, tmp_path / "r")
