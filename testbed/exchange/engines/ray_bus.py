"""Ray engine: parties as Ray actors on a local cluster, the bus in the driver.

Each actor holds the private data of one group of parties (assigned round-robin), shipped once
when the actor starts. :meth:`RayBus.local` runs ``fn(party_data, *args)`` *on the actor holding
that party* and returns the result to the driver, where the protocol code runs; :meth:`send`,
the defenses, the guard and the transcript are the in-process bus's, unchanged. The driver keeps
no party data at all, so a protocol that tried to read it other than through ``local`` would fail
here rather than silently work.

The local cluster binds to 127.0.0.1 (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, node address
127.0.0.1), sends no usage statistics, starts no dashboard, and keeps its session files in a
folder inside the run directory (``ray-tmp/``) when it runs for ``testbed run``, reached through a
short link under /tmp (Ray's Unix socket paths are limited to ~107 bytes); without a run
directory, or with ``temp_root``, in a short temporary folder there. Folder and link are removed on
:meth:`close` after every process of that session has exited. If Ray was already initialised by
the caller, the bus uses that cluster and leaves it running.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from testbed.errors import TestbedError
from testbed.exchange.bus import Bus
from testbed.exchange.engines._batch import in_call_order, run_in_order
from testbed.registry import PluginConfig

__all__ = ["RayBus", "RayEngineConfig", "RaySession", "session_processes"]


class RayEngineConfig(PluginConfig):
    actors: int | None = Field(
        None, gt=0, description="actor processes (client groups); default: the cluster's CPUs"
    )
    num_cpus: int = Field(2, gt=0, description="CPUs of the local cluster")
    temp_root: str | None = Field(
        None,
        description="where the short session folder is created (default: inside the run "
        "directory, reached through a short link under /tmp; /tmp without a run directory)",
    )
    shutdown_timeout: float = Field(
        20.0, gt=0, description="seconds to wait for the session's processes to exit"
    )
    preload: list[str] = Field(
        ["protocols"],
        description="modules each actor imports when it starts (so that the first protocol "
        "call does not pay for the imports)",
    )


def _ray():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    try:
        import ray
    except ImportError:
        raise TestbedError(
            "engine: ray is not installed; install the optional extra with pip install '.[ray]'"
        ) from None
    return ray


def session_processes(marker: str) -> list[int]:
    """PIDs of live processes whose command line mentions ``marker`` (the session folder)."""
    pids = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(") ", 1)[-1][:1]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            pids.append(int(entry.name))
    return pids


class RaySession:
    """A local Ray cluster owned by this process, with its own temporary folder."""

    def __init__(
        self,
        num_cpus: int = 2,
        temp_root: str | None = None,
        shutdown_timeout: float = 20.0,
        run_dir: str | os.PathLike | None = None,
    ):
        self.ray = _ray()
        self.shutdown_timeout = shutdown_timeout
        self.owned = False
        self._link: str | None = None
        self._real: str | None = None
        if temp_root is None and run_dir is not None:
            # the session's files in the run directory; Ray sees the short link's path
            self._real = tempfile.mkdtemp(prefix="ray-tmp-", dir=run_dir)
            self.temp_dir = tempfile.mkdtemp(prefix="rtb", dir="/tmp")
            os.rmdir(self.temp_dir)
            os.symlink(self._real, self.temp_dir)
            self._link = self.temp_dir
        else:
            self.temp_dir = tempfile.mkdtemp(prefix="rtb", dir=temp_root or "/tmp")
        try:
            self.ray.init(
                num_cpus=num_cpus,
                include_dashboard=False,
                _temp_dir=self.temp_dir,
                _node_ip_address="127.0.0.1",
                log_to_driver=False,
                logging_level="ERROR",
                # workers import protocol functions by name: give them the driver's import path
                runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}},
            )
            self.owned = True
        except BaseException:
            self._cleanup()
            raise

    def stop(self) -> None:
        """Shut the cluster down, wait for its processes, remove its folder."""
        if self.owned:
            self.ray.shutdown()
            self.owned = False
        self._cleanup()

    def _cleanup(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        while session_processes(self.temp_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = session_processes(self.temp_dir)
        for pid in left:  # only processes of this session (their command line names its folder)
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                continue
        if self._link is not None:
            os.unlink(self._link)
            shutil.rmtree(self._real, ignore_errors=True)
        else:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        if left:
            raise TestbedError(
                f"ray engine: {len(left)} session processes did not exit within "
                f"{self.shutdown_timeout:.0f} s and were killed"
            )


class _PartyGroup:
    """Actor body: holds some parties' private data and runs functions on it."""

    def __init__(self, parties: Mapping[str, Any], blas_threads: int | None = None, preload=()):
        import importlib

        for module in preload:
            importlib.import_module(module)
        self._parties = dict(parties)
        if blas_threads is not None:  # same BLAS threading as the driver: same floating point
            from testbed.threads import limit_blas_threads

            limit_blas_threads(blas_threads)

    def run(self, party: str, fn, args, kwargs):
        return fn(self._parties[party], *args, **kwargs)

    def run_batch(self, calls):
        """Run ``(party, fn, args, kwargs)`` calls in order (:func:`run_in_order`)."""
        return run_in_order(calls, self._parties)

    def pid(self) -> int:
        return os.getpid()


def _driver_blas_threads() -> int | None:
    from threadpoolctl import threadpool_info

    counts = {i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"}
    return counts.pop() if len(counts) == 1 else None


class RayBus(Bus):
    """:class:`~testbed.exchange.bus.Bus` whose :meth:`local` runs at the Ray actor holding the party.

    Parameters are those of :class:`~testbed.exchange.bus.Bus` plus ``config`` (:class:`RayEngineConfig`).
    Use as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        defenses=(),
        guard=None,
        ledger=None,
        on_send=None,
        parties=None,
        *,
        config: RayEngineConfig | None = None,
        transcript=None,
        run_dir=None,
    ):
        super().__init__(
            defenses,
            guard=guard,
            ledger=ledger,
            on_send=on_send,
            parties=None,
            transcript=transcript,
        )
        self.config = config or RayEngineConfig()
        parties = dict(parties or {})
        self.ray = _ray()
        self.session = None
        if not self.ray.is_initialized():
            self.session = RaySession(
                self.config.num_cpus,
                self.config.temp_root,
                self.config.shutdown_timeout,
                run_dir=run_dir,
            )
        self._actors = []
        self._where: dict[str, Any] = {}
        try:
            self._start(parties)
        except BaseException:
            self.close()
            raise

    def _start(self, parties: Mapping[str, Any]) -> None:
        ray = self.ray
        n_cpu = int(ray.cluster_resources().get("CPU", 1))
        k = max(1, min(self.config.actors or n_cpu, len(parties) or 1))
        names = list(parties)
        groups = [names[i::k] for i in range(k)]
        actor_cls = ray.remote(num_cpus=0)(_PartyGroup)
        for group in groups:
            if not group:
                continue
            data = ray.put({p: parties[p] for p in group})  # shipped once
            actor = actor_cls.remote(data, _driver_blas_threads(), tuple(self.config.preload))
            self._actors.append(actor)
            for p in group:
                self._where[p] = actor
        ray.get([a.pid.remote() for a in self._actors])  # wait until every actor is up

    @property
    def party_names(self) -> list[str]:
        return list(self._where)

    def _actor(self, party: str):
        try:
            return self._where[party]
        except KeyError:
            known = ", ".join(self._where) or "(none)"
            raise TestbedError(f"no party {party!r} on this bus; parties: {known}") from None

    def _get(self, refs):
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise

    def local(self, party: str, fn, /, *args, **kwargs):
        """Run ``fn(party_data, *args, **kwargs)`` on the actor holding ``party``."""
        return self._get(self._actor(party).run.remote(party, fn, args, kwargs))

    def local_map(self, calls: Iterable[Sequence[Any]]) -> list[Any]:
        """Run several ``(party, fn, *args)`` calls: one task per actor with all of its
        parties' calls (in call order), the actors concurrently; results in call order. The
        first failing call (in call order) raises, as on the plain bus."""
        by_actor: dict[int, tuple[Any, list[int], list[tuple]]] = {}
        calls = list(calls)
        for i, c in enumerate(calls):
            actor = self._actor(c[0])
            entry = by_actor.setdefault(id(actor), (actor, [], []))
            entry[1].append(i)
            entry[2].append((c[0], c[1], tuple(c[2:]), {}))
        groups = list(by_actor.values())
        replies = self._get([actor.run_batch.remote(batch) for actor, _, batch in groups])
        return in_call_order(len(calls), [(idx, got) for (_, idx, _), got in zip(groups, replies)])

    def close(self) -> None:
        for a in self._actors:
            self.ray.kill(a)
        self._actors = []
        self._where = {}
        if self.session is not None:
            session, self.session = self.session, None
            session.stop()

    def __enter__(self) -> RayBus:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
