"""The privacy guard's worker process: the bus's batches are hashed and searched on another core.

The bus checks messages in batches (:meth:`~testbed.exchange.bus.Bus.flush`). With a worker,
the guard copies a batch's payload arrays (and the readings of its metas) into memory shared
with this process, with a template of each payload (:func:`pack_payloads`), and returns at once;
the protocol goes on while the worker rebuilds each payload, hashes it for the transcript and
searches it, and the bus collects the answer and the digests at its next flush or when the
transcript is read. The worker only answers "no private row in this batch" or "something in
it": the guard in the bus's process decides everything else (what
is logged, what stops the run, every finding and counter), checking a batch that is not clean
again one message at a time, itself. A worker that fails or dies is replaced by checks in the
bus's process; nothing goes unchecked. A run stopped by an exception from outside while a batch
or an answer was half handed over (Ctrl-C in a notebook, ``limits.cell_seconds`` in a sweep)
gives its worker up, and the process's next guard starts a fresh one: the old one's pipe may
hold half an answer, and it may still be reading memory the next batch would overwrite.

The worker is a fresh interpreter (``python -m testbed.exchange.guard_serve``, no re-import of
the caller's script), started once per process and shared by every guard of that process; its
index is built from the rows the guard sends it (the same rows, owners and thresholds, so both
sides find the same things). The shared memory is one anonymous ``memfd`` handed over at start:
no file name, nothing left behind; a second one holds the id of the last batch answered.
``OT_TESTBED_GUARD_WORKER=0`` checks in the bus's process
(as does a machine with one CPU, and a ``--jobs`` sweep's worker, whose cores are in use).
"""

from __future__ import annotations

import atexit
import itertools
import mmap
import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

import numpy as np

from testbed.exchange.guard_pack import ALIGN as _ALIGN
from testbed.exchange.guard_pack import ArrayReader, pack_payloads, unpack_payload

__all__ = [
    "ENV",
    "ArrayReader",
    "GuardWorker",
    "enabled",
    "pack_payloads",
    "shared_worker",
    "unpack_payload",
]

#: ``0`` (or ``off``) checks in the bus's own process; ``1`` uses a worker even where it would
#: not by default
ENV = "OT_TESTBED_GUARD_WORKER"
_U64 = struct.Struct("=Q")  # the status word: the last batch answered
_ALIVE_EVERY = 1.0  # seconds between checks that the worker still lives, while awaiting an answer


def _cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def enabled() -> bool:
    """Whether guards of this process use the worker: ``OT_TESTBED_GUARD_WORKER`` when set, else
    yes where a second CPU is free for it (not in a ``--jobs`` sweep's worker) and the platform
    has ``memfd_create``."""
    if not hasattr(os, "memfd_create"):
        return False
    raw = os.environ.get(ENV, "").strip().lower()
    if raw:
        return raw not in ("0", "off", "false", "no")
    if os.environ.get("OT_TESTBED_SWEEP_WORKER") == "1":  # engines.pool.IN_SWEEP_WORKER
        return False
    return _cpus() > 1


class WorkerError(RuntimeError):
    """The worker could not answer (it died, or failed on a batch): check in process."""


class GuardWorker:
    """One worker process and the shared memory batches travel in. Thread-safe; answers come
    back in the order batches were sent."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._answers: dict[int, tuple] = {}
        self._unwanted: set[int] = set()  # batches whose guard closed before asking: not kept
        self._busy: int | None = None  # the batch whose leaves the shared memory holds
        self._ready = False
        self._failed: str | None = None
        #: True once an exception from outside (Ctrl-C, ``limits.cell_seconds``) came while a
        #: batch or an answer was half handed over: :func:`shared_worker` then starts another
        self.interrupted = False
        self.seconds = 0.0  # the worker's own search time, as it reports it
        self._fd = os.memfd_create("privacy-guard-batches", os.MFD_CLOEXEC)
        self._size = 0
        self._map: mmap.mmap | None = None
        self._view: memoryview | None = None  # the whole map
        # one word the worker writes after each answer: the last batch it answered, which
        # done() reads without a system call (a poll would hand the GIL to other threads)
        self._status_fd = os.memfd_create("privacy-guard-status", os.MFD_CLOEXEC)
        os.ftruncate(self._status_fd, mmap.PAGESIZE)
        self._status = mmap.mmap(self._status_fd, mmap.PAGESIZE)
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "testbed.exchange.guard_serve",
                    str(to_child_r),
                    str(from_child_w),
                    str(self._fd),
                    str(self._status_fd),
                    str(os.getpid()),  # whose worker it is (for ps, and the tests)
                ],
                pass_fds=(to_child_r, from_child_w, self._fd, self._status_fd),
                # no terminal of its own: it reports through its pipe, and a caller waiting for
                # this process's output to end does not wait for the worker too
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches the bus's process, which stops this one
            )
        except BaseException:
            self._status.close()
            for fd in (to_child_w, from_child_r, self._fd, self._status_fd):
                os.close(fd)
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self._send = Connection(to_child_w, readable=False)
        self._recv = Connection(from_child_r, writable=False)
        # commands go out in order through one thread: a guard's rows (megabytes, pickled) or
        # a batch's layout never make the bus wait while the worker is busy reading
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        # a check command is written by the thread that submits it when no command is queued
        # or being written (one lock orders the writers): waking the command thread hands it
        # the GIL, and on a busy machine the bus's thread then waits a scheduler slice for it
        # back (measured: docs/findings/benchmarks.md)
        self._write_lock = threading.Lock()  # held while a command is written to the pipe
        self._count_lock = threading.Lock()  # guards _queued and the order of the outbox
        self._queued = 0  # commands put in the outbox and not yet wholly written
        self._sender = threading.Thread(target=self._send_all, name="guard-worker-commands")
        self._sender.daemon = True
        self._sender.start()

    def _send_all(self) -> None:
        while True:
            msg = self._outbox.get()
            if msg is None:
                break
            try:
                with self._write_lock:
                    if isinstance(msg, (bytes, memoryview)):
                        self._send.send_bytes(msg)
                    else:
                        self._send.send(msg)
            except (OSError, ValueError, TypeError) as exc:  # the worker is gone or closed
                self._fail(f"the guard worker stopped: {exc!r}")
                break
            finally:
                with self._count_lock:  # written (or failed): a check may go straight in
                    self._queued -= 1
        try:  # after the last whole command: the worker reads the end of its pipe and ends
            with self._write_lock:  # not while the bus's thread writes one (_post_now)
                self._send.close()
        except OSError:
            pass

    def _post(self, msg) -> None:
        """Send a command (or its pickled bytes) after those already queued, through the
        command thread."""
        if self._failed:
            raise WorkerError(self._failed)
        with self._count_lock:  # never waits for a write: the command thread does it
            self._queued += 1
            self._outbox.put(msg)

    def _post_now(self, msg: bytes) -> None:
        """Send a small pickled command from this thread when no command is queued or being
        written (the pipe then takes it at once: the worker reads every command), else after
        them through the command thread; never waits for another command's write."""
        if self._failed:
            raise WorkerError(self._failed)
        with self._count_lock:
            if self._queued or not self._write_lock.acquire(blocking=False):
                self._queued += 1
                self._outbox.put(msg)
                return
        try:
            self._send.send_bytes(msg)
        except (OSError, ValueError) as exc:  # the worker is gone or closed
            self._fail(f"the guard worker stopped: {exc!r}")
            raise WorkerError(self._failed) from None
        finally:
            self._write_lock.release()

    # -- state
    def ready(self) -> bool:
        """True once the worker has started (never blocks)."""
        if self._ready or self._failed:
            return self._ready and not self._failed
        with self._lock:
            try:
                if self._recv.poll(0):
                    self._take()
            except Exception as exc:  # EOF, a closed pipe, an unreadable message
                self._fail(f"the guard worker stopped: {exc!r}")
            except BaseException:  # Ctrl-C or limits.cell_seconds, maybe half a message read
                self._give_up()
                raise
        return self._ready and not self._failed

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Wait until the worker has started (or ``timeout`` seconds); True when it has."""
        end = time.monotonic() + timeout
        while not self.ready() and self.alive and time.monotonic() < end:
            time.sleep(0.01)
        return self.ready()

    @property
    def alive(self) -> bool:
        return not self._failed and self._proc.poll() is None

    def _fail(self, why: str) -> None:
        self._failed = self._failed or why

    def _give_up(self) -> None:
        """Use this worker no more: an exception from outside (Ctrl-C, ``limits.cell_seconds``)
        came while a batch or an answer was half handed over, so the pipe may hold half an
        answer, or the worker may still be reading memory the next batch would overwrite. The
        command thread closes the command pipe after the command it may be writing, and this
        end of the answers' pipe closes now: the worker then ends (a worker answering meets a
        closed pipe, an idle one reads the end of its commands). Never waits; the lock may be
        held. The next guard gets a fresh worker (:func:`shared_worker`)."""
        self.interrupted = True
        self._fail("interrupted while a batch or an answer was half handed over")
        self._outbox.put(None)
        try:
            self._recv.close()
        except OSError:
            pass
        self._release_memory()

    def _take(self) -> None:
        """Receive one message from the worker (the lock is held)."""
        msg = self._recv.recv()
        if msg[0] == "ready":
            self._ready = True
        else:
            if msg[1] in self._unwanted:
                self._unwanted.discard(msg[1])
            else:
                self._answers[msg[1]] = msg
            if self._busy == msg[1]:
                self._busy = None

    # -- guards
    def load(self, widths: dict[int, tuple], parties: list[str]) -> int:
        """Hand the worker one guard's rows (per width: rows, owner, threshold), from which it
        builds the same index; returns the guard's id there."""
        gid = next(self._ids)
        self._post(("load", gid, {d: tuple(np.asarray(x) for x in w) for d, w in widths.items()},
                    list(parties)))  # fmt: skip
        return gid

    def discard(self, bids) -> None:
        """Keep no answer for the batches ``bids``: their guard closed without asking (its run
        was stopped with a batch out), and nothing else will ever ask."""
        with self._lock:
            for bid in bids:
                if self._answers.pop(bid, None) is None:
                    self._unwanted.add(bid)

    def drop(self, gid: int) -> None:
        """Forget one guard's index."""
        if self.alive:
            try:
                self._post(("drop", gid))
            except WorkerError:
                pass

    # -- batches
    def submit(
        self,
        gid: int,
        payloads: list,
        leaves: list[tuple[str, np.ndarray]] = (),
        clean: list[str] = (),
    ) -> int:
        """Copy a batch to the shared memory and ask the worker to hash and search it; returns
        the batch's id for :meth:`answer`. ``payloads``: the messages' frozen payloads (the
        worker rebuilds them, hashes each and reads it as the guard would); ``leaves``:
        ``(path, array)`` readings searched as they are (metas); ``clean``: digests of payloads
        found clean since the last batch, which the worker then skips too. Waits only if the
        previous batch is still being read."""
        if self._failed:
            raise WorkerError(self._failed)
        bid = next(self._ids)
        arrays: list[np.ndarray] = []
        values: list = []
        templates = pack_payloads(payloads, arrays, values)
        extra = []
        for path, a in leaves:
            extra.append((path, a.dtype.str, a.shape))
            arrays.append(a)
        at, places = 0, []
        for a in arrays:  # where ArrayReader finds them on the worker
            places.append(at)
            at += -(-a.nbytes // _ALIGN) * _ALIGN
        with self._lock:
            while self._busy is not None:  # the memory still holds a batch being searched
                self._wait_one()
            try:
                self._reserve(at)
                mem = self._view
                for off, a in zip(places, arrays):
                    n = a.nbytes
                    if not n:
                        continue
                    if a.flags.c_contiguous and a.dtype.kind in "biufc":  # a plain buffer
                        mem[off : off + n] = memoryview(a).cast("B")
                    else:
                        np.ndarray(a.shape, a.dtype, buffer=self._map, offset=off)[...] = a
                # pickled here, where its time is the bus's (a batch's templates are a few
                # shared tuples, pickled once each), and written here when nothing is queued
                msg = ("check", gid, bid, self._size, templates, values, extra, clean)
                self._post_now(_dumps(msg))
                self._busy = bid
            except BaseException as exc:
                if not isinstance(exc, Exception):  # Ctrl-C or limits.cell_seconds: maybe
                    self._give_up()  # posted and not marked busy, or half copied
                raise
        return bid

    def _reserve(self, nbytes: int) -> None:
        if nbytes <= self._size and self._map is not None:
            return
        size = max(nbytes, 2 * self._size, 1 << 20)
        size = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
        if self._map is not None:
            self._view.release()
            self._map.close()
        os.ftruncate(self._fd, size)
        self._map = mmap.mmap(self._fd, size)
        self._view = memoryview(self._map)
        self._size = size

    def _wait_one(self) -> None:
        """Take the worker's next answer (the lock is held), waiting while its process lives: a
        worker that dies is found even where another process still holds its end of the pipe."""
        try:
            fd = self._recv.fileno()
            while not select.select([fd], [], [], _ALIVE_EVERY)[0]:
                if self._proc.poll() is not None:
                    raise EOFError(f"its process ended (exit code {self._proc.returncode})")
            self._take()
        except Exception as exc:  # EOF, a closed pipe, an unreadable answer
            self._fail(f"the guard worker stopped: {exc!r}")
            raise WorkerError(self._failed) from None
        except BaseException:  # Ctrl-C or limits.cell_seconds, maybe half an answer read
            self._give_up()
            raise

    def done(self, bid: int) -> bool:
        """Whether the answer for batch ``bid`` is in (never blocks, no system call). A worker
        that died is found by the next :meth:`answer`."""
        if bid in self._answers or self._failed:
            return True
        try:
            return _U64.unpack_from(self._status)[0] >= bid
        except ValueError:  # closed
            return True

    def answer(self, bid: int) -> tuple[bool, int, list[str]]:
        """``(clean, windows compared, payload digests)`` of one batch; waits for it."""
        with self._lock:
            while bid not in self._answers:
                if self._failed:
                    raise WorkerError(self._failed)
                self._wait_one()
            msg = self._answers.pop(bid)
        if msg[0] == "error":
            raise WorkerError(msg[2])
        _, _, clean, rows, seconds, digests = msg
        self.seconds += seconds
        return clean, rows, digests

    def _forget(self, sending: bool = False) -> None:
        """Close this process's copies of the pipe ends and memory, telling the worker nothing.
        ``sending``: the command thread still runs and closes the command pipe itself (two
        threads closing one descriptor could close a file opened in between)."""
        self._failed = "inherited from the parent process"
        for c in (self._recv,) if sending else (self._send, self._recv):
            try:
                c.close()
            except OSError:
                pass
        self._release_memory()

    def _release_memory(self) -> None:
        """Unmap this process's view of the shared memory and close its file descriptors."""
        if self._view is not None:
            try:
                self._view.release()
            except BufferError:
                pass
            self._view = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view of it is still alive: the mapping goes with it
                pass
            self._map = None
        try:
            self._status.close()
        except BufferError:
            pass
        for fd in (self._fd, self._status_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fd = self._status_fd = -1  # closed once: the numbers may be another file's next

    def close(self) -> None:
        """Stop the worker: close this end of its pipe (it ends when it reads the end, after
        the batch it may be searching) and the shared memory. Never waits: it may run from an
        interrupted process's exit, where no lock or wait can be trusted."""
        self._outbox.put(None)  # the command thread ends, closing the command pipe
        self._forget(sending=self._sender.is_alive())
        self._failed = "the guard worker was closed"


_SHARED: dict[int, GuardWorker] = {}
_SHARED_LOCK = threading.Lock()


def shared_worker(force: bool = False) -> GuardWorker | None:
    """This process's worker (started on first call, without waiting for it), or None where
    workers are off (:func:`enabled`; ``force``: on wherever the platform has them) or the
    last one failed."""
    if not (enabled() or (force and hasattr(os, "memfd_create"))):
        return None
    pid = os.getpid()  # a forked child starts its own
    with _SHARED_LOCK:
        w = _SHARED.get(pid)
        if w is not None and not w.alive:
            _SHARED.pop(pid)
            if not w.interrupted:
                return None  # failed once: the rest of this process checks in process
            w = None  # given up after an interrupt (it works): the next guard gets a fresh one
        if w is None:
            try:
                w = _SHARED[pid] = GuardWorker()
            except OSError:
                return None
            if len(_SHARED) == 1:
                atexit.register(_close_all)
        return w


def _forget_in_child() -> None:
    """In a forked child (the pool engine's workers): drop the parent's worker without a word
    to it, closing the inherited pipe ends and shared memory, so nothing in the child can read
    the parent's answers or batches."""
    for pid, w in list(_SHARED.items()):
        if pid != os.getpid():
            _SHARED.pop(pid, None)
            w._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _close_all() -> None:
    # at exit, without the lock: an interrupt may have left it held
    workers = [w for p, w in list(_SHARED.items()) if p == os.getpid()]
    _SHARED.clear()
    for w in workers:
        w.close()


# ----------------------------------------------------------------------------- commands
def _dumps(msg) -> bytes:
    """A check command (numbers, strings and tuples only) as plain pickle: ForkingPickler, which
    ``Connection.send`` uses, copies its reducer table on every call (3 µs against 1 µs)."""
    return pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)
