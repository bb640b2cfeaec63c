"""``testbed bench --pairwise``: the process-tree memory reading and a tiny Ray run."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bench.pairwise import PairwiseOptions, bench_pairwise, pairwise_lines, tree_rss


def test_tree_rss_counts_child_processes():
    # Prepare: a child process holding ~200 MiB
    code = (
        "import time; b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(60)"
    )
    alone, n_alone = tree_rss()
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        while True:  # Execute: until the child has touched its memory
            total, n = tree_rss()
            if total - alone > 150 << 20 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        child.kill()
        child.wait()
    # Assert
    assert n == n_alone + 1
    assert total - alone > 150 << 20


@pytest.mark.ray
@pytest.mark.slow
def test_tiny_pairwise_run_on_ray_spills_and_reports(tmp_path):
    pytest.importorskip("ray")
    rows = bench_pairwise(
        PairwiseOptions(clients=[6], pairs=4, rows=8, d=3, iterations=2, spill_threshold=0)
    )
    (r,) = rows
    assert r["pairs_run"] == 4 and r["pairs_total"] == 15
    assert r["spilled_mib"] > 0 and r["envelopes"] > 0 and r["distances_finite"]
    assert r["peak_rss_mib"] >= r["rss_before_mib"] > 0 and r["processes_at_peak"] > 1
    assert r["envelopes_on_disk"] == r["envelopes"] and r["header_file_mib"] > 0
    assert r["server_view_envelopes"] == r["envelopes"]  # the server sees every FedWAD message
    assert "| 6 | 4 / 15 |" in "\n".join(pairwise_lines(rows))


def test_envelope_header_bytes_leaves_out_spilled_payload_data(tmp_path):
    import numpy as np

    from bench.pairwise import envelope_header_bytes
    from testbed.exchange.envelope import Envelope
    from testbed.exchange.transcript import Transcript
    from testbed.measure import Measure

    sizes = []
    for tr in (Transcript(), Transcript(spill_dir=tmp_path, spill_threshold=0)):
        for i in range(20):
            m = Measure(np.random.default_rng(i).normal(size=(10, 64)))
            tr._append(
                Envelope.make(seq=i, round=1, sender="s", receiver=f"c{i}", kind="k", payload=m)
            )
        sizes.append(envelope_header_bytes(tr.envelopes))
    in_memory, spilled = sizes
    assert in_memory - spilled >= 10 * 65 * 8  # the support and weights bytes
    assert 0 < spilled < 4000
