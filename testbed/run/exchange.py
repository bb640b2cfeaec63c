"""Stage 3: the protocol runs on the bus; the record is what went over the wire.

``protocol.run(roster, bus, rng)``: the protocol's driver code gets the :class:`Roster` (handles,
no rows); the testbed hands each party's data to the engine, which runs the party's local work
where it placed that data. Defenses transform every outgoing message before it is logged, the
guard checks it, and the transcript keeps it (spilling to the run directory past its memory
threshold). The guard is the testbed's (:func:`world_guard`: which rows are private comes from
the World, never from the protocol), and it also checks everything the protocol releases
(:func:`released_values`) before anyone sees it.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import PluginFault
from testbed.exchange.bus import PrivacyGuard, Transcript
from testbed.exchange.engines import open_bus
from testbed.exchange.guard import readings
from testbed.exchange.ledger import PrivacyLedger
from testbed.exchange.schema import Channel
from testbed.registry import plugin_phase
from testbed.run.progress import RoundProgress
from testbed.run.roster import World
from testbed.seeding import component_rng

__all__ = ["Exchange", "released_values", "run_protocol", "world_channel", "world_guard"]


@dataclass(frozen=True)
class Exchange:
    """What the protocol produced and sent: its result, the transcript and the privacy ledger."""

    result: Any  # protocols.ProtocolResult
    transcript: Transcript
    ledger: PrivacyLedger
    guard: dict  # what the guard checked and found (results.json "guard")
    seconds: float
    #: what ``run_protocol(then=...)`` returned (the reference stage's evaluation), else None
    after: Any = None


class _Quiet:
    """No progress (``testbed run -q``, the library's default)."""

    def __call__(self, env) -> None:
        pass

    def close(self) -> None:
        pass


def expected_rounds(protocol) -> int | None:
    """The rounds a run of ``protocol`` is expected to take, for the progress line's ETA: its
    config's ``iterations`` and a final round, when it has that field (an early stop ends
    sooner: the ETA is then an upper bound); None when unknown."""
    k = getattr(protocol.config, "iterations", None)  # a config field, not a hook
    return int(k) + 1 if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None


def world_guard(world: World, mode: str | None = None) -> PrivacyGuard | None:
    """The run's privacy guard (None when the scenario turns it off): every party's rows are
    private except the parties the scenario's data marks public (``World.public_data``);
    threshold ``guard_rel_tol``; ``mode`` overrides the scenario's ``guard``."""
    sc = world.scenario
    mode = sc.guard_mode if mode is None else mode
    if mode == "off":
        return None
    return PrivacyGuard.for_parties(
        world.parties,
        world.public_data,
        rel_tol=sc.guard_rel_tol,
        mode=mode,
        public_numbers=public_numbers(world),
    )


def world_channel(world: World) -> Channel:
    """The run's typed channel (:mod:`testbed.exchange.schema`): the protocol's declared
    messages and releases, the run's participants (parties and the senders the protocol
    declares), each party's public number of rows, the data's dimension and the defenses."""
    proto = world.protocol
    names = [*world.parties, *type(proto).extra_senders]
    rows = {p: int(d.n) for p, d in world.parties.items()}
    return Channel.of(proto, names, rows, world.public.dim, [d.name for d in world.defenses])


def public_numbers(world: World) -> list[float]:
    """The numbers of the public configuration a message may carry whatever the private rows
    (:class:`~testbed.exchange.guard.PrivacyGuard`'s ``public_numbers``): the loose numbers the
    guard itself reads in the resolved protocol and defense params, the data's dimension and the
    number of parties."""
    cfg = world.rs.configs
    params = [c.model_dump(mode="json") for c in (cfg.protocol, *cfg.defenses)]
    loose = [a for p in params for path, a in readings(p) if path == "numbers"]
    return [
        float(world.public.dim),
        float(len(world.parties)),
        *(x for a in loose for x in a.tolist()),
    ]


def released_values(result: Any) -> dict[str, Any]:
    """Everything a protocol's result releases (results.json, the report, and what attacks get
    as ``public.extra["released"]``), by field."""
    fields = ("estimates", "history", "outputs", "diagnostics", "detection", "mode", "deviations")
    return {f: getattr(result, f) for f in fields if hasattr(result, f)}


def _check_result(name: str, result: Any) -> None:
    """A protocol's ``run`` returns a ProtocolResult (its ``estimates`` a mapping); anything
    else is one line naming the protocol, not an AttributeError from the scorer."""
    estimates = getattr(result, "estimates", None)
    if not isinstance(estimates, Mapping):
        got = (
            type(result).__name__
            if estimates is None
            else f"estimates of {type(estimates).__name__}"
        )
        raise PluginFault(f"protocol {name!r}: run() must return a ProtocolResult, got {got}")


_FROZEN = [0]  # nesting depth of frozen_heap
_FROZEN_LOCK = threading.Lock()


@contextlib.contextmanager
def frozen_heap():
    """Run the block with every object that exists now out of the garbage collector's sight
    (:func:`gc.freeze`): a run's process holds about 260 000 objects once torch, POT and the
    plugins are imported, and a full collection over them (0.12 s here) lands in whatever code
    allocates when it comes, most often the bus's envelopes. Objects made inside the block are
    collected as usual; the frozen ones go back to the collector when the outermost block ends."""
    with _FROZEN_LOCK:
        if _FROZEN[0] == 0:
            gc.freeze()
        _FROZEN[0] += 1
    try:
        yield
    finally:
        with _FROZEN_LOCK:
            _FROZEN[0] -= 1
            if _FROZEN[0] == 0:
                gc.unfreeze()


def run_protocol(
    world: World,
    progress: bool = False,
    spill_dir: Path | None = None,
    then: Callable[[Any], Any] | None = None,
) -> Exchange:
    """Run the protocol on the scenario's engine; the guard checks every message and, at the
    end, everything the protocol releases. With ``spill_dir`` (the run directory) payloads past
    the transcript's memory threshold go to a file there.

    ``then``: a function of the protocol's result that shows nothing to anyone (``testbed
    run``'s reference and accuracy stage), run while the guard's worker searches the last batch
    and the released values on the other core; the guard's answer is awaited after it, so a
    leak there stops the run as before, only once ``then`` has returned (or failed: the guard's
    error then comes first). Its value is :attr:`Exchange.after`. ``seconds`` is the
    protocol's time and what the run waited for the guard, without ``then``."""
    sc = world.scenario
    seed = sc.seed
    guard = world_guard(world)
    defs = [
        (dfn, component_rng(seed, "defense", i, dfn.name)) for i, dfn in enumerate(world.defenses)
    ]
    channel = world_channel(world)  # the protocol's declarations, read once, before it runs
    bar = RoundProgress(sc.name, expected_rounds(world.protocol)) if progress else _Quiet()
    spilling = Transcript(spill_dir=spill_dir) if spill_dir is not None else None
    after = None
    t0 = time.perf_counter()
    try:
        with (
            frozen_heap(),
            open_bus(
                sc.engine,
                sc.engine_params,
                run_dir=spill_dir,
                defenses=defs,
                guard=guard,
                ledger=world.ledger,
                on_send=bar,
                parties=world.parties,  # the testbed places the data; the protocol never holds it
                transcript=spilling,
            ) as bus,
        ):
            bus.channel = channel
            # what the protocol's code prints goes to stderr: stdout carries only the
            # testbed's own output (its summary and paths), which scripts read
            with plugin_phase("protocol", world.protocol.name, "run"), redirect_stdout(sys.stderr):
                result = world.protocol.run(world.roster, bus, component_rng(seed, "protocol"))
            _check_result(world.protocol.name, result)
            channel.check_released(result)  # released values are typed like messages
            # the guard checks what it has not yet, before the transcript closes, and what the
            # protocol releases, in one search (on the worker while `then` runs)
            bus.finish(released_values(result) if guard is not None else None, wait=then is None)
        elapsed = time.perf_counter() - t0
        if then is not None:
            try:
                after = then(result)
            except Exception:
                bus.await_guard()  # a leak in the last batch is the run's first fault
                raise
            t1 = time.perf_counter()
            bus.await_guard()
            elapsed += time.perf_counter() - t1
        transcript = bus.transcript
        if guard is not None and guard.messages_checked != len(transcript):
            # the testbed's own guard object, which the protocol never received: a bus whose
            # guard was replaced or switched off by the protocol's code checked fewer messages
            # (a cheap check of the obvious tampering; code that patches the driver can do more)
            raise PluginFault(
                f"protocol {world.protocol.name!r}: the privacy guard checked "
                f"{guard.messages_checked} of the {len(transcript)} messages sent; the "
                "protocol's code replaced or switched off the testbed's guard"
            )
    finally:
        bar.close()
        if spilling is not None:
            spilling.close()
        if guard is not None:
            guard.close()  # the worker forgets this run's rows
    return Exchange(
        result=result,
        transcript=transcript,
        ledger=world.ledger,
        guard={"mode": "off"} if guard is None else guard.summary(),
        seconds=elapsed,
        after=after,
    )
