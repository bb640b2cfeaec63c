"""Toy protocols that break the protocol contract on purpose (registered by the tests that use
them, in a module-scoped fixture, never at import: the contract kit parametrises over every
registered protocol)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np

from testbed.api import Protocol, ProtocolResult
from testbed.exchange.bus import SERVER
from testbed.exchange.schema import Array, Message, Num, Record
from testbed.registry import PROTOCOLS, PluginConfig


def _mean(party):
    return party.X.mean(axis=0)


def _first_rows(party, k):
    return party.X[:k] + 1e-9  # a "debug sample": near-copies of private rows


#: the toys' message schemas: a party's mean, rows of the data's width
MEAN = Message(Array("f", ("d",)))
ROWS = Message(Array("f", ("*", "d")))


class LeakyMean(Protocol):
    """Distance between two parties' means, that also sends the server a sample of raw rows."""

    name = "toy_leaky_mean"
    Config = PluginConfig
    #: step -> schema; each class's ``messages`` are ``{"<name>.<step>": schema}``
    steps = {"mean": MEAN, "sample": ROWS}
    messages = {"toy_leaky_mean.mean": MEAN, "toy_leaky_mean.sample": ROWS}
    released = {"estimates": Record(mean_distance=Num(), distance=Num())}
    reference_tolerance = 1e-9

    def __init_subclass__(cls, **kw):
        cls.messages = {f"{cls.name}.{step}": m for step, m in cls.steps.items()}
        super().__init_subclass__(**kw)

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
    steps = {"mean": MEAN}

    def run(self, parties, bus, rng):
        a, b = list(parties)[:2]
        m = {
            p: bus.send(p, SERVER, f"{self.name}.mean", bus.local(p, _mean)).payload for p in (a, b)
        }
        return ProtocolResult(estimates={"mean_distance": float(np.linalg.norm(m[a] - m[b]))})


class Sleeper(PrivateMean):
    """Sleeps in its run (a test kills the process meanwhile)."""

    name = "toy_sleeper"

    def run(self, parties, bus, rng):
        import time

        time.sleep(600)
        return super().run(parties, bus, rng)


class UndeclaredKind(PrivateMean):
    """Sends a kind it does not declare."""

    name = "toy_undeclared_kind"

    def run(self, parties, bus, rng):
        bus.send(SERVER, list(parties)[0], f"{self.name}.hello", 1.0)
        return super().run(parties, bus, rng)


class Unseeded(PrivateMean):
    """Adds noise from a global generator, not the rng it was given."""

    name = "toy_unseeded"
    steps = {"mean": MEAN, "noise": Message(Num())}

    def run(self, parties, bus, rng):
        bus.send(SERVER, list(parties)[0], f"{self.name}.noise", np.random.default_rng().normal())
        return super().run(parties, bus, rng)


class DriverReader(PrivateMean):
    """Reads a party's rows through the handle its driver code holds."""

    name = "toy_driver_reader"

    def run(self, parties, bus, rng):
        rows = parties[list(parties)[0]].X
        return ProtocolResult(estimates={"mean_distance": float(np.abs(rows).sum())})


class RenamedEstimate(PrivateMean):
    """Estimates under another key than its reference's."""

    name = "toy_renamed_estimate"

    def run(self, parties, bus, rng):
        r = super().run(parties, bus, rng)
        return ProtocolResult(estimates={"distance": r.estimates["mean_distance"]})


class GuardOff(PrivateMean):
    """Takes the guard off its bus, then sends a party's raw rows."""

    name = "toy_guard_off"
    steps = {"mean": MEAN, "rows": ROWS}

    def run(self, parties, bus, rng):
        bus.guard = None
        first = list(parties)[0]
        bus.send(first, SERVER, f"{self.name}.rows", bus.local(first, _first_rows, 5))
        return super().run(parties, bus, rng)


def _chatty_mean(party):
    print("chatty at the party")
    return party.X.mean(axis=0)


class Chatty(PrivateMean):
    """Prints from its driver code and from a party's local call."""

    name = "toy_chatty"

    def run(self, parties, bus, rng):
        print("chatty on the driver")
        a, b = list(parties)[:2]
        m = {
            p: bus.send(p, SERVER, f"{self.name}.mean", bus.local(p, _chatty_mean)).payload
            for p in (a, b)
        }
        return ProtocolResult(estimates={"mean_distance": float(np.linalg.norm(m[a] - m[b]))})


class OffReference(PrivateMean):
    """Reports twice the distance it computes."""

    name = "toy_off_reference"

    def run(self, parties, bus, rng):
        r = super().run(parties, bus, rng)
        return ProtocolResult(estimates={"mean_distance": 2 * r.estimates["mean_distance"]})


# ----------------------------------------------------------------------------- disguised copies
# Protocols that send every row in thin disguise (issue 22): the kit's no_private_rows must fail
# each, naming the transform; the scorecard must read each as a record leak.
def _public_maps(d: int):
    """A public rotation and a public affine map (fixed seed: anyone can undo them)."""
    g = np.random.default_rng(2024)
    Q, _ = np.linalg.qr(g.normal(size=(d, d)))
    return Q, g.normal(size=(d, d)) + 2 * np.eye(d), g.normal(size=d)


def _disguise(party, how: str):
    X = np.asarray(party.X, dtype=np.float64)
    Q, A, b = _public_maps(X.shape[1])
    if how == "raw":
        return X.copy()
    if how.startswith("x"):
        return X * float(how[1:])
    if how == "noise":  # 1e-5 relative noise, drawn where the data lives
        g = np.random.default_rng(7)
        return X * (1 + 1e-5 * g.normal(size=X.shape))
    if how == "columns":
        return X[:, ::-1].copy()
    if how == "rotation":
        return X @ Q
    if how == "affine":
        return X @ A + b
    if how == "moments":
        return {"mean": X.mean(0), "cov": np.cov(X, rowvar=False, ddof=1)}
    if how == "projection":  # one number: the mean projected on a public direction
        return float(X.mean(0) @ Q[:, 0])
    raise ValueError(how)


def _noise_rows(party, seed: int):
    """N(0, I) draws of the party's size and width, made without looking at the rows."""
    return np.random.default_rng(seed).normal(size=party.X.shape)


class Disguised(PrivateMean):
    """The private mean protocol that also sends the server its rows under ``how``."""

    how = "raw"
    steps = {"mean": MEAN, "rows": ROWS}

    def run(self, parties, bus, rng):
        for p in list(parties)[:2]:
            bus.send(p, SERVER, f"{self.name}.rows", bus.local(p, _disguise, self.how))
        return super().run(parties, bus, rng)


def _disguised(how: str, name: str, doc: str, **extra):
    rows = {
        "moments": Message(Record(mean=Array("f", ("d",)), cov=Array("f", ("d", "d")))),
        "projection": Message(Num()),
    }.get(how, ROWS)
    return type(
        name,
        (Disguised,),
        {
            "name": f"toy_{how.replace('.', '_')}",
            "how": how,
            "__doc__": doc,
            "steps": {"mean": MEAN, "rows": rows},
            **extra,
        },
    )


def two_gaussians(name: str, protocol: str, extra: str = "") -> str:
    """A scenario's text: alice holds 30 points near 0, bob 20 near 2 (d = 3), and ``protocol``
    runs between them; ``extra``: more top-level YAML lines."""
    return f"""\
name: {name}
seed: 7
data:
  dataset:
    name: gaussians
    params: {{d: 3, components: [{{n: 30, mean: 0.0}}, {{n: 20, mean: 2.0}}]}}
  partition: {{name: class_subsets, params: {{classes: [[0], [1]]}}}}
  parties: [alice, bob]
protocol: {{name: {protocol}}}
{extra}"""


TWO_ROWS = Path(__file__).parent / "_toy_two_rows.yaml"
IID = Path(__file__).parent / "_toy_iid.yaml"

RawRows = _disguised("raw", "RawRows", "Sends every raw row.")
DISGUISES = (
    _disguised("x1.0001", "Scaled4", "Rows x 1.0001."),
    _disguised("x1.00001", "Scaled5", "Rows x 1.00001."),
    _disguised("noise", "Noise5", "Rows + 1e-5 relative noise."),
    _disguised("columns", "Columns", "Rows with their columns in a public order."),
    _disguised("rotation", "Rotated", "Rows under a public rotation."),
    _disguised("affine", "Affine", "Rows under a public affine map."),
    _disguised(
        "moments",
        "Moments",
        "Mean and covariance of a 2-row party.",
        contract_scenario=str(TWO_ROWS),
    ),
)
#: toys that release no row: a mean alone (PrivateMean), one projected number
Projection = _disguised("projection", "Projection", "One number: the mean on a public axis.")


class NoiseSender(PrivateMean):
    """Sends the server N(0, I) draws of each party's size, made without looking at the rows, on
    data that are themselves N(0, I): distributional resemblance, no record leak."""

    name = "toy_noise_sender"
    steps = {"mean": MEAN, "rows": ROWS}
    contract_scenario = str(IID)

    def run(self, parties, bus, rng):
        for i, p in enumerate(list(parties)[:2]):
            bus.send(p, SERVER, f"{self.name}.rows", bus.local(p, _noise_rows, 100 + i))
        return super().run(parties, bus, rng)


def _noisy_rows(party, seed: int, sigma: float):
    """The party's rows plus N(0, sigma^2) noise (a "perturbed" release)."""
    return party.X + np.random.default_rng(seed).normal(0.0, sigma, size=party.X.shape)


class NoisyRows(PrivateMean):
    """The private mean protocol that also sends the server its rows with N(0, 0.05^2) noise:
    no exact copy, but every row within a small distance of what was sent (a record leak)."""

    name = "toy_noisy_rows"
    steps = {"mean": MEAN, "rows": ROWS}

    def run(self, parties, bus, rng):
        for i, p in enumerate(list(parties)[:2]):
            bus.send(p, SERVER, f"{self.name}.rows", bus.local(p, _noisy_rows, 200 + i, 0.05))
        return super().run(parties, bus, rng)


TOYS = (LeakyMean, PrivateMean, UndeclaredKind, Unseeded, OffReference)


@contextmanager
def registered(*classes, registry=PROTOCOLS):
    """Register ``classes`` in ``registry`` (default PROTOCOLS) for the duration of the block."""
    for cls in classes:
        if cls.name not in registry:
            registry.register(cls)
    try:
        yield
    finally:
        for cls in classes:
            registry._items.pop(cls.name, None)
            registry._origins.pop(cls.name, None)
