"""A spilled transcript's files are data, never code: a header is JSON behind a keyed hash, a
payload is re-hashed when it is read back; an edit of either fails with one line, and a pickle
planted in the header file never runs."""

from __future__ import annotations

import json
import pickle
import struct

import numpy as np
import pytest

from testbed.errors import TestbedError
from testbed.exchange.bus import Bus, Transcript
from testbed.exchange.spill import HEADER_NAME, SPILL_NAME
from testbed.exchange.transcript import read_spilled


def _spilled(tmp_path, n=4):
    tr = Transcript(spill_dir=tmp_path, spill_threshold=0)
    bus = Bus(transcript=tr)
    g = np.random.default_rng(1)
    for i in range(n):
        bus.send(
            "alice", "server", "p.x", {"rows": g.normal(size=(5, 3))}, round=i, meta={"t": 0.5}
        )
    tr.close()
    assert tr.on_disk == n
    return tr


def _rewrite_records(tmp_path, fn):
    """Apply ``fn(k, record) -> bytes`` to every header record; rewrite the log and its index."""
    path = tmp_path / HEADER_NAME
    idx = path.with_name(path.name + ".idx")
    data, raw = path.read_bytes(), idx.read_bytes()
    entries = [struct.unpack_from("<qq", raw, 16 * k) for k in range(len(raw) // 16)]
    out, index = b"", b""
    for k, (off, n) in enumerate(entries):
        rec = fn(k, data[off : off + n])
        index += struct.pack("<qq", len(out), len(rec))
        out += rec
    path.write_bytes(out)
    idx.write_bytes(index)


class _Bomb:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))  # unpickling creates the marker file


def test_a_pickle_in_the_header_file_never_runs(tmp_path):
    tr = _spilled(tmp_path)
    marker = tmp_path / "pwned"
    _rewrite_records(tmp_path, lambda k, rec: pickle.dumps(_Bomb(marker)) if k == 1 else rec)
    with pytest.raises(TestbedError, match=r"header of message #1 .*changed after it was written"):
        tr[1]
    with pytest.raises(TestbedError, match="message #1"):
        tr.digest()
    with pytest.raises(TestbedError, match=r"header of message #1 is not a valid header"):
        list(read_spilled(tmp_path)[1])
    assert not marker.exists()  # nothing was unpickled


def test_an_edited_header_is_refused(tmp_path):
    tr = _spilled(tmp_path)
    before = tr.digest()

    def edit(k, rec):
        if k != 2:
            return rec
        h = json.loads(rec[32:])
        h["meta"]["t"] = 0.999
        return rec[:32] + json.dumps(h, sort_keys=True, separators=(",", ":")).encode()

    _rewrite_records(tmp_path, edit)
    with pytest.raises(TestbedError, match=r"header of message #2 was changed"):
        tr[2]
    with pytest.raises(TestbedError, match=r"header of message #2 was changed"):
        tr.view("server")
    # without the run's key (testbed verify): the header parses, but its record differs
    n, envs = read_spilled(tmp_path)
    from testbed.exchange.transcript import records_digest

    assert records_digest((e.record() for e in envs), n) != before


def test_an_edited_spilled_payload_is_refused(tmp_path):
    tr = _spilled(tmp_path)
    first = tr[0].payload["rows"]
    raw = bytearray((tmp_path / SPILL_NAME).read_bytes())
    raw[0:8] = struct.pack("<d", first[0, 0] + 1000.0)
    (tmp_path / SPILL_NAME).write_bytes(bytes(raw))
    tr._spill._map = None  # map the file again (as a fresh reader would)
    with pytest.raises(TestbedError, match=r"payload of message #0 changed on disk"):
        tr[0]
    with pytest.raises(TestbedError, match=r"payload of message #0 changed on disk"):
        list(read_spilled(tmp_path)[1])


def test_unchanged_spill_files_read_back(tmp_path):
    tr = _spilled(tmp_path)
    n, envs = read_spilled(tmp_path)
    back = list(envs)
    assert n == len(tr) == len(back)
    assert [e.record() for e in back] == [e.record() for e in tr]
    assert tr.spill_digest() is not None
