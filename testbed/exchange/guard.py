"""The privacy guard: nothing a protocol sends or releases may carry a party's private row, or a
near-copy of one.

The testbed, not the protocol, says which rows are private: every party's rows, except rows of
data the scenario marks public (:func:`testbed.run.exchange.world_guard`). The guard checks
every message (payload and ``meta``) on the bus and everything the protocol releases at the end
of its run (estimates, history, outputs, diagnostics, detection scores): a leak is a leak
whichever way it leaves.

A window of ``d`` numbers is a *near-copy* of a private row ``x`` of party ``p`` when it lies
within ``rel_tol x median_i ||x_i||`` of it, the median taken over ``p``'s private rows, so the
threshold follows the data's scale (default ``rel_tol = 1e-6``). Rows within that threshold of
the origin are not guarded (a run of ``d`` zeros is in every sparse payload and says nothing).

What is read as rows, wherever it sits in a payload or in ``meta`` (nested mappings, lists,
numbers, strings of numbers, bytes, Python integers wider than 64 bits, objects' attributes):

- every array, whatever its dtype (cast to float64; complex arrays as their real and imaginary
  parts; integer arrays also against the private rows truncated to integers, which catches
  ``X.astype(int)``, for the rows that truncation moves by at most half the truncated row's
  norm and whose truncation has at least 16 bits under a prior favouring small integers
  (:func:`~testbed.exchange.guard_index.integer_bits`): a row of small values truncates to a
  few small integers that any label or count vector holds) and its shape: along each axis in
  turn, every window of ``d`` consecutive values at *every* offset (rows, rows inside wider
  rows, transposed blocks inside 3-D arrays, flattened blocks);
- the same array's raw bytes: read as float64 (``X.view(np.uint8)``, ``X.view(np.int64)``,
  ``X.view(np.complex128)`` give back the rows, then the near-copy rule applies), and searched
  for an exact copy of a private row's bytes at every byte offset (a shifted reinterpretation);
- all loose numbers of a payload or of ``meta`` (and short lists of them), in order, as one
  vector: a row split into pieces across keys is read whole. A window of it (or of the numbers
  written in a string) made only of *public numbers* (``public_numbers``: the testbed passes
  the numbers of the scenario's protocol and defense params, the data's dimension and the number
  of parties) is not a finding: such a message is fixed by the public configuration, whatever
  the private rows (an announcement ``{support_size: 4, dim: 2}`` holds the window (4, 2), a row
  of many a small-integer data set). Each such match is counted in the summary
  (``public_number_matches``), never dropped in silence.

Search: one index over every private row of the run (:mod:`testbed.exchange.guard_index`),
built once. All readings of a payload (or of its ``meta``) are joined into one vector of
numbers and one buffer of bytes, each searched once (windows may not straddle two readings),
at a cost of a few passes over every k-th number and 8-byte word (k = 8 and 4 for dense data,
smaller for rows full of common runs), whatever the number of parties. A payload already
found clean (same digest) is not searched again.

``mode="stop"`` raises :class:`~testbed.errors.PrivacyGuardError` naming sender, receiver, kind
and round; ``mode="record"`` lets the run go on and keeps each violation as a finding.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from testbed.errors import PrivacyGuardError
from testbed.exchange.guard_finding import RELEASE, GuardFinding
from testbed.exchange.guard_index import WidthIndex, join_pieces, search_joined
from testbed.exchange.guard_readings import mask_public_window, read_pieces, readings
from testbed.exchange.guard_rows import guarded_rows
from testbed.exchange.payload import payload_digest

__all__ = ["RELEASE", "GuardFinding", "PrivacyGuard", "readings"]

_MAX_FINDINGS = 100
_MAX_PUBLIC_EXAMPLES = 5
_NO_PARTIES: frozenset[str] = frozenset()  # the cache key of a check that ignores no party


class _Batch:
    """One batch on its way through :meth:`PrivacyGuard.submit` and :meth:`~PrivacyGuard.settle`:
    where it is searched (``worker`` and its batch id ``bid``, or here: ``worker`` None) and,
    once answered, whether it is clean, the windows compared and the payloads' digests."""

    __slots__ = ("envs", "extra", "worker", "bid", "clean", "rows", "digests")

    def __init__(self, envs: Sequence[Any], extra: Sequence[tuple[str, Any]] = ()):
        self.envs = list(envs)
        self.extra = list(extra)  # (path, array) readings searched with the batch (released values)
        self.worker: Any = None
        self.bid = 0
        self.clean = False
        self.rows = 0
        self.digests: list[str] = []


# ----------------------------------------------------------------------------- the guard
class PrivacyGuard:
    """Refuses (or records) any message or released value that carries a private row or a
    near-copy of one.

    Parameters
    ----------
    private : mapping party -> (n, d) array
        Each party's private rows (the testbed's choice: :func:`testbed.run.exchange.
        world_guard` builds it from the World).
    exempt : arrays, optional
        Rows of data the scenario marks public: private rows within the threshold of one are not
        guarded (e.g. a transfer set the server sends, which overlaps a client's rows).
    rel_tol : float
        Threshold relative to the median private row norm of each party.
    mode : ``"stop"`` or ``"record"``
    worker : bool, optional
        Search the bus's batches on the guard's worker process
        (:mod:`testbed.exchange.guard_worker`): None (default) where it is enabled, True
        wherever the platform allows, False never.
    public_numbers : floats, optional
        Numbers of the public configuration: a window of a message's loose numbers made only of
        them is counted, not a finding (see the module docstring).
    """

    def __init__(
        self,
        private: Mapping[str, np.ndarray],
        exempt: Sequence[np.ndarray] | None = None,
        rel_tol: float = 1e-6,
        mode: str = "stop",
        worker: bool | None = None,
        public_numbers: Iterable[float] = (),
    ):
        if mode not in ("stop", "record"):
            raise ValueError(f"guard mode must be 'stop' or 'record', got {mode!r}")
        self.rel_tol = float(rel_tol)
        self._thresholds: dict[str, float] = {}
        parties = list(private)
        # which rows are guarded and each party's threshold: cheap, known at once; the index
        # over them is what takes time (built in this process only when it checks here)
        rows = self._private_rows(dict(private), list(exempt or ()))
        self._setup(parties, rows, mode, worker)
        nums = np.asarray(list(public_numbers), dtype=np.float64).reshape(-1)
        self._public = np.unique(nums[np.isfinite(nums)])

    @classmethod
    def from_rows(cls, rows: Mapping[int, tuple], parties: Sequence[str]) -> PrivacyGuard:
        """A guard over rows already chosen (per width: rows, owner index into ``parties``,
        threshold): the worker process's copy of a guard (:mod:`testbed.exchange.guard_worker`),
        which builds the same index and so finds the same things."""
        self = cls.__new__(cls)
        self.rel_tol, self._thresholds = float("nan"), {}
        self._setup(list(parties), dict(rows), "record", worker=False)
        self._public = np.zeros(0)  # its answers are checked again message by message (find)
        return self

    def _setup(self, parties, rows, mode, worker) -> None:
        self.mode = mode
        self.findings: list[GuardFinding] = []
        self.violations = 0
        self.public_matches: list[dict[str, Any]] = []  # windows of public numbers (find)
        self.public_match_count = 0
        self._far: float | None = None  # the value that masks a public window (_public_window)
        self.rows_checked = 0  # windows of d numbers compared with the index
        self.messages_checked = 0
        self.seconds = 0.0  # time spent checking (not in summary(): results stay seed-determined)
        self.build_seconds = 0.0  # the index's own build time (on its thread)
        self._parties = parties
        self._rows = rows
        self._clean: set[tuple[str, frozenset]] = set()
        self._index: dict[int, WidthIndex] | None = None
        self._failed: BaseException | None = None
        self._builder: threading.Thread | None = None
        self._worker, self._gid = None, None
        self._tell_worker: list[str] = []  # clean digests the worker has not heard of yet
        self._out: set[int] = set()  # batches on the worker not yet settled
        if worker is not False and rows:
            from testbed.exchange import guard_worker  # lazy: validate imports guard

            w = guard_worker.shared_worker(force=bool(worker))
            if w is not None:
                try:
                    self._gid, self._worker = w.load(rows, parties), w
                except guard_worker.WorkerError:
                    pass
        if self._worker is None or not self._worker.ready():
            self._start_build()  # checks begin here, while the worker starts

    def _start_build(self) -> None:
        # the index builds on its own thread while the protocol starts (numpy releases the
        # GIL); the first check here waits for it, inside the guard's timed seconds
        self._builder = threading.Thread(
            target=self._build, name="privacy-guard-index", daemon=True
        )
        self._builder.start()

    def _build(self) -> None:
        t0 = time.perf_counter()
        try:
            self._index = {d: WidthIndex(*parts) for d, parts in self._rows.items()}
        except BaseException as exc:  # raised again by the first use
            self._failed = exc
        self.build_seconds = time.perf_counter() - t0

    @property
    def _widths(self) -> dict[int, WidthIndex]:
        if self._index is None:
            if self._builder is None:
                self._start_build()
            self._builder.join()
            if self._failed is not None:
                raise self._failed
        return self._index

    @property
    def thresholds(self) -> dict[str, float]:
        """Each party's threshold: ``rel_tol`` x the median norm of its private rows."""
        return self._thresholds

    def _private_rows(self, private, exempt) -> dict[int, tuple]:
        """Per width: the guarded rows, owners and thresholds (:func:`guarded_rows`); fills
        :attr:`thresholds` in party order."""
        rows, thresholds = guarded_rows(private, exempt, self.rel_tol)
        self._thresholds.update(thresholds)
        return rows

    @classmethod
    def for_parties(
        cls,
        parties: Mapping[str, Any],
        public: Iterable[str] = (),
        rel_tol: float = 1e-6,
        mode: str = "stop",
        public_numbers: Iterable[float] = (),
    ) -> PrivacyGuard:
        """The testbed's rule: every party's rows (``parties``: name -> data with ``X``) are
        private, except those of the ``public`` parties, which also exempt equal rows of the
        others. ``public_numbers``: see the class."""
        public = set(public)
        return cls(
            {p: d.X for p, d in parties.items() if p not in public},
            exempt=[d.X for p, d in parties.items() if p in public],
            rel_tol=rel_tol,
            mode=mode,
            public_numbers=public_numbers,
        )

    @property
    def rows_indexed(self) -> int:
        return sum(len(parts[0]) for parts in self._rows.values())

    def close(self) -> None:
        """Let the worker forget this guard's index and the answers to batches never settled
        (a stopped run's), the guard still checking in process."""
        w, self._worker = self._worker, None
        if w is not None:
            w.discard(self._out)
            w.drop(self._gid)
        self._out = set()

    # -- searching
    def _skip(self, ignore: Iterable[str]) -> np.ndarray | None:
        ignore = set(ignore)
        if not ignore:
            return None
        return np.array([p in ignore for p in self._parties], dtype=bool)

    def _find_in(self, arrays, skip) -> tuple | None:
        """``(party, path, start, distance)`` of the first near-copy among ``(path, array)``
        leaves: the earliest reading with one (for a reading, the first width, values before
        their truncation), the earliest window in it."""
        values, raw = read_pieces(arrays)
        if not values and not raw:
            return None
        joined = join_pieces(values, False) if values else None
        if (
            joined is not None
            and len(raw) == len(values)
            and all(r[2] is v[2] for r, v in zip(raw, values))
        ):  # every reading is float64: its bytes are the values' bytes
            raw_joined = (joined[0].view(np.uint8), 8 * joined[1])
        else:
            raw_joined = join_pieces(raw, True) if raw else None
        ints = [p for p in values if p[3]]
        int_joined = join_pieces(ints, False) if ints else None
        found = []
        sizes = np.array([p[2].size for p in values], dtype=np.int64)
        for wi, w in enumerate(self._widths.values()):
            self.rows_checked += int(np.maximum(sizes - (w.values.d - 1), 0).sum())
            searches = [(0, w.values, joined, values), (2, w.raw, raw_joined, raw)]
            if ints:
                searches.append((1, w.trunc, int_joined, ints))
            for kind, index, vec, pieces in searches:
                if vec is None:
                    continue
                hit = search_joined(index, *vec, pieces, skip)
                if hit is not None:
                    piece, start, row, dist = hit
                    found.append(((piece[0], wi, kind), index, piece[1], start, row, dist))
        if not found:
            return None
        _, index, path, start, row, dist = min(found, key=lambda h: h[0])
        return self._parties[int(index.owner[row])], path, start, dist

    def find(self, payload: Any, meta: Mapping[str, Any] | None = None, ignore=()):
        """``(party, path, start, distance)`` of the first near-copy in a payload or its meta,
        else None. ``start`` is where the window begins in the reading named by ``path``
        (values along an axis, or bytes). Rows of parties in ``ignore`` are not looked for."""
        if not self._rows:
            return None
        skip = self._skip(ignore)
        sources = [(payload, "")] + ([(meta, "meta/")] if meta else [])
        for obj, prefix in sources:
            leaves = list(readings(obj, prefix))
            hit = self._find_in(leaves, skip)
            while hit is not None and self._public_window(leaves, f"{prefix}numbers", hit):
                hit = self._find_in(leaves, skip)  # the window is masked: the next one
            if hit is not None:
                return hit
        return None

    def _public_window(self, leaves: list, numbers: str, hit: tuple) -> bool:
        """Whether ``hit`` is a window of public numbers among the loose numbers (reading
        ``numbers``) or the numbers of a string; if so it is counted and masked in ``leaves``
        (:func:`~testbed.exchange.guard_readings.mask_public_window`)."""
        widths = list(self._rows)
        if len(widths) != 1 or not self._public.size:  # one width: masking hides no other
            return False
        if self._far is None:  # once: |far - x| > every threshold, for every private row
            self._far = 2.0 * float(np.abs(self._rows[widths[0]][0]).max()) + 1.0
        party, where, start, _ = hit
        got = mask_public_window(leaves, numbers, where, start, widths[0], self._public, self._far)
        if got is None:
            return False
        self.public_match_count += 1
        if len(self.public_matches) < _MAX_PUBLIC_EXAMPLES:
            self.public_matches.append(
                {"party": party, "path": got[0], "values": [float(v) for v in got[1]]}
            )
        return True

    # -- checking
    def _finding(self, hit, seq, round, sender, receiver, kind) -> GuardFinding:
        party, path, row, dist = hit
        return GuardFinding(
            seq, round, sender, receiver, kind, party, path, row, dist, self.thresholds[party]
        )

    def _found(self, finding: GuardFinding) -> None:
        if self.mode == "stop":
            raise PrivacyGuardError(finding.line())
        self.violations += 1
        if len(self.findings) < _MAX_FINDINGS:
            self.findings.append(finding)

    def finding(self, env, ignore=()) -> GuardFinding | None:
        """The first near-copy in one envelope (payload, then meta) of a private row of a party
        not in ``ignore``, or None; nothing is raised or recorded. A payload found clean is
        remembered by its digest."""
        t0 = time.perf_counter()
        try:
            digest = getattr(env, "digest", "")
            key = (digest, frozenset(ignore))
            hit = None
            if not (digest and key in self._clean):
                hit = self.find(env.payload, ignore=ignore)
                if hit is None and digest:
                    if ignore:
                        self._clean.add(key)
                    else:
                        self._mark_clean((digest,))
            if hit is None and env.meta:
                hit = self.find(None, env.meta, ignore=ignore)
            if hit is None:
                return None
            return self._finding(hit, env.seq, env.round, env.sender, env.receiver, env.kind)
        finally:
            self.seconds += time.perf_counter() - t0

    def check(self, env) -> None:
        """Check one envelope (payload and meta): raise (mode stop) or record a finding."""
        self.messages_checked += 1
        found = self.finding(env)
        if found is not None:
            self._found(found)

    def submit(self, envs: Sequence[Any], extra: Sequence[tuple[str, Any]] = ()) -> _Batch:
        """Start checking several envelopes as one search over all their readings (payloads,
        then metas; each message's readings are their own pieces, as :meth:`check` reads them,
        so a window never spans two messages), and hashing their payloads (the digests an
        envelope without one gets: :func:`~testbed.exchange.payload.payload_digest`).
        ``extra``: more ``(path, array)`` readings searched in the same search (what the
        protocol releases, :meth:`release_readings`); the batch is clean only if they are too.

        On the worker process when it is running (:mod:`testbed.exchange.guard_worker`): the
        payloads' arrays are copied to it and this returns at once; the worker hashes and
        searches them while the protocol goes on. Else here, at once. The answer is
        :meth:`settle`'s; settle a batch before submitting the next."""
        t0 = time.perf_counter()
        try:
            batch = _Batch(envs, extra)
            w = self._worker
            if self.on_worker:
                from testbed.exchange.guard_worker import (
                    WorkerError,  # lazy: validate imports guard
                )

                metas = [readings(e.meta, f"{i}/meta/") for i, e in enumerate(envs) if e.meta]
                try:
                    batch.bid = w.submit(
                        self._gid,
                        [e.payload for e in envs],
                        [*itertools.chain.from_iterable(metas), *batch.extra],
                        self._tell_worker,
                    )
                    batch.worker, self._tell_worker = w, []
                    self._out.add(batch.bid)
                    return batch
                except WorkerError:
                    self._worker = None
            self._here(batch)
            return batch
        finally:
            self.seconds += time.perf_counter() - t0

    def _here(self, batch: _Batch) -> None:
        """Hash and search a batch in this process (no worker, or it failed)."""
        envs = batch.envs
        batch.digests = [e.digest or payload_digest(e.payload) for e in envs]
        batch.worker = None
        fresh: set[str] = set()
        parts = []
        for i, (env, digest) in enumerate(zip(envs, batch.digests)):
            if (digest, _NO_PARTIES) not in self._clean and digest not in fresh:
                parts.append(readings(env.payload, f"{i}/"))
                fresh.add(digest)
            if env.meta:
                parts.append(readings(env.meta, f"{i}/meta/"))
        parts.append(batch.extra)
        batch.clean, batch.rows = self._search_here(list(itertools.chain.from_iterable(parts)))

    def settle(self, batch: _Batch) -> tuple[bool, list[str]]:
        """The answer to :meth:`submit`: whether the batch is clean, and every payload's digest
        in order. Clean means no envelope of the batch holds a near-copy: the counters and the
        cache of clean payloads are then exactly what :meth:`check` on each in turn leaves.
        Not clean changes nothing; the caller then checks them one at a time with
        :meth:`check`, which raises or records exactly as without batching: batching neither
        finds nor misses anything a check per message would not."""
        t0 = time.perf_counter()
        try:
            if batch.worker is not None:
                from testbed.exchange.guard_worker import (
                    WorkerError,  # lazy: validate imports guard
                )

                try:
                    batch.clean, batch.rows, digests = batch.worker.answer(batch.bid)
                    batch.digests = [e.digest or d for e, d in zip(batch.envs, digests)]
                except WorkerError:  # the worker failed: hash and search here instead
                    self._worker = None
                    self._here(batch)
                self._out.discard(batch.bid)  # settled: close() has nothing to forget of it
        finally:
            self.seconds += time.perf_counter() - t0
        if batch.clean:
            self.rows_checked += batch.rows
            self.messages_checked += len(batch.envs)
            # the worker remembered the payloads of a batch it found clean itself
            self._mark_clean(batch.digests, tell=batch.worker is None)
        return batch.clean, batch.digests

    @property
    def on_worker(self) -> bool:
        """Whether the next batch goes to the worker process."""
        w = self._worker
        return bool(self._rows) and w is not None and w.ready()

    @staticmethod
    def answered(batch: _Batch) -> bool:
        """Whether :meth:`settle` would return without waiting."""
        return batch.worker is None or batch.worker.done(batch.bid)

    def _mark_clean(self, digests: Iterable[str], tell: bool = True) -> None:
        """Remember payloads found clean (a check that ignores no party), here and, with the
        next batch, on the worker (``tell``; not for a batch the worker searched, whose clean
        payloads it keeps itself): both skip the same payloads, so the counters are the same
        wherever a batch was searched."""
        new = {(d, _NO_PARTIES) for d in digests if d} - self._clean
        if new:
            self._clean |= new
            if tell and self._worker is not None:
                self._tell_worker.extend(d for d, _ in new)

    def _search_leaves(self, leaves: list) -> tuple[bool, int]:
        """``(clean, windows compared)`` of ``(path, array)`` leaves: on the worker when it
        runs (it is idle: the bus's last batch was settled), else here."""
        if self.on_worker and leaves:
            w = self._worker
            from testbed.exchange.guard_worker import WorkerError  # lazy: validate imports guard

            try:
                clean, rows, _ = w.answer(w.submit(self._gid, [], leaves, self._tell_worker))
                self._tell_worker = []
                return clean, rows
            except WorkerError:
                self._worker = None
        return self._search_here(leaves)

    def _search_here(self, leaves: list) -> tuple[bool, int]:
        """``(clean, windows compared)`` of ``(path, array)`` leaves, searched in this process;
        the counters are left to the caller (a batch counts only once it is clean)."""
        if not leaves or not self._rows:
            return True, 0
        before = self.rows_checked
        clean = self._find_in(leaves, None) is None
        rows, self.rows_checked = self.rows_checked - before, before
        return clean, rows

    @staticmethod
    def release_readings(released: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """The ``(path, array)`` readings of what a protocol releases, key by key."""
        return [x for key, value in released.items() for x in readings(value, f"{key}/")]

    def check_release(self, released: Mapping[str, Any], searched: bool = False) -> None:
        """Check what a protocol releases (``{"estimates": ..., "outputs": ..., ...}``), each
        key as its own finding's kind. ``searched``: its readings were already in a batch that
        was not clean (:meth:`Bus.finish <testbed.exchange.bus.Bus.finish>`), so look key by
        key at once."""
        t0 = time.perf_counter()
        try:
            if not searched:
                clean, rows = self._search_leaves(self.release_readings(released))
                if clean:
                    self.rows_checked += rows
                    return
            for key, value in released.items():
                hit = self.find(value)
                if hit is not None:
                    self._found(self._finding(hit, -1, -1, *RELEASE, str(key)))
        finally:
            self.seconds += time.perf_counter() - t0

    def summary(self) -> dict[str, Any]:
        """What the guard checked and found, for results.json."""
        return {
            "mode": self.mode,
            "rel_tol": self.rel_tol,
            "rule": "a window of d numbers within rel_tol x median private row norm of a "
            "private row, in any message (payload and meta) or released value: any dtype "
            "(complex parts, integer truncation, raw bytes), any axis, any offset, any nesting",
            "private_from": "the testbed: every party's rows except data the scenario marks public",
            "thresholds": dict(self.thresholds),
            "rows_indexed": self.rows_indexed,
            "messages_checked": self.messages_checked,
            "rows_checked": self.rows_checked,
            "violations": self.violations,
            "findings": [f.__dict__ | {"message": f.line()} for f in self.findings],
        } | self._public_summary()

    def _public_summary(self) -> dict[str, Any]:
        """The windows of public numbers that matched a private row (absent when none)."""
        if not self.public_match_count:
            return {}
        return {
            "public_number_matches": {
                "count": self.public_match_count,
                "rule": "a window of a message's loose numbers (or of the numbers in one of its "
                "strings) made only of numbers of the public configuration (protocol and "
                "defense params, data dimension, number of parties) is counted here, not a "
                "finding: every number in it is public",
                "examples": list(self.public_matches),
            }
        }
