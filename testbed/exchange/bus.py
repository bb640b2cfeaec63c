"""Message bus: the only way a value crosses from one party to another.

:meth:`Bus.send` runs the sender's defenses on the outgoing envelope (each returns a *new*
envelope) and returns the delivered envelope to the receiver's code; the privacy guard checks it
with its batch (:meth:`Bus.flush`, on the guard's worker process where there is one) and only then
is it appended to the transcript, its digest filled in. Nothing in the transcript is ever edited
or deleted. When the protocol returns, :meth:`Bus.finish` checks the last batch together with
what the protocol releases.

The pieces live in their own modules and are re-exported here, so ``from testbed.exchange.bus import X``
keeps working: payload freezing, sizes and digests (:mod:`testbed.exchange.payload`), envelopes
(:mod:`testbed.exchange.envelope`), the privacy guard (:mod:`testbed.exchange.guard`), the transcript, its files and
observer views (:mod:`testbed.exchange.transcript`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from testbed.errors import PluginFault, PrivacyGuardError, TestbedError
from testbed.exchange.envelope import EAVESDROPPER, SERVER, Envelope, visible_to
from testbed.exchange.guard import GuardFinding, PrivacyGuard
from testbed.exchange.payload import (
    Payload,
    freeze_payload,
    iter_arrays,
    map_arrays,
    payload_digest,
    payload_nbytes,
)
from testbed.exchange.transcript import TEMP_MARK, PublicInfo, Transcript, View, atomic_write_bytes
from testbed.registry import plugin_phase

__all__ = [
    "EAVESDROPPER",
    "SERVER",
    "TEMP_MARK",
    "Bus",
    "Envelope",
    "GuardFinding",
    "Payload",
    "PrivacyGuard",
    "PublicInfo",
    "Transcript",
    "View",
    "atomic_write_bytes",
    "auto_local_threads",
    "default_local_threads",
    "freeze_payload",
    "iter_arrays",
    "map_arrays",
    "payload_digest",
    "payload_nbytes",
    "parallel_safe",
    "visible_to",
]


# ----------------------------------------------------------------------------- local threads
def parallel_safe(fn):
    """Mark a party-local function as safe to run on a thread while the other calls of the same
    :meth:`Bus.local_map` run on others: it reads only its arguments and its party's data and
    changes neither (no shared random generator, no caches, no I/O). Such calls give the same
    results whichever thread runs them and in whatever order, so an in-process bus may run them at
    once (the network simplex of ``ot.emd`` releases the GIL). Unmarked functions always run one
    after another."""
    fn.parallel_safe = True
    return fn


def default_local_threads() -> int | None:
    """Threads an in-process bus runs marked local calls on: ``OT_TESTBED_LOCAL_THREADS`` when
    set (1 = one call after another), 1 in a ``--jobs`` sweep's worker (its cores are in use
    already), else ``None``: automatic (:func:`auto_local_threads`)."""
    raw = os.environ.get("OT_TESTBED_LOCAL_THREADS", "").strip()
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            raise TestbedError(
                f"OT_TESTBED_LOCAL_THREADS must be an integer >= 1, got {raw!r}"
            ) from None
    if os.environ.get("OT_TESTBED_SWEEP_WORKER") == "1":  # engines.pool.IN_SWEEP_WORKER
        return 1
    return None


def auto_local_threads() -> int:
    """The CPUs this process may use. Measured on the shared 2-core machine under load 8-9 (other
    developers' niced jobs): FedWAD paper mode, n = 2000, d = 64, with its two clients' calls on
    two threads ran at 0.76-0.83x the public code's time, one after another at 1.00-1.11x (the
    scheduler shares the cores by thread, and ``ot.emd`` releases the GIL)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


_POOLS: dict[tuple[int, int], object] = {}
_POOLS_LOCK = threading.Lock()


def _thread_pool(threads: int):
    """One shared pool per process and size (a forked child makes its own: the parent's
    threads do not exist there)."""
    key = (os.getpid(), threads)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            from concurrent.futures import ThreadPoolExecutor  # lazy: validate imports bus

            pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="testbed-local")
            _POOLS[key] = pool
    return pool


def _run_threaded(bus: Bus, calls: list, threads: int) -> list:
    """Run ``calls`` on this thread and ``threads - 1`` pool threads: the pool takes them in
    order, and this thread runs the first and then every one the pool has not started yet.
    Results in call order; the first failure in call order is raised once every call ended."""
    pool = _thread_pool(threads - 1)
    futures = [pool.submit(bus.local, c[0], c[1], *c[2:]) for c in calls[1:]]
    out: list = []
    errors: list[BaseException] = []

    def keep(get):
        try:
            out.append(get())
        except Exception as exc:  # raised below, in call order
            out.append(None)
            errors.append(exc)

    try:
        keep(lambda: bus.local(calls[0][0], calls[0][1], *calls[0][2:]))
        for f, c in zip(futures, calls[1:]):
            if f.cancel():  # not started: run it here
                keep(lambda c=c: bus.local(c[0], c[1], *c[2:]))
            else:
                keep(f.result)
    except BaseException:  # Ctrl-C: nothing more starts; a call already running ends alone
        for f in futures:
            f.cancel()
        raise
    if errors:
        raise errors[0]
    return out


# ----------------------------------------------------------------------------- bus
class Bus:
    """In-process message bus.

    Parameters
    ----------
    defenses : sequence of (defense, rng)
        Applied in order to every envelope the defense ``applies_to``.
    guard : PrivacyGuard, optional
        When given, every delivered payload is checked for private rows.
    ledger : object with ``record(event)``, optional
        Passed to defenses for privacy accounting.
    on_send : callable, optional
        Called with each delivered envelope (progress reporting only).
    transcript : Transcript, optional
        Where delivered envelopes are logged (e.g. one that spills payloads to the run
        directory); a fresh in-memory transcript by default.
    parties : mapping name -> PartyData
        The parties' private data. Protocol code reaches it only through :meth:`local`, which
        runs a function *at* a party; another engine (e.g. Ray actors) can run it remotely.
    local_threads : int, optional
        Threads :meth:`local_map` runs :func:`parallel_safe` calls on (default
        :func:`default_local_threads`, else the CPUs this process may use; 1 = in order).
    """

    def __init__(
        self,
        defenses=(),
        guard: PrivacyGuard | None = None,
        ledger=None,
        on_send=None,
        parties=None,
        transcript: Transcript | None = None,
        local_threads: int | None = None,
    ):
        self._transcript = transcript if transcript is not None else Transcript()
        self._seq = len(self._transcript)
        self._pending: list[Envelope] = []  # sent, not yet checked by the guard nor logged
        self._pending_bytes = 0
        self._inflight = None  # the batch the guard's worker is searching (guard._Batch)
        self._finished = False  # finish() was called: the protocol's run has returned
        self._final = None  # (batch, released) finish(wait=False) handed to the guard's worker
        #: threads for :func:`parallel_safe` local calls (1 = one after another)
        if local_threads is None:
            local_threads = default_local_threads() or auto_local_threads()
        self.local_threads = max(1, int(local_threads))
        self._parties = dict(parties or {})
        self._defenses = list(defenses)
        self.guard = guard
        self.ledger = ledger
        self._on_send = on_send
        #: the run's typed channel (:class:`~testbed.exchange.schema.Channel`), set by the
        #: testbed before the protocol runs: every message is checked against it at send
        self.channel = None

    @property
    def transcript(self) -> Transcript:
        """Every delivered envelope, in order. Reading it first checks and logs the messages
        the guard has not checked yet (:meth:`flush`)."""
        self.flush()
        return self._transcript

    def send(
        self, sender: str, receiver: str, kind: str, payload: Payload, round: int = 0, meta=None
    ) -> Envelope:
        """Send one message; returns the envelope as delivered (after defenses).

        With a guard, the envelope is checked and logged with the messages sent after it, in
        batches of :attr:`GUARD_BATCH` messages or :attr:`GUARD_BATCH_BYTES` bytes, and at the
        latest when the transcript is read (:meth:`flush`): a message carrying a private row
        stops the run there (guard mode ``stop``), and neither it nor anything sent after it
        is ever logged. After :meth:`finish` (the protocol's run returned) a send is refused:
        a thread the protocol left running cannot add to a transcript that was checked."""
        if self._finished:
            raise TestbedError(
                f"bus: message {kind!r} from {sender!r} sent after the protocol's run returned; "
                "it is not delivered"
            )
        channel = self.channel
        if channel is not None:
            channel.check(sender, receiver, kind, round, meta)
        try:
            env = Envelope.make(
                seq=self._seq,
                round=round,
                sender=sender,
                receiver=receiver,
                kind=kind,
                payload=payload,
                meta=meta,
                # hashed once below, after the defenses; with a guard, with its batch (flush)
                hashed=not self._defenses and self.guard is None,
            )
        except (TypeError, ValueError) as exc:  # bytes, objects, ragged lists, datetimes
            if channel is None:
                raise
            raise channel.unfrozen(kind, exc) from None
        if channel is not None:
            channel.check_payload(env)
        for defense, rng in self._defenses:
            if defense.applies_to(env):
                # what goes wrong in on_send is the defense's fault, not the protocol's
                with plugin_phase("defense", defense.name, "on_send"):
                    new = defense.on_send(env, rng, self.ledger)
                if not isinstance(new, Envelope) or new is env:
                    got = "the envelope it was given" if new is env else type(new).__name__
                    raise PluginFault(
                        f"defense {defense.name!r} failed in on_send: it must return a new "
                        f"Envelope (env.with_payload(...)), got {got}"
                    )
                if channel is not None:
                    channel.check_defended(new, defense.name)
                env = new
        self._seq += 1
        if self.guard is None:
            if not env.digest:  # made here, unhashed, and no defense replaced it: filled in place
                env.__dict__["digest"] = payload_digest(env.payload)
            self._transcript._append(env)
        else:
            self._pending.append(env)
            self._pending_bytes += env.nbytes
            if (
                len(self._pending) >= self.GUARD_BATCH
                or self._pending_bytes >= self.GUARD_BATCH_BYTES
                or (self._pending_bytes >= self.WORKER_BATCH_BYTES and self.guard.on_worker)
            ):
                self.flush(wait=False)
        if self._on_send is not None:
            self._on_send(env)
        return env

    #: the guard checks this many messages at once (its cost per check is mostly fixed: one
    #: search over a batch costs about what one over a single message does)
    GUARD_BATCH = 64
    #: or fewer, once their payloads hold this many bytes
    GUARD_BATCH_BYTES = 8 << 20
    #: or this many, when the guard's worker searches them (on the other core, while the
    #: protocol goes on). Each batch costs the bus's thread a fixed 0.1-0.3 ms (its layout, the
    #: copy, the command and the answer), and the last one is searched while testbed run's
    #: reference stage runs (Bus.finish(wait=False)): 1 MiB measured better than 256 KiB for
    #: FedBary's 26 KB messages and the same for the others (docs/findings/benchmarks.md)
    WORKER_BATCH_BYTES = 1 << 20
    #: while the worker searches the last batch the next one grows, up to this many messages
    #: or bytes; then the bus waits for the worker
    GUARD_LAG = 1024
    GUARD_LAG_BYTES = 64 << 20

    def finish(self, released: Mapping[str, Any] | None = None, wait: bool = True) -> None:
        """The protocol's end: check and log every message not checked yet (:meth:`flush`) and,
        with a guard, what the protocol releases (``{"estimates": ..., ...}``) in the same
        search, so a run waits for the guard's worker once instead of twice. Findings come as
        separate checks give them: the messages in order (a leak in one stops the run there,
        guard mode ``stop``), then the released values key by key. No message is accepted
        after it.

        ``wait=False``: hand that last search to the guard's worker and return at once; the
        caller does work that shows nothing to anyone (``testbed run``'s reference stage) while
        the worker searches, then calls :meth:`await_guard`, which logs the batch and raises
        what the guard found. Until then the transcript holds none of the batch: reading it
        (:attr:`transcript`, :meth:`flush`) waits for the answer first. Without a worker the
        search runs here, at once, as with ``wait=True``."""
        self._finished = True
        if self.guard is None:
            self.flush()
            return
        self._settle_inflight()
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        readings = self.guard.release_readings(released) if released else []
        if not pending and not readings:
            return
        batch = self.guard.submit(pending, readings)
        self._final = (batch, released)
        if wait:
            self.await_guard()

    def await_guard(self) -> None:
        """Wait for the guard's answer on the last search :meth:`finish` handed over, log its
        messages and raise what it found (guard mode ``stop``): a leak in a message first,
        then one in a released value, as :meth:`finish` with ``wait=True`` would. Does nothing
        when no search is out."""
        final, self._final = self._final, None
        if final is None:
            return
        batch, released = final
        if not self._settle(batch) and released:
            self.guard.check_release(released, searched=True)

    def flush(self, wait: bool = True) -> None:
        """Check every message sent since the last flush with the guard, in one search, and
        log them. When the batch holds a private row they are checked again one at a time, in
        order: each clean one is logged, and the first leak raises (guard mode ``stop``) or is
        recorded and logged (``record``), exactly as a check at each send would.

        ``wait=False`` (a full batch, from :meth:`send`): the guard's worker process searches
        the batch while the protocol goes on, and the next flush collects the answer first; a
        leak then stops the run at most two batches after it was sent, and is never logged."""
        if self._final is not None:  # the protocol's end, handed over by finish(wait=False)
            self.await_guard()
            return
        if not wait and self._inflight is not None and not self.guard.answered(self._inflight):
            if len(self._pending) < self.GUARD_LAG and self._pending_bytes < self.GUARD_LAG_BYTES:
                return  # the worker is still busy: the batch grows instead of waiting
        self._settle_inflight()
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        if not pending:
            return
        # hashed with the batch: on the guard's worker when it runs, else here in one tight
        # loop (a third of what one digest per send costs between the protocol's own work)
        batch = self.guard.submit(pending)
        if wait:
            self._settle(batch)
        else:
            self._inflight = batch

    def _settle_inflight(self) -> None:
        """Collect the answer for the batch on the guard's worker, if any, and log it."""
        inflight, self._inflight = self._inflight, None
        try:
            if inflight is not None:
                self._settle(inflight)
        except BaseException:
            self._pending, self._pending_bytes = [], 0  # sent after the leak: never logged
            raise

    def _settle(self, batch) -> bool:
        """Log a checked batch; returns whether its search was clean (else each envelope was
        checked again on its own, and logged when clean)."""
        clean, digests = self.guard.settle(batch)
        pending = batch.envs
        for env, digest in zip(pending, digests):
            # each envelope was made by send() (or by a defense: new) for this message alone;
            # the digest is its last field, filled in once, here, before it is logged (a copy
            # per message cost 2.5-3 us of a budget of 15-25: docs/findings/benchmarks.md)
            if not env.digest:
                env.__dict__["digest"] = digest
        if clean:
            for env in pending:
                self._transcript._append(env)
            return True
        try:
            for env in pending:
                self.guard.check(env)
                self._transcript._append(env)
        except PrivacyGuardError:  # the leak and what was sent after it are never logged
            self._seq = len(self._transcript)
            raise
        return False

    def local(self, party: str, fn, /, *args, **kwargs):
        """Run ``fn(party_data, *args, **kwargs)`` at ``party`` and return the result to that
        party's own code. Whatever the result is, it must go through :meth:`send` before any
        other party uses it."""
        try:
            data = self._parties[party]
        except KeyError:
            known = ", ".join(self._parties) or "(none)"
            raise TestbedError(f"no party {party!r} on this bus; parties: {known}") from None
        return fn(data, *args, **kwargs)

    def local_map(self, calls):
        """Run several independent ``(party, fn, *args)`` calls; results in call order.

        In process they run one after another, except calls of :func:`parallel_safe` functions,
        which run on up to ``local_threads`` threads at once when every call of the batch is one;
        an engine with remote parties (Ray) runs them concurrently. Same contract as
        :meth:`local` for each call."""
        calls = list(calls)
        if len(calls) > 1 and all(getattr(c[1], "parallel_safe", False) is True for c in calls):
            if self.local_threads > 1:
                return _run_threaded(self, calls, self.local_threads)
        return [self.local(c[0], c[1], *c[2:]) for c in calls]

    #: True when :meth:`local_map`/:meth:`map_pure` run calls at the same time (a protocol may
    #: then precompute work it would otherwise do one call at a time)
    runs_concurrently = False

    def map_pure(self, calls):
        """Run ``(fn, *args)`` calls that read no party's data (e.g. the server's own solves);
        results in call order. In process they run one after another; the pool engine
        (:mod:`testbed.exchange.engines.pool`) runs them in its workers."""
        return [c[0](*c[1:]) for c in calls]

    def broadcast(
        self,
        sender: str,
        receivers: Sequence[str],
        kind: str,
        payload: Payload,
        round: int = 0,
        meta=None,
    ):
        """One envelope per receiver (each is counted on the wire)."""
        return [self.send(sender, r, kind, payload, round=round, meta=meta) for r in receivers]
