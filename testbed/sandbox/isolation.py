"""Attacks run in a sandboxed process of their own, which receives only the serialised View.

Isolation by convention (an attack *should not* look up the call stack) is no isolation: Python
code can walk frames, list every live object with ``gc.get_objects()``, read module globals or
make a read-only array writable. So each attack runs in a fresh process forked from a
``multiprocessing`` *forkserver*: the server is a new interpreter that has only imported the
testbed's code (never the driver's data), and each child starts as a copy of it. The child
receives bytes (:mod:`testbed.sandbox.codec`): the observer's envelopes, its own data and a copy
of the public information. Before it reads them it confines itself for good
(:mod:`testbed.sandbox.confine`: Landlock, namespaces, no capabilities, resource limits), so
it can reach neither the driver (its memory, ``/proc``, signals) nor the run directory, the
scenario, data files, the network or anything but its own temporary directory. It runs
``attack.run`` and ``attack.baseline`` and sends back their outputs, which the driver decodes
without unpickling anything.

The driver enforces the scenario's ``limits:`` (:class:`AttackLimits`): a wall-clock limit (the
process is killed, with every process it started), a memory limit (address space) and an output
size limit (the driver never reads more). Any failure is an :class:`AttackFailedError` naming the
phase (``sandbox``, ``setup``, ``run``, ``baseline``, ``output``, ``time``) and one line of
reason.

Cost: one fork of a warm server per attack, the sandbox, and pickling the view (measured by
``testbed bench``, "Attack isolation"; docs/reference/trust.md).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from threadpoolctl import threadpool_info, threadpool_limits

from testbed.errors import TestbedError
from testbed.exchange.bus import PublicInfo, View
from testbed.plugin_source import NotOnPath, Source, load, locate, refusal
from testbed.registry import ATTACKS, DEFENSES, PROTOCOLS
from testbed.sandbox.codec import (
    MAX_RESULT_DEPTH,
    NestingError,
    UnreadableResult,
    decode_result,
    encode_result,
    freeze_tree,
    pack_view,
    unpack_view,
    unpack_views,
)
from testbed.sandbox.confine import (
    Policy,
    confine,
    isolation_level,
    python_paths,
    set_non_dumpable,
    verified,
)

__all__ = [
    "AttackFailedError",
    "AttackLimits",
    "Isolated",
    "decode_result",
    "encode_result",
    "freeze_tree",
    "pack_view",
    "run_isolated",
    "unpack_view",
]

_LOG = logging.getLogger(__name__)
_CTX: Any = None
_NOTICE: list[str] = []  # the one-time "no kernel sandbox here" notice, once given
_HEADER = 8  # bytes of the little-endian length before the result


class AttackFailedError(TestbedError):
    """An attack raised, ran out of time or memory, sent too much, or its process died.
    ``phase`` says where, ``reason`` is one line, ``details`` the attack process's traceback."""

    def __init__(self, message: str, phase: str = "run", reason: str = "", details: str = ""):
        super().__init__(message)
        self.phase, self.reason, self.details = phase, reason or message, details
        self.isolation = ""  # the sandbox level it had reached, when its process said

    @classmethod
    def of(cls, name: str, phase: str, reason: str, details: str = "") -> AttackFailedError:
        head = (
            f"attack {name!r} stopped" if phase == "time" else f"attack {name!r} failed in {phase}"
        )
        return cls(f"{head}: {reason}", phase, reason, details)


@dataclass(frozen=True)
class AttackLimits:
    """What one attack process may use (the scenario's ``limits:``, see
    :meth:`testbed.scenario.limits.LimitsSpec.attack_limits`); ``sandbox=False`` keeps the
    separate process but confines nothing."""

    seconds: float = 1800.0
    memory_bytes: int | None = 8 << 30
    output_bytes: int = 64 << 20
    sandbox: bool = True


@dataclass(frozen=True)
class Isolated:
    """An attack's outputs and baseline outputs, and the isolation level it ran under."""

    outputs: list
    baseline: list
    isolation: str


def _thread_limits() -> dict[str, int]:
    """The driver's thread counts (BLAS, OpenMP, torch), so the child computes as the driver
    would: a forked child does not inherit threadpoolctl's limits, and two-thread BLAS or torch
    on a loaded 2-core machine is many times slower than one thread (testbed/threads.py)."""
    out: dict[str, int] = {}
    for lib in threadpool_info():
        api = lib.get("user_api")
        if api in ("blas", "openmp"):
            out[api] = min(out.get(api, lib["num_threads"]), lib["num_threads"])
    if "torch" in sys.modules:
        out["torch"] = int(sys.modules["torch"].get_num_threads())
    return out


def _apply_thread_limits(limits: dict[str, int]) -> None:
    for api in ("blas", "openmp"):
        if api in limits:
            threadpool_limits(limits=limits[api], user_api=api)
    if "torch" in limits:
        import torch  # torch: only when the attack limits it

        torch.set_num_threads(limits["torch"])


def _send(fd: int, msg: bytes) -> None:
    data = memoryview(len(msg).to_bytes(_HEADER, "little") + msg)
    while data:
        data = data[os.write(fd, data) :]


#: what an attack printed, in its temporary directory; the driver logs its tail (``--debug``)
PRINTED = "printed.txt"
PRINTED_TAIL = 64 << 10


def _own_descriptors(conn, tmp: str) -> None:
    """The attack's process keeps no descriptor of the driver's: its stdout and stderr go to a
    file of its own (what it prints never reaches the user's terminal or a pipe reading the
    testbed's output), stdin reads nothing, and every other inherited descriptor is closed but
    its result pipe (the forkserver's and multiprocessing's resource tracker's pipes among them:
    through the tracker's, a write could have made that process, outside the sandbox, unlink
    any name in /dev/shm)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    out = os.open(os.path.join(tmp, PRINTED), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    keep = conn.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 20)
    from multiprocessing import resource_tracker  # lazy: keeps refused input fast

    # its descriptor number is closed now (and may be reused by a file the attack opens): the
    # tracker starts afresh, inside the sandbox, if the attack ever needs one
    resource_tracker._resource_tracker._fd = None


def _printed(tmp: str) -> str:
    """The last :data:`PRINTED_TAIL` bytes the attack printed (empty when it printed nothing)."""
    try:
        with open(os.path.join(tmp, PRINTED), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - PRINTED_TAIL))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _child(
    conn, where, params: dict, blob: bytes, rngs, limits, policy, cap: int, tmp: str
) -> None:
    """Runs in the attack's own process: confine it, check the sandbox holds, import the attack's
    code (only now: nothing of the plugin runs unconfined here), rebuild the inputs, run, send
    the outputs back (at most ``cap`` bytes)."""
    phase, level = "sandbox", "process"
    sys.argv = [sys.argv[0] if sys.argv else "attack"]  # the driver's command line stays there
    try:
        _own_descriptors(conn, tmp)
        if policy is not None:
            level = verified(confine(policy))  # first: unshare wants a single-threaded process
        _apply_thread_limits(limits)
        phase = "setup"
        cls = where[2] or load(*where[:2])
        view, base_view, public = unpack_views(blob)
        del blob
        attack = cls(cls.Config(**params))
        phase = "run"
        outputs = attack.run(view, public, rngs[0])
        phase = "baseline"
        baseline = attack.baseline(base_view, public, rngs[1])
        phase = "output"
        wrong = _not_a_list(outputs, "run") or _not_a_list(baseline, "baseline")
        if wrong:
            msg = encode_result({"error": [phase, wrong, "", level]})
        else:
            msg = encode_result({"ok": [list(outputs), list(baseline)], "isolation": level})
        if len(msg) > cap:
            line = f"its outputs are {len(msg) / 2**20:.1f} MiB, above {_mib(cap)}"
            msg = encode_result({"error": [phase, line, "", level]})
    except BaseException as exc:  # reported to the parent, which decides what to do
        line = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
        if phase == "output" and isinstance(exc, (RecursionError, NestingError)):
            line = f"its outputs nest deeper than {MAX_RESULT_DEPTH} levels"
        msg = encode_result({"error": [phase, line[:300], traceback.format_exc()[-20000:], level]})
    _send(conn.fileno(), msg)
    conn.close()


def _not_a_list(got, method: str) -> str:
    """What is wrong with a ``run``/``baseline`` result that is no list ("" when it is one)."""
    if isinstance(got, (list, tuple)):
        return ""
    return f"{method} returned a {type(got).__name__}, not a list of AttackOutput"


def _mib(n: int) -> str:
    return f"limits.attack_output_mb = {n / 2**20:g} MiB"


def _context():
    global _CTX
    if _CTX is None:
        ctx = mp.get_context("forkserver")
        # the server imports the testbed's plugins once, never __main__ (a user's script, or
        # pytest's) and never the driver's data; each attack forks from it. The plugin packages
        # import no module themselves, so the server imports each module and POT (which the
        # plugins import at their first solve) by name.
        ctx.set_forkserver_preload(
            [
                "testbed.sandbox.isolation",
                "testbed.run.execute",
                "testbed.run.sweep",
                "ot",
                # torch by name: POT no longer imports it where testbed.ot.NO_TORCH is set,
                # and an attack optimising with torch must not import it under its limits
                "torch",
                *ATTACKS.modules(),
                *PROTOCOLS.modules(),
                *DEFENSES.modules(),
                "testbed.sandbox.warm",  # last: answers what the sandbox hides (its docstring)
            ]
        )
        _CTX = ctx
    return _CTX


def _server_end() -> str:
    """How the attacks' forkserver ended ("the attacks' forkserver process (pid 4711) was
    killed by SIGKILL"), or "" while it lives. The dead server is left unreaped (``WNOWAIT``):
    multiprocessing reaps it and starts a new one for the next attack."""
    from multiprocessing import forkserver  # lazy: keeps refused input fast

    pid = forkserver._forkserver._forkserver_pid
    info = None
    for _ in range(100):  # its pipe ends as it exits: it is a zombie a moment later
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) if pid else None
        except ChildProcessError:
            info = None
        if info is not None or not pid:
            break
        time.sleep(0.01)
    if info is None:
        return ""  # the server lives
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        how = f"was killed by {signal.Signals(info.si_status).name}"
    else:
        how = f"exited with code {info.si_status}"
    return f"the attacks' forkserver process (pid {pid}) {how}"


def _server_death(exc: BaseException) -> str:
    """One line naming the forkserver's death when it ended before it started the attack's
    process (its pipe ended: ``EOFError``; or refused: ``OSError``); "" for any other error."""
    end = _server_end() if isinstance(exc, (EOFError, OSError)) else ""
    if not end:
        return ""
    line = " ".join(f"{type(exc).__name__}: {exc}".split())
    return (
        f"{end} before it started this attack's process ({line}); the next attack starts a new one"
    )


def _where(cls, name: str) -> tuple[Source, str, type | None]:
    """Where the attack's code lies, the name of its class there, and the class itself when
    the attack's process is to import it before it confines itself.

    An entry point's place is the one the registry found before the plugin's code ran; its
    process imports it only once sandboxed, from those files. A class registered at run time
    (a built-in, a script's, a test's: code the driver ran already) is found from the import
    path the testbed started with, and travels as a reference that its process imports first,
    as the driver did (a test module's own imports of its neighbours included). Never from what
    the loaded module says of itself (its ``__path__``, ``__file__``)."""
    found = ATTACKS.source(name, cls)
    if found is not None:  # found before it ran; a run may have been written there since
        why = refusal(found[0].read)
        if why:
            raise AttackFailedError.of(
                name, "sandbox", f"its package lies at {found[0].read}, which {why}"
            )
        return (*found, None)
    who = f"attack {name!r}"
    try:
        try:
            return locate(cls.__module__, who), cls.__qualname__, cls
        except NotOnPath:  # a folder the script put on sys.path: opened all the same, as
            return locate(cls.__module__, who, now=True), cls.__qualname__, cls  # it ran here
    except TestbedError as exc:
        raise AttackFailedError.of(name, "sandbox", str(exc).split(": ", 1)[-1]) from None


def _package_paths(source: Source) -> list[str]:
    """The folders of the packages an attack runs on: the testbed's (as the import system found
    them when it started) and its own (or, for a single-file module, that file alone)."""
    return [*(locate(n, "testbed").read for n in _OWN), source.read]


_OWN = ("attacks", "defenses", "protocols", "testbed")


def _policy(source: Source, limits: AttackLimits, tmp: str) -> Policy | None:
    if not limits.sandbox:
        return None
    if isolation_level() == "process" and not _NOTICE:
        _NOTICE.append("given")
        warnings.warn(
            "this kernel offers no Landlock: attacks run in processes of their own without a "
            "file-system sandbox (isolation level recorded with each row)",
            RuntimeWarning,
            stacklevel=3,
        )
    return Policy(
        read=(*python_paths(), *_package_paths(source)),
        tmp=tmp,
        memory_bytes=limits.memory_bytes,
        cpu_seconds=int(2 * limits.seconds) + 10,  # a backstop; the wall clock is enforced here
        file_bytes=1 << 30,
    )


def _read_exact(fd: int, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _receive(name: str, fd: int, limits: AttackLimits, proc) -> dict:
    deadline = time.monotonic() + limits.seconds
    try:
        size = int.from_bytes(_read_exact(fd, _HEADER, deadline), "little")
        if size > limits.output_bytes + (1 << 16):  # room for the error message itself
            raise AttackFailedError.of(
                name, "output", f"it sent {size} bytes, above {_mib(limits.output_bytes)}"
            )
        blob = _read_exact(fd, size, deadline)
        try:
            msg = decode_result(blob)
        except UnreadableResult as exc:  # compressed, no archive, nested too deep
            raise AttackFailedError.of(name, "output", str(exc)) from None
    except TimeoutError:
        raise AttackFailedError.of(
            name, "time", f"it ran past limits.attack_seconds = {limits.seconds:g} s and was killed"
        ) from None
    except (EOFError, OSError, ValueError, KeyError, TypeError):
        proc.join(5)
        code = proc.exitcode
        how = (
            f"killed by {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
        )
        end = _server_end() if code == 255 else ""  # what multiprocessing says when the
        if end:  # server that would have told the exit status is gone
            how = f"its exit status was lost: {end} while it ran"
        raise AttackFailedError.of(
            name, "run", f"its process ended without a readable result ({how})"
        ) from None
    if not _well_formed(msg):
        raise AttackFailedError.of(name, "output", "its process sent a malformed result")
    return msg


def _well_formed(msg) -> bool:
    """The shape :func:`_child` sends: ``{"ok": [outputs, baseline], "isolation": level}`` or
    ``{"error": [phase, line, traceback, level]}``, every text a str."""
    if not isinstance(msg, dict):
        return False
    if set(msg) == {"error"}:
        e = msg["error"]
        return isinstance(e, list) and len(e) == 4 and all(isinstance(v, str) for v in e)
    if set(msg) == {"ok", "isolation"}:
        ok = msg["ok"]
        return (
            isinstance(msg["isolation"], str)
            and isinstance(ok, list)
            and len(ok) == 2
            and all(isinstance(v, list) for v in ok)
        )
    return False


#: how long the driver waits for a killed attack process to be reaped: at once, unless the
#: kernel holds it in an uninterruptible wait (a hung file system), which no signal ends
REAP_SECONDS = 10.0


def _end(proc, grace: float) -> None:
    """Kill the attack's process group (and, through its PID namespace, every process it
    started) unless it ends within ``grace`` seconds. The run goes on even if the killed
    process is not reaped within :data:`REAP_SECONDS` (it is a daemon child, reaped later)."""
    proc.join(grace)
    for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
        try:
            kill()
        except (ProcessLookupError, PermissionError, OSError):
            pass
    proc.join(REAP_SECONDS)


def run_isolated(
    cls,
    params: dict,
    view: View,
    public: PublicInfo,
    rng,
    base_rng,
    limits: AttackLimits | None = None,
    upstream: tuple[Sequence, Sequence] = ((), ()),
) -> Isolated:
    """Run ``cls(params).run`` and ``.baseline`` in a fresh sandboxed process, under ``limits``.

    ``upstream`` is a chained attack's input (its scenario entry's ``input:``): the upstream
    attack's outputs, which ``run`` finds in ``view.upstream``, and its baseline's outputs, which
    ``baseline`` finds there (so the chained attack's prior-only baseline builds on the upstream's
    prior-only baseline, never on what the messages gave).

    The attack class travels by reference (module and name), so a plugin must be defined at
    module level of an importable module (as entry-point plugins are); an entry point's module
    is imported in the attack's process only once it is sandboxed (:func:`_where`). The
    forkserver's death before it starts the process costs this attack, not the caller's run
    (:func:`_server_death`).
    """
    limits = limits or AttackLimits()
    name = getattr(cls, "name", cls.__name__)
    try:
        pickle.dumps(cls)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise AttackFailedError.of(
            name,
            "setup",
            "its class cannot be sent to the isolated attack process "
            f"(define it at module level of an importable module): {exc}",
        ) from None
    where = _where(cls, name)
    if limits.sandbox:
        set_non_dumpable()  # the driver's /proc/PID/{mem,environ} closed to its children
    blob = pack_view(replace(view, upstream=tuple(upstream[0])), public, tuple(upstream[1]))
    ctx = _context()
    tmp = tempfile.mkdtemp(prefix="testbed-attack-")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_child,
        args=(
            send,
            where,
            dict(params),
            blob,
            (rng, base_rng),
            _thread_limits(),
            _policy(where[0], limits, tmp),
            limits.output_bytes,
            tmp,
        ),
        daemon=True,
    )
    try:
        proc.start()
    except BaseException as exc:
        recv.close()
        send.close()
        shutil.rmtree(tmp, ignore_errors=True)
        death = _server_death(exc)
        if death:  # this attack fails; the next one starts a new server
            raise AttackFailedError.of(name, "sandbox", death) from None
        raise
    send.close()
    msg = None
    try:
        msg = _receive(name, recv.fileno(), limits, proc)
    finally:  # also on Ctrl-C or limits.cell_seconds in the parent: the attack stops too
        recv.close()
        _end(proc, 2.0 if msg is not None else 0.0)
        printed = _printed(tmp)
        if printed:
            _LOG.debug(
                "--- %s printed (its last %d bytes at most) ---\n%s", name, PRINTED_TAIL, printed
            )
        shutil.rmtree(tmp, ignore_errors=True)
    if "error" in msg:
        phase, line, tb, level = (str(v) for v in msg["error"])
        err = AttackFailedError.of(name, phase, line, tb)
        err.isolation = level
        raise err
    outputs, baseline = msg["ok"]
    return Isolated(outputs, baseline, str(msg["isolation"]))
