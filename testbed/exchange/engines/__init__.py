"""Execution engines: where the parties' local computations run.

``inprocess`` (default): the plain :class:`~testbed.exchange.bus.Bus`; every party lives in this process;
with ``engine_params: {workers: k}`` (k > 1), or ``auto`` (the default: one per CPU for runs
whose parties hold at least ``pool.AUTO_MIN_ROWS`` rows) the parties live in k worker processes
(:class:`~testbed.exchange.engines.pool.PoolBus`) and independent local computations run at once.
``ray``: :class:`~testbed.exchange.engines.ray_bus.RayBus`; parties live in Ray actors (one per client
group) on a local cluster bound to 127.0.0.1, or on a running cluster named by
``engine_params.address`` or ``RAY_ADDRESS`` (``ray_cluster.py``, docs/guide/scale.md); the transcript,
defenses and guard stay here. Needs the optional extra ``pip install '.[ray]'``.

Protocol code reaches private data only through ``bus.local(party, fn, *args)``, so the same
protocol runs unchanged on either engine and, for the same seed, produces the same transcript and
results (tests/test_engine_ray.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from testbed.errors import ScenarioError
from testbed.exchange.bus import Bus
from testbed.exchange.engines.pool import InProcessEngineConfig, PoolBus, resolve_workers

__all__ = ["ENGINES", "open_bus", "open_reference_bus", "reference_engine"]

ENGINES = ("inprocess", "ray")


def _engine_config(cls, params: Mapping[str, Any]):
    try:
        return cls(**params)
    except Exception as exc:  # pydantic ValidationError -> one line naming the field
        if not isinstance(exc, ValidationError):
            raise
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ScenarioError(f"engine_params.{loc}: {err['msg']}") from None


@contextmanager
def open_bus(
    engine: str,
    params: Mapping[str, Any] | None = None,
    /,
    run_dir: str | Path | None = None,
    **bus_kwargs,
) -> Iterator[Bus]:
    """A bus for ``engine``; engine resources (Ray actors, the local cluster and its temporary
    files) are released when the block exits, whatever happens inside it. ``run_dir``: the
    run directory, where the Ray engine keeps its session files."""
    params = dict(params or {})
    if engine == "inprocess":
        cfg = _engine_config(InProcessEngineConfig, params)
        workers = resolve_workers(cfg.workers, bus_kwargs.get("parties"))
        if workers == 1:
            yield Bus(**bus_kwargs)
            return
        bus = PoolBus(workers=workers, **bus_kwargs)
        try:
            yield bus
        except BaseException:  # interrupted or failed: the workers' results are not wanted
            bus.close(now=True)
            raise
        bus.close()
        return
    if engine == "ray":
        from testbed.exchange.engines.ray_bus import (  # ray: the ray engine only
            RayBus,
            RayEngineConfig,
        )

        cfg = _engine_config(RayEngineConfig, params)
        bus = RayBus(config=cfg, run_dir=run_dir, **bus_kwargs)
        try:
            yield bus
        finally:
            bus.close()
        return
    raise ScenarioError(f"engine: unknown engine {engine!r}; choose from {', '.join(ENGINES)}")


#: the scenario's engine while the testbed computes a protocol's reference (testbed.run.evaluate)
_REFERENCE_ENGINE: ContextVar[tuple[str, dict]] = ContextVar(
    "reference_engine", default=("inprocess", {})
)


@contextmanager
def reference_engine(engine: str, params: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Within the block, :func:`open_reference_bus` places work as the scenario's engine does."""
    token = _REFERENCE_ENGINE.set((engine, dict(params or {})))
    try:
        yield
    finally:
        _REFERENCE_ENGINE.reset(token)


@contextmanager
def open_reference_bus(parties: Mapping[str, Any]) -> Iterator[Bus]:
    """A bus holding ``parties`` for the testbed's own central computations (a protocol's
    ``reference``), so their independent per-party solves run at once (``bus.local_map``).

    The in-process engine with the scenario's ``workers`` (outside a run, and for a Ray
    scenario whose cluster is already gone: ``workers: auto``). Nothing is sent on it: no guard,
    no defenses, no transcript entry. Results do not depend on where the calls ran."""
    engine, params = _REFERENCE_ENGINE.get()
    with open_bus("inprocess", params if engine == "inprocess" else {}, parties=parties) as bus:
        yield bus
