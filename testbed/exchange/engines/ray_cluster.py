"""The Ray engine on a cluster it does not own: connecting by address, shipping the testbed's
code, placing the party groups on nodes, and saying in one line what died.

``engine_params: {address: HOST:PORT}`` (or ``RAY_ADDRESS``, as Ray's own tools read it) names
the head of a running cluster (the port ``ray start --head --port`` opened). The driver joins it
as a job: it starts no process and stops none, and when it disconnects Ray ends the job's actors
and releases the code it uploaded, so the cluster is left as it was found. The packages the
actors import (``testbed``, ``protocols``, ``attacks``, ``defenses`` and any named in
``py_modules``) travel with Ray's runtime environment (``py_modules``): zipped here, stored in
the cluster's GCS, unpacked by each node; nothing is downloaded from the internet. The nodes need
the same Python and third-party packages (numpy, POT, ...) installed; docs/guide/scale.md.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import re
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.errors import EngineFault, TestbedError

__all__ = [
    "SHIPPED",
    "ClusterConnection",
    "check_address",
    "cluster_address",
    "death_line",
    "mute_error_listener",
    "party_list",
    "plan_groups",
    "ray_verbosity",
]

#: the packages every actor imports (the party data's types, the protocols' local functions)
SHIPPED = ("testbed", "protocols", "attacks", "defenses")


def check_address(address: str) -> str:
    """``address`` as given, if it is ``auto``, ``local`` or ``HOST:PORT``; ValueError else."""
    if address in ("auto", "local"):
        return address
    if "://" in address:
        raise ValueError(
            f"{address!r}: give the head's address as HOST:PORT (its GCS port, as `ray start "
            "--head --port` printed it); Ray Client addresses (ray://) are not supported"
        )
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r}: expected HOST:PORT, 'auto' or 'local'")
    return address


def cluster_address(configured: str | None) -> tuple[str, str] | None:
    """``(address, where it came from)`` of the running cluster to join, or None for a private
    local cluster: ``engine_params.address``, else ``RAY_ADDRESS``; ``local`` means private."""
    if configured is not None:
        source, address = "engine_params.address", configured
    elif os.environ.get("RAY_ADDRESS", "").strip():
        source, address = "RAY_ADDRESS", os.environ["RAY_ADDRESS"].strip()
        try:
            check_address(address)
        except ValueError as exc:
            raise TestbedError(f"RAY_ADDRESS: {exc}") from None
    else:
        return None
    return None if address == "local" else (address, source)


def _reachable(address: str, source: str, timeout: float) -> None:
    """Fail in one line, within ``timeout``, when nothing listens at ``address`` (Ray's own
    connect waits for minutes there)."""
    if address == "auto":
        return  # Ray finds the cluster started on this machine, or says none is running
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise TestbedError(
            f"{source}: no Ray cluster at {address} ({why} within {timeout:g} s); start one "
            "with `ray start --head --port=PORT` or correct the address"
        ) from None


def ray_verbosity() -> bool:
    """Whether Ray's own messages go to the terminal: only with ``--debug`` (which turns the
    ``testbed.engine`` logger to DEBUG), else the engine's one-line errors are all one sees."""
    return logging.getLogger("testbed.engine").isEnabledFor(logging.DEBUG)


def mute_error_listener() -> Callable[[], None]:
    """Send what Ray's driver prints of the cluster's error channel (a raylet's last log lines
    when it dies, a node marked dead) to the ``testbed.engine`` logger instead of this
    process's stdout, which carries the testbed's own output; with ``--debug`` Ray prints it
    as usual. Returns the undo.

    Ray prints that channel from a thread of its own whatever ``log_to_driver`` says, through
    the module function ``ray._private.worker.print_to_stdstream``, looked up at each call: the
    only place to turn it (a private name; another Ray version without it prints as before)."""
    from ray._private import worker  # ray: optional engine

    original = getattr(worker, "print_to_stdstream", None)
    if original is None or ray_verbosity():
        return lambda: None
    log = logging.getLogger("testbed.engine")

    def to_log(data, ignore_prefix=False):
        for line in data.get("lines", ()):
            log.debug("(%s) %s", data.get("pid"), line)

    worker.print_to_stdstream = to_log

    def undo() -> None:
        if worker.print_to_stdstream is to_log:
            worker.print_to_stdstream = original

    return undo


def _package_dirs(names: Sequence[str]) -> list[str]:
    dirs = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise TestbedError(f"engine_params.py_modules: {name!r} is not an importable package")
        dirs.append(str(Path(next(iter(spec.submodule_search_locations))).resolve()))
    return dirs


class ClusterConnection:
    """This process as a driver (a job) of a running cluster; :meth:`stop` disconnects."""

    owned = True  # the connection, not the cluster: stop() only disconnects

    def __init__(self, address: str, source: str, timeout: float, py_modules: Sequence[str]):
        import ray  # ray: optional engine

        self.ray, self.address = ray, address
        _reachable(address, source, timeout)
        verbose = ray_verbosity()
        env = {
            "py_modules": _package_dirs([*SHIPPED, *py_modules]),
            "excludes": ["__pycache__", "*.pyc"],
        }
        self._unmute = mute_error_listener()
        # the head answers (checked above): a refusal (a wrong token) is known within about
        # connect_timeout seconds of Ray's retries, not its default 20, unless the user set it
        wait = "RAY_gcs_server_port_wait_time_s"
        own_wait = wait not in os.environ
        if own_wait:
            os.environ[wait] = str(max(1, math.ceil(timeout)))
        try:
            ray.init(
                address=address,
                runtime_env=env,
                log_to_driver=verbose,
                logging_level="INFO" if verbose else "ERROR",
                namespace=f"testbed-{os.getpid()}",
            )
        except Exception as exc:  # wrong token, version mismatch, not a Ray head
            self._unmute()
            raise TestbedError(
                f"{source}: could not join the Ray cluster at {address}: "
                + " ".join(str(exc).split())[:300]
            ) from None
        finally:
            if own_wait:
                os.environ.pop(wait, None)

    def stop(self) -> None:
        try:
            self.ray.shutdown()
        finally:
            self._unmute()


def plan_groups(
    names: Sequence[str], placement: Mapping[str, str], k: int
) -> list[tuple[str | None, list[str]]]:
    """``(resource or None, parties)`` per actor: one actor for each resource named in
    ``placement`` with the parties pinned to it, the other parties round-robin in ``k`` (at
    most one per party) actors spread over the nodes."""
    unknown = [p for p in placement if p not in names]
    if unknown:
        raise TestbedError(
            f"engine_params.placement: {unknown[0]!r} is not a party; parties: "
            + ", ".join(list(names)[:10])
        )
    pinned: dict[str, list[str]] = {}
    for p in names:
        if p in placement:
            pinned.setdefault(placement[p], []).append(p)
    rest = [p for p in names if p not in placement]
    k = max(1, min(k, len(rest)))
    return [*pinned.items(), *((None, rest[i::k]) for i in range(k) if rest[i::k])]


_NODE_ID = re.compile(r"[Nn]ode[ _]?[Ii][Dd][:= ]+([0-9a-f]{56})")
_PID = re.compile(r"\bpid: (\d+)")


def _nodes(ray, timeout: float = 3.0) -> dict[str, tuple[bool, str]] | None:
    """node id -> (alive, IP), as the cluster's head tells it; None when it does not answer."""
    got: dict[str, Any] = {}

    def ask() -> None:
        try:
            got["nodes"] = {
                n["NodeID"]: (bool(n["Alive"]), n.get("NodeManagerAddress", "?"))
                for n in ray.nodes()
            }
        except Exception:  # the head is gone too
            pass

    t = threading.Thread(target=ask, name="ray-nodes", daemon=True)
    t.start()
    t.join(timeout)
    return got.get("nodes")


def party_list(parties) -> str:
    """Party names in natural order (client_2 before client_10), the first five and a count."""
    parties = sorted(
        parties, key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p)]
    )
    shown = ", ".join(parties[:5])
    return shown + (f", ... ({len(parties)})" if len(parties) > 5 else "")


def death_line(ray, exc: BaseException, actors: Mapping[str, dict]) -> EngineFault:
    """One line for a Ray fault: the node or the actor process that died and the parties it
    held (on a node's death, those of every actor that ran there).

    ``actors``: actor id (hex) -> ``{"parties": [...], "node": id, "ip": ..., "pid": ...}``
    (node, IP and pid are None for an actor that died while starting)."""
    nodes = _nodes(ray)
    info = actors.get(getattr(exc, "actor_id", None) or "")
    node = info["node"] if info else None
    if node is None:  # died while starting, or not one actor's death: Ray's text may tell
        found = _NODE_ID.search(str(exc))
        node = found.group(1) if found else None
    if node is None and nodes is not None:  # a node the head knows is dead
        node = next((a["node"] for a in actors.values() if not nodes.get(a["node"], (1,))[0]), None)
    if info is None and node is None:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        return EngineFault(f"ray engine: {type(exc).__name__}: {first}")
    if node is None and nodes is not None:  # the actor died before it said where it runs, and
        found = _PID.search(str(exc))  # no node is dead: not "an unknown node died"
        pid = f" (pid {found.group(1)})" if found else ""
        return EngineFault(
            f"ray engine: the actor process{pid} holding {party_list(info['parties'])} died "
            "while starting"
        )
    alive, ip = (nodes or {}).get(node, (nodes is None, (info or {}).get("ip") or "?"))
    where = f"node {node[:8]} at {ip}" if node else "an unknown node"
    if nodes is None:
        return EngineFault(
            f"ray engine: the cluster's head stopped answering; the actor holding "
            f"{party_list(info['parties'] if info else [])} on {where} is gone"
        )
    if not alive:
        held = [p for a in actors.values() if a is info or a["node"] == node for p in a["parties"]]
        return EngineFault(
            f"ray engine: {where} died, and with it the actors holding {party_list(held)}"
        )
    if info is None:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        return EngineFault(f"ray engine: {type(exc).__name__} on {where}: {first}")
    return EngineFault(
        f"ray engine: the actor process (pid {info['pid']} on {where}) holding "
        f"{party_list(info['parties'])} died"
    )
