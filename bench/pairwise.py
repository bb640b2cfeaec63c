"""``testbed bench --pairwise``: pairwise FedWAD among N clients on the Ray engine, in bounded
memory, with the peak resident memory of the whole process tree (driver, Ray's own processes
and the actors holding the clients).

For each N, a fresh local Ray cluster receives all N clients (``rows`` points each in dimension
``d``, planted clusters as :func:`bench.data.make_clients`) as party groups, one actor per CPU;
the driver then drops its copy of the data (the protocol only needs the names). The protocol
path is ``fedwad_clustering``'s own (:meth:`FedWADClustering.pair_distances`: one
:class:`protocols.fedwad.FedWAD` run per pair, on the Ray bus, with the seeds the full run would
use), for the first ``pairs`` pairs or all of them (the spectral clustering at the end is
skipped). ``window`` pairs run in lock step, so each step is one batched round trip per actor
instead of one per pair (the distances do not depend on it). The transcript keeps
``spill_threshold`` bytes of payloads in memory and then writes every further envelope to disk
(payload arrays and header, :mod:`testbed.exchange.spill`), so the driver's memory stays bounded whatever
the number of pairs. After the run the server's view (every message) is read back from disk and
hashed inside the measured window.

Resident memory is read from ``/proc`` every ``interval`` seconds over the driver's descendants
and the processes of the Ray session (the sum of RSS, so pages shared between processes, like
Ray's object store, count once per process: an upper bound).
"""

from __future__ import annotations

import gc
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import comb
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PairwiseOptions",
    "bench_pairwise",
    "envelope_header_bytes",
    "pairwise_lines",
    "tree_rss",
]


@dataclass
class PairwiseOptions:
    clients: Sequence[int] = (100, 200, 400, 1000)
    pairs: int | None = 500  # None: every pair
    window: int = 512  # pairs in flight (lock step, one round trip per step)
    progress: bool = False
    rows: int = 20
    d: int = 64
    support_size: int = 5
    iterations: int = 5
    spill_threshold: int = 16 << 20
    interval: float = 0.2
    seed: int = 0
    log: Any = field(default=lambda s: None)


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(root: int | None = None, extra: Sequence[int] = ()) -> tuple[int, int]:
    """(sum of RSS in bytes, number of processes) over ``root`` (default: this process), its
    descendants and the ``extra`` processes."""
    root = os.getpid() if root is None else root
    kids = _children()
    seen, todo = set(), [root, *extra]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo.extend(kids.get(p, ()))
    return sum(_rss(p) for p in seen), len(seen)


class _Sampler:
    """Peak of :func:`tree_rss` sampled in a thread (plus the Ray session's processes)."""

    def __init__(self, interval: float, marker: str | None = None):
        self.interval, self.marker = interval, marker
        self.peak = self.peak_procs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> int:
        extra = ()
        if self.marker:
            from testbed.exchange.engines.ray_bus import session_processes

            extra = session_processes(self.marker)
        rss, n = tree_rss(extra=extra)
        if rss > self.peak:
            self.peak, self.peak_procs = rss, n
        return rss

    def _loop(self):
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self):
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.sample()


def _one(N: int, want: int, opts: PairwiseOptions) -> dict[str, Any]:
    """The first ``want`` pairs of N clients."""
    import protocols  # noqa: F401  (registers the built-ins)
    from bench.data import make_clients
    from protocols.fedwad import FedWADConfig
    from protocols.fedwad_clustering import FedWADClustering, FedWADClusteringConfig
    from testbed.exchange.engines.ray_bus import RayBus
    from testbed.exchange.envelope import SERVER
    from testbed.exchange.transcript import Transcript

    cfg = FedWADClusteringConfig(
        fedwad=FedWADConfig(
            support_size=opts.support_size,
            iterations=opts.iterations,
            init_scale=5.0,
            trace=False,
        )
    )
    proto = FedWADClustering(cfg)
    total = comb(N, 2)
    with tempfile.TemporaryDirectory(prefix="bench-pairwise-") as tmp:
        gc.collect()
        before, _ = tree_rss()
        t0 = time.perf_counter()
        parties = make_clients(N, opts.rows, opts.d, opts.seed)
        transcript = Transcript(spill_dir=tmp, spill_threshold=opts.spill_threshold)
        bus = RayBus(parties=parties, transcript=transcript)
        names = dict.fromkeys(parties)  # the protocol needs the names only
        del parties
        gc.collect()
        ship = time.perf_counter() - t0
        try:
            marker = bus.session.temp_dir if bus.session is not None else None
            driver_start = _rss(os.getpid())
            bar = _bar(want, N) if opts.progress else None
            with _Sampler(opts.interval, marker) as s:
                t1 = time.perf_counter()
                D, done = proto.pair_distances(
                    names,
                    bus,
                    np.random.default_rng(opts.seed),
                    want,
                    window=opts.window,
                    on_pair=bar.update if bar is not None else None,
                )
                sec = time.perf_counter() - t1
                driver_end = _rss(os.getpid())
                if bar is not None:
                    bar.close()
                transcript.close()
                # the server's view, read back from disk (lazily) and hashed
                t2 = time.perf_counter()
                view = transcript.view(SERVER)
                view_digest = view.digest()
                view_seconds = time.perf_counter() - t2
                view_envelopes = len(view.envelopes)
            envelopes, spilled = len(transcript), transcript.spilled_bytes
            payload = transcript.nbytes
            on_disk = transcript.on_disk
            in_memory = envelopes - on_disk
            per_env = envelope_header_bytes(transcript[:in_memory][-1000:])
            header_file = transcript._log.path.stat().st_size if on_disk else 0
        finally:
            bus.close()
        del transcript, bus, view
        gc.collect()
    return {
        "engine": "ray",
        "clients": N,
        "pairs_run": done,
        "pairs_total": total,
        "window": opts.window,
        "rows_per_client": opts.rows,
        "d": opts.d,
        "support_size": opts.support_size,
        "iterations": opts.iterations,
        "spill_threshold_mib": opts.spill_threshold / 2**20,
        "seconds": sec,
        "ship_seconds": ship,
        "seconds_per_pair": sec / max(done, 1),
        "projected_full_hours": sec / max(done, 1) * total / 3600,
        "peak_rss_mib": s.peak / 2**20,
        "processes_at_peak": s.peak_procs,
        "rss_before_mib": before / 2**20,
        "driver_growth_mib": max(driver_end - driver_start, 0) / 2**20,
        "envelopes": envelopes,
        "envelopes_on_disk": on_disk,
        "payload_mib": payload / 2**20,
        "spilled_mib": spilled / 2**20,
        "header_file_mib": header_file / 2**20,
        "driver_bytes_per_envelope": per_env,
        "server_view_envelopes": view_envelopes,
        "server_view_read_seconds": view_seconds,
        "server_view_digest": view_digest,
        "distances_finite": bool(np.isfinite(D[np.triu_indices(N, 1)][:done]).all()),
        "load_average": list(os.getloadavg()),
    }


def _bar(total: int, N: int):
    from tqdm import tqdm

    return tqdm(total=total, desc=f"pairwise N={N}", unit="pair", dynamic_ncols=True)


def _deep_size(x, seen: set[int]) -> int:
    """Bytes of the Python objects reachable from ``x`` (an array's own data buffer counted
    only when it owns it; a view of the spill file's map counts its header only)."""
    import sys
    from collections.abc import Mapping
    from dataclasses import fields, is_dataclass

    if id(x) in seen:
        return 0
    seen.add(id(x))
    if isinstance(x, np.ndarray):
        n = sys.getsizeof(x)  # includes the data only when the array owns it
        base = x.base
        if isinstance(base, (np.ndarray, bytes, bytearray)):  # in memory; a map is not
            n += _deep_size(base, seen)
        return n
    n = sys.getsizeof(x)
    if is_dataclass(x):
        n += sum(_deep_size(getattr(x, f.name), seen) for f in fields(x))
    elif isinstance(x, Mapping):
        n += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in x.items())
    elif isinstance(x, (list, tuple)):
        n += sum(_deep_size(v, seen) for v in x)
    return n


def envelope_header_bytes(envelopes: Sequence[Any]) -> float:
    """Mean in-memory bytes per envelope, without payload data held in the spill file (the
    part of a spilling transcript that still grows with its length)."""
    if not envelopes:
        return 0.0
    return sum(_deep_size(e, set()) for e in envelopes) / len(envelopes)


def bench_pairwise(opts: PairwiseOptions) -> list[dict[str, Any]]:
    """One row per N (ascending); each on its own local Ray cluster."""
    rows = []
    for N in sorted(opts.clients):
        total = comb(N, 2)
        want = total if opts.pairs is None else min(opts.pairs, total)
        opts.log(f"pairwise: N={N}, {want} of {total} pairs on Ray")
        rows.append(_one(N, want, opts))
    return rows


def pairwise_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown section for :func:`bench_pairwise`'s rows."""
    if not rows:
        return []
    r0 = rows[0]
    lines = [
        "## Pairwise FedWAD on Ray, bounded memory",
        "",
        f"{r0['rows_per_client']} points per client, d = {r0['d']}, FedWAD S = "
        f"{r0['support_size']}, K = {r0['iterations']}; {r0['window']} pairs in lock step; the "
        f"transcript keeps {r0['spill_threshold_mib']:.0f} MiB of payloads in memory, then "
        "writes every further envelope (payload and header) to disk. Peak RSS: sum over the "
        "driver, Ray's processes and the actors (/proc, sampled every 0.2 s), an upper bound "
        "(shared pages counted once per process); it includes reading the server's whole view "
        "back from disk.",
        "",
        "| N | pairs run / all | seconds | ms per pair | peak RSS MiB | driver growth MiB "
        "| envelopes | on disk | payload file MiB | header file MiB | server view read (s) "
        "| load average |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['clients']} | {r['pairs_run']} / {r['pairs_total']} | {r['seconds']:.0f} | "
            f"{1000 * r['seconds_per_pair']:.2f} | {r['peak_rss_mib']:.0f} | "
            f"{r['driver_growth_mib']:.0f} | {r['envelopes']} | {r['envelopes_on_disk']} | "
            f"{r['spilled_mib']:.0f} | {r['header_file_mib']:.0f} | "
            f"{r['server_view_read_seconds']:.1f} | "
            f"{'/'.join(f'{x:.1f}' for x in r['load_average'])} |"
        )
    return [*lines, ""]
