"""Ray engine: parties as Ray actors on a private local cluster or a running one, the bus in
the driver.

Each actor holds the private data of one group of parties (assigned round-robin, spread over
the nodes, or pinned to nodes by ``placement``), shipped once
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
the caller, the bus uses that cluster and leaves it running. With ``address`` (or
``RAY_ADDRESS``) it joins a running cluster instead (:mod:`ray_cluster`, docs/guide/scale.md).

A node, raylet or actor process that dies ends the call waiting on it with an
:class:`~testbed.errors.EngineFault` (exit 1) naming what died and the parties it held.
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from testbed.errors import EngineFault, TestbedError
from testbed.exchange.bus import Bus
from testbed.exchange.engines._batch import in_call_order, run_in_order
from testbed.exchange.engines.ray_cluster import (
    ClusterConnection,
    check_address,
    cluster_address,
    death_line,
    mute_error_listener,
    party_list,
    plan_groups,
    ray_verbosity,
)
from testbed.exchange.engines.raylet_watch import RayletWatch
from testbed.registry import PluginConfig, check_parties
from testbed.threads import limit_blas_threads

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
    address: str | None = Field(
        None,
        description="HOST:PORT of a running Ray cluster's head (the port of `ray start --head "
        "--port`), or 'auto': join it instead of starting a private local cluster ('local'); "
        "default: the RAY_ADDRESS environment variable, else 'local'",
    )
    connect_timeout: float = Field(
        5.0, gt=0, description="seconds to wait for the cluster at address to answer"
    )
    placement: dict[str, str] = Field(
        {},
        description="party -> a custom resource of the cluster (`ray start --resources`): the "
        "party's actor runs on a node that offers it; other parties are spread over the nodes",
    )
    py_modules: list[str] = Field(
        [],
        description="more packages to ship to a running cluster's workers with the testbed's "
        "own (third-party plugins not installed on its nodes)",
    )

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        return None if v is None else check_address(v.strip())

    @field_validator("placement")
    @classmethod
    def _placement(cls, v: dict[str, str], info) -> dict[str, str]:
        check_parties(list(v), info)
        return v

    @model_validator(mode="after")
    def _private_only(self):
        if self.address not in (None, "local"):
            for name in ("num_cpus", "temp_root"):
                if name in self.model_fields_set:
                    raise ValueError(
                        f"{name} is for a private local cluster; the cluster at "
                        f"{self.address} has its own"
                    )
        return self


def _ray():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    try:
        import ray  # ray: optional engine
    except ImportError:
        raise TestbedError(
            "engine: ray is not installed; install the optional extra with pip install '.[ray]'"
        ) from None
    return ray


def session_processes(marker: str, also: str = "") -> list[int]:
    """PIDs of live processes whose command line mentions ``marker`` (the session folder), and
    ``also`` when given."""
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
        if marker in cmd and also in cmd and state != "Z":
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
        # one node on 127.0.0.1 (the variable also refuses other nodes: a running cluster is
        # joined through engine_params.address instead, ray_cluster.py)
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        self.ray = _ray()
        self.shutdown_timeout = shutdown_timeout
        self.owned = False
        self._raylet: int | None = None
        self._watch: RayletWatch | None = None
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
        self._unmute = mute_error_listener()
        try:
            verbose = ray_verbosity()
            self.ray.init(
                address="local",  # a private cluster, whatever RAY_ADDRESS says
                num_cpus=num_cpus,
                include_dashboard=False,
                _temp_dir=self.temp_dir,
                _node_ip_address="127.0.0.1",
                log_to_driver=verbose,
                logging_level="INFO" if verbose else "ERROR",
                # workers import protocol functions by name: give them the driver's import path
                runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}},
            )
            self.owned = True
            # the raylet's death is seen at the end even when the actors finished the protocol
            self._raylet = next(iter(session_processes(self.temp_dir, "/raylet/raylet")), None)
            if self._raylet is not None:  # its death is named at once, not after Ray's 15 s
                self._watch = RayletWatch(self._raylet, self._last_line, self._end_now)
        except BaseException:
            self._unmute()
            self._cleanup()
            raise

    def stop(self, after_fault: bool = False) -> None:
        """Shut the cluster down, wait for its processes, remove its folder. ``after_fault``:
        a part of the session died (the raylet, an actor), so what is left of it is killed
        after a short wait, without an error of its own that would hide the fault's line."""
        self.claim()
        died = (
            self.owned
            and self._raylet is not None
            and not session_processes(self.temp_dir, "/raylet/raylet")
        )
        if self.owned:
            self.ray.shutdown()
            self.owned = False
        self._unmute()
        self._cleanup(after_fault or died)
        if died and not after_fault:
            raise EngineFault(self.raylet_line())

    def raylet_died(self) -> bool:
        """Whether this cluster's raylet is gone (killed, crashed)."""
        return self._raylet is not None and not session_processes(self.temp_dir, "/raylet/raylet")

    def raylet_line(self) -> str:
        return f"ray engine: the local cluster's raylet (pid {self._raylet}) died during the run"

    def claim(self) -> None:
        """The driver's own path handles the end of the session: the raylet's watcher stands
        down (:mod:`~testbed.exchange.engines.raylet_watch`)."""
        if self._watch is not None:
            self._watch.claim()

    def _last_line(self) -> str:
        return (
            f"{self.raylet_line()}; nothing of this run was kept (its unfinished directory is "
            "removed by the next run into the same folder)"
        )

    def _end_now(self) -> None:
        """What is left of the session, killed and removed (the process ends right after)."""
        self._kill_and_remove()

    def _kill_and_remove(self) -> list[int]:
        """Kill the session's processes still running and remove its folder (the link Ray
        saw and the folder in the run directory); returns the pids found still running."""
        left = session_processes(self.temp_dir)
        for pid in left:  # only processes of this session (their command line names its folder)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        if self._link is not None:
            os.unlink(self._link)
        shutil.rmtree(self._real or self.temp_dir, ignore_errors=True)
        return left

    def _cleanup(self, after_fault: bool = False) -> None:
        wait = min(self.shutdown_timeout, 2.0) if after_fault else self.shutdown_timeout
        deadline = time.monotonic() + wait
        while session_processes(self.temp_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = self._kill_and_remove()
        if left and not after_fault:
            raise EngineFault(
                f"ray engine: {len(left)} session processes did not exit within "
                f"{self.shutdown_timeout:.0f} s and were killed"
            )


class _PartyGroup:
    """Actor body: holds some parties' private data and runs functions on it."""

    def __init__(self, parties: Mapping[str, Any], blas_threads: int | None = None, preload=()):
        for module in preload:
            importlib.import_module(module)
        self._parties = dict(parties)
        if blas_threads is not None:  # same BLAS threading as the driver: same floating point
            limit_blas_threads(blas_threads)

    def run(self, party: str, fn, args, kwargs):
        return fn(self._parties[party], *args, **kwargs)

    def run_batch(self, calls):
        """Run ``(party, fn, args, kwargs)`` calls in order (:func:`run_in_order`)."""
        return run_in_order(calls, self._parties)

    def where(self) -> tuple[int, str, str]:
        """(pid, node id, node IP) of this actor."""
        import ray  # ray: optional engine

        return os.getpid(), ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()


def _driver_blas_threads() -> int | None:
    from threadpoolctl import threadpool_info  # threadpoolctl: validate imports ray_bus

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
        self.session: RaySession | ClusterConnection | None = None
        self._fault = False
        if not self.ray.is_initialized():
            joined = cluster_address(self.config.address)
            if joined is None:
                self.session = RaySession(
                    self.config.num_cpus,
                    self.config.temp_root,
                    self.config.shutdown_timeout,
                    run_dir=run_dir,
                )
            else:
                self._private_only(joined)
                self.session = ClusterConnection(
                    *joined, self.config.connect_timeout, self.config.py_modules
                )
        self._actors = []
        self._where: dict[str, Any] = {}
        #: actor id (hex) -> the parties it holds and where it runs (pid, node id, node IP)
        self.actors: dict[str, dict] = {}
        try:
            self._start(parties)
        except BaseException:
            self.close()
            raise

    def _private_only(self, joined: tuple[str, str]) -> None:
        """num_cpus and temp_root describe a private cluster; RAY_ADDRESS names another."""
        for name in ("num_cpus", "temp_root"):
            if name in self.config.model_fields_set:
                raise TestbedError(
                    f"engine_params.{name} is for a private local cluster, but {joined[1]} "
                    f"names the running cluster at {joined[0]}; remove one of them"
                )

    @property
    def nodes(self) -> dict[str, str]:
        """party -> id of the Ray node its actor runs on."""
        return {p: a["node"] for a in self.actors.values() for p in a["parties"]}

    def _start(self, parties: Mapping[str, Any]) -> None:
        ray = self.ray
        offered = ray.cluster_resources()
        n_cpu = int(offered.get("CPU", 1))
        names = list(parties)
        groups = plan_groups(names, self.config.placement, self.config.actors or n_cpu)
        for resource in {r for r, _ in groups if r is not None} - set(offered):
            custom = sorted(
                k
                for k in offered
                if k not in ("CPU", "GPU", "memory", "object_store_memory")
                and not k.startswith("node:")
            )
            raise TestbedError(
                f"engine_params.placement: no node of the cluster offers the resource "
                f"{resource!r} (custom resources: {', '.join(custom) or 'none'}); "
                "give nodes resources with `ray start --resources`"
            )
        actor_cls = ray.remote(num_cpus=0)(_PartyGroup)
        for resource, group in groups:
            if not group:
                continue
            opts = (
                {"resources": {resource: 1e-3}} if resource else {"scheduling_strategy": "SPREAD"}
            )
            data = ray.put({p: parties[p] for p in group})  # shipped once
            actor = actor_cls.options(**opts).remote(
                data, _driver_blas_threads(), tuple(self.config.preload)
            )
            self._actors.append(actor)
            for p in group:
                self._where[p] = actor
            self.actors[actor._actor_id.hex()] = {
                "parties": group,
                "pid": None,
                "node": None,
                "ip": None,
            }
        # wait until every actor is up; where it runs names it when it dies
        places = self._get([a.where.remote() for a in self._actors])
        for actor, (pid, node, ip) in zip(self._actors, places):
            self.actors[actor._actor_id.hex()].update(pid=pid, node=node, ip=ip)

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
        errors = self.ray.exceptions
        try:
            return self.ray.get(refs)
        except errors.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except (
            errors.RayActorError,
            errors.NodeDiedError,
            errors.ObjectLostError,
            errors.WorkerCrashedError,
            errors.RaySystemError,
        ) as exc:
            self._fault = True  # a node, raylet or actor died: one line, Ray's text on --debug
            if isinstance(self.session, RaySession):
                self.session.claim()
            if isinstance(self.session, RaySession) and self.session.raylet_died():
                raise EngineFault(
                    f"{self.session.raylet_line()}, and with it the actors holding "
                    + party_list(self._where)
                ) from exc
            raise death_line(self.ray, exc, self.actors) from exc

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
        if not self._fault:  # after a death, disconnecting ends the job's actors
            for a in self._actors:
                self.ray.kill(a)
        self._actors = []
        self._where = {}
        if self.session is not None:
            session, self.session = self.session, None
            if isinstance(session, RaySession):
                session.stop(after_fault=self._fault)
            else:
                session.stop()

    def __enter__(self) -> RayBus:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
