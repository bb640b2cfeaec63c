"""Toy protocols that break the protocol contract on purpose (registered by the tests that use
them, in a module-scoped fixture, never at import: the contract kit parametrises over every
registered protocol)."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from protocols import Protocol, ProtocolResult
from testbed.exchange.bus import SERVER
from testbed.registry import PROTOCOLS, PluginConfig


def _mean(party):
    return party.X.mean(axis=0)


def _first_rows(party, k):
    return party.X[:k] + 1e-9  # a "debug sample": near-copies of private rows


class LeakyMean(Protocol):
    """Distance between two parties' means, that also sends the server a sample of raw rows."""

    name = "toy_leaky_mean"
    Config = PluginConfig
    message_kinds = ("toy_leaky_mean.mean", "toy_leaky_mean.sample")
    reference_tolerance = 1e-9

    def run(self, parties, bus, rng):
        a, b = list(parties)[:2]
        means = {}
        for p in (a, b):
            means[p] = bus.send(p, SERVER, f"{self.name}.mean", bus.local(p, _mean)).payload
            bus.send(p, SERVER, f"{self.name}.sample", bus.local(p, _first_rows, 5))
        return ProtocolResult(
            estimates={"mean_distance": float(np.linalg.norm(means[a] - means[b]))}
        )

    def reference(self, parties):
        a, b = list(parties)[:2]
        return {"mean_distance": float(np.linalg.norm(parties[a].X.mean(0) - parties[b].X.mean(0)))}


class PrivateMean(LeakyMean):
    """The same without the sample: passes the kit."""

    name = "toy_private_mean"
    message_kinds = ("toy_private_mean.mean",)

    def run(self, parties, bus, rng):
        a, b = list(parties)[:2]
        m = {
            p: bus.send(p, SERVER, f"{self.name}.mean", bus.local(p, _mean)).payload for p in (a, b)
        }
        return ProtocolResult(estimates={"mean_distance": float(np.linalg.norm(m[a] - m[b]))})


class UndeclaredKind(PrivateMean):
    """Sends a kind it does not declare."""

    name = "toy_undeclared_kind"
    message_kinds = ("toy_undeclared_kind.mean",)

    def run(self, parties, bus, rng):
        bus.send(SERVER, list(parties)[0], f"{self.name}.hello", 1.0)
        return super().run(parties, bus, rng)


class Unseeded(PrivateMean):
    """Adds noise from a global generator, not the rng it was given."""

    name = "toy_unseeded"
    message_kinds = ("toy_unseeded.*",)

    def run(self, parties, bus, rng):
        bus.send(SERVER, list(parties)[0], f"{self.name}.noise", np.random.default_rng().normal())
        return super().run(parties, bus, rng)


class OffReference(PrivateMean):
    """Reports twice the distance it computes."""

    name = "toy_off_reference"
    message_kinds = ("toy_off_reference.mean",)

    def run(self, parties, bus, rng):
        r = super().run(parties, bus, rng)
        return ProtocolResult(estimates={"mean_distance": 2 * r.estimates["mean_distance"]})


TOYS = (LeakyMean, PrivateMean, UndeclaredKind, Unseeded, OffReference)


@contextmanager
def registered(*classes):
    """Register ``classes`` in PROTOCOLS for the duration of the block."""
    for cls in classes:
        if cls.name not in PROTOCOLS:
            PROTOCOLS.register(cls)
    try:
        yield
    finally:
        for cls in classes:
            PROTOCOLS._items.pop(cls.name, None)
            PROTOCOLS._origins.pop(cls.name, None)
