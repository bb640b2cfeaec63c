"""Protocol plugin contract.

A protocol runs between parties that talk only through the bus, returns a
:class:`ProtocolResult`, and provides :meth:`Protocol.reference`: the same quantities computed
centrally with POT, against which accuracy is measured.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from testbed.data.datasets import PartyData
from testbed.data.partitions import PartyRows, Side
from testbed.exchange.bus import SERVER, Bus
from testbed.exchange.schema import Field, Message
from testbed.registry import Plugin

__all__ = ["Protocol", "ProtocolResult", "drive", "drive_many"]


@dataclass(frozen=True)
class ProtocolResult:
    """What a protocol run produced.

    estimates : scalar results by name (e.g. ``{"wasserstein": 3.2}``), compared with the
        reference of the same name.
    history : per-round series (e.g. the estimate and the bound A^(k) at each round).
    outputs : other results (arrays allowed: contribution scores, detection scores, ...).
    mode : which variant ran (e.g. ``"paper"`` or ``"accurate"``), shown in every report.
    deviations : named deviations from the paper, shown in every report.
    diagnostics : instrumentation computed by the testbed, not part of the protocol (never sent).
    detection : per-row noisy-point scores, ``{detector: {party: scores}}`` (higher = more likely
        noisy; one score per row of that party's data). The runner scores them against the
        scenario's noise masks (ROC-AUC, precision/recall at the true noise rate).
    """

    estimates: Mapping[str, float]
    history: Mapping[str, list[float]] = field(default_factory=dict)
    outputs: Mapping[str, Any] = field(default_factory=dict)
    mode: str = "paper"
    deviations: tuple[str, ...] = ()
    diagnostics: Mapping[str, Any] = field(default_factory=dict)
    detection: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)


class Protocol(Plugin):
    """Base class of protocol plugins. ``__init__`` stores the config and nothing else.

    A protocol does not decide what the privacy guard protects: the testbed guards every
    party's rows except data the scenario marks public (``data.public``, or a partitioner's
    public parties such as distill_split's transfer set), in every message and in everything
    ``run`` returns. Methods a protocol might define for that (``private_arrays``,
    ``exempt_arrays``, ``raw_row_kinds`` in older versions) are never called.
    """

    #: the typed channel (:mod:`testbed.exchange.schema`): every message kind the protocol may
    #: send (a closed set of exact names) -> its :class:`~testbed.exchange.schema.Message`
    #: schema (payload and meta fields). The bus refuses at send time any kind, field, type or
    #: length outside it; a protocol that declares none does not run
    messages: ClassVar[Mapping[str, Message]] = {}
    #: the schema of what the result releases: ``{"estimates": Record(...), "history": ...,
    #: "outputs": ..., "diagnostics": ..., "detection": ...}``; a result field not declared
    #: must be empty (``mode`` and ``deviations`` are checked as text)
    released: ClassVar[Mapping[str, Field]] = {}
    #: the declared kinds (``tuple(messages)``, filled in for each subclass that declares
    #: ``messages``); the contract kit refuses any other kind, and a defense's ``kinds`` globs
    #: must each match one of them
    message_kinds: ClassVar[tuple[str, ...]] = ()
    #: who sends messages besides the parties; a defense's ``senders`` must name parties or these
    extra_senders: ClassVar[tuple[str, ...]] = (SERVER,)
    #: how far the estimates may be from :meth:`reference` on the protocol's contract scenario,
    #: relative (|estimate - reference| / |reference|; Frobenius norms for arrays): one number for
    #: every compared key, or ``{key: tolerance}`` (keys left out are not compared). ``None`` =
    #: not declared (the contract kit fails). Measured values of the built-ins: docs/guide/plugins.md.
    reference_tolerance: ClassVar[float | Mapping[str, float] | None] = None
    #: the accuracy quantity that is the run's one error (the x-axis of leakage against accuracy
    #: in reports and sweep summaries), as globs tried in order; a glob matching several
    #: quantities scores them as one vector (relative error in the Euclidean norm). Empty: the
    #: first accuracy quantity (:func:`testbed.run.evaluate.headline_accuracy`)
    headline_accuracy: ClassVar[tuple[str, ...]] = ()
    #: per-party scores whose *ranking* is what a user of the protocol relies on (a glob, e.g.
    #: FedBary's ``"contribution_*"``): when set and it matches two or more accuracy quantities,
    #: the run's headline accuracy is that ranking against the central one (Spearman and top-k
    #: overlap), and the ``headline_accuracy`` error is kept beside it as a secondary figure
    headline_ranking: ClassVar[str | None] = None
    #: scenario the contract kit runs it on. A relative path is looked up next to the module
    #: defining the class and up to its package root, then in the current directory, then in
    #: the testbed's scenarios/ (testbed.testing.checks.resolve_contract_scenario).
    #: Default: scenarios/contract_tiny_<name>.yaml when it exists, else a two-party Gaussian.
    contract_scenario: ClassVar[str | None] = None
    #: how many parties a scenario of this protocol has (``data.parties``): at least
    #: ``min_parties``, at most ``max_parties`` (None: no limit); ``testbed validate`` refuses
    #: another count naming the field and its line. Roles named in the params (``clients``,
    #: ``validation``, ...) are checked by the Config against the scenario's parties
    #: (``testbed.registry.check_parties``)
    min_parties: ClassVar[int] = 1
    max_parties: ClassVar[int | None] = None
    #: its messages carry :class:`~testbed.measure.Measure` payloads, which the measure defenses
    #: (``gaussian_measure_noise``, ``subsample_support``, ...) act on
    sends_measures: ClassVar[bool] = False
    #: knob defense name -> the parameter of this protocol it sets (``{"support_size": "k"}``;
    #: ``None``: the protocol has no such knob); a knob left out sets the parameter of its own name
    knob_params: ClassVar[Mapping[str, str | None]] = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "messages" in cls.__dict__:
            cls.message_kinds = tuple(cls.messages)

    @abstractmethod
    def run(self, parties: Mapping[str, Any], bus: Bus, rng: np.random.Generator) -> ProtocolResult:
        """Run the protocol; every inter-party value goes through ``bus``.

        ``parties`` is the run's :class:`~testbed.run.roster.Roster`: party name -> handle
        (``name``, ``n`` rows, ``dim``), never the rows themselves. Work on a party's own data
        runs at that party: ``bus.local(party, fn, *args)`` calls ``fn(party_data, *args)``
        where the engine placed it; its result reaches another party only through
        ``bus.send``."""

    @abstractmethod
    def reference(self, parties: Mapping[str, PartyData]) -> dict[str, float]:
        """The same quantities computed centrally (exact POT), keyed like ``estimates``."""

    def evaluate(
        self, result: ProtocolResult, parties: Mapping[str, PartyData]
    ) -> dict[str, float]:
        """Task quantities of a finished run that need data no party holds alone (e.g. the pooled
        rows), computed on the scoring side like :meth:`reference`; keyed like ``reference`` so
        the runner scores them (default: none). Never sent, never shown to attacks."""
        return {}

    def reference_key(self) -> str:
        """What :meth:`reference` depends on besides the data (default: the whole config); the
        runner memoises references by it."""
        return json.dumps(self.config.model_dump(mode="json"), sort_keys=True)

    def public_params(self) -> dict[str, Any]:
        """Parameters everyone knows (default: the whole config)."""
        return self.config.model_dump(mode="json")

    def roles(self, parties: Mapping[str, PartyData]) -> dict[str, str]:
        """Party name -> role, for reports (default: every party is a client)."""
        return {p: "client" for p in parties}

    def membership_truth(
        self, parties: Mapping[str, PartyData]
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Ground truth of a membership experiment the protocol itself carries (scorer only):
        target -> (candidate rows, member flags), decided by dataset row indices, never by
        comparing row values (default: none; the scenario's ``membership:`` pool is separate)."""
        return {}

    def exact_ot_pairs(self, rows: PartyRows) -> list[tuple[Side, Side]] | None:
        """The exact OT problems a run and its :meth:`reference` solve, for the memory preflight
        (:mod:`testbed.scenario.resources`, which counts the largest): pairs of sides, each a
        party name, a tuple of party names (their rows pooled) or an int (that many atoms, e.g.
        a support size). ``rows``: each party's rows as known before the data is loaded
        (:class:`~testbed.data.partitions.PartyRows`). ``None`` (default): an OT between any two
        parties, each with its own rows."""
        return None

    def needs_labels(self) -> str | None:
        """What this configuration reads the parties' labels for (``party.y``), or ``None``
        (default: it never does). ``testbed validate`` refuses it, before any data is loaded,
        on a dataset whose config says it has no labels (a file without ``label_column``)."""
        return None

    def check_rows(self, rows: PartyRows) -> tuple[tuple, str] | None:
        """A parameter the parties' rows cannot satisfy, known before the data is loaded
        (``testbed validate`` and ``testbed run`` refuse it, :mod:`testbed.scenario.resources`):
        ``(field location, what is wrong)``, or ``None`` (default). ``rows`` is exact or an
        upper bound (a random split): refuse only what even the bound cannot satisfy."""
        return None

    def client_releases(
        self, parties: Sequence[str]
    ) -> dict[str, list[tuple[str, int, str]]] | None:
        """What each party releases in one run, when the params and the party names tell:
        party -> ``[(message kind, count, what it is), ...]``, for a defense's release budget
        (``gaussian_measure_noise``'s ``releases``). ``None`` (default): not known in advance."""
        return None

    def central_clusters(self, D: np.ndarray) -> np.ndarray | None:
        """The cluster labels the protocol's clustering gives on the central distance matrix
        ``D`` (scoring only: ``clustering_ari`` compares the run's ``outputs["clusters"]`` with
        them). ``None`` (default): the protocol clusters nothing."""
        return None

    @classmethod
    def barycentric_push_check(
        cls, params: Any, push_max: float, sizes: Mapping[str, int]
    ) -> dict[str, Any] | None:
        """Whether, with ``params`` (the protocol's config as the run built it, or a mapping of
        params) and the parties' row counts ``sizes``, every support the
        protocol releases is a barycentric push of its party's rows by at most ``push_max``:
        ``{"holds": bool, "detail": str}``, what ``gaussian_measure_noise``'s tight calibration
        rests on. ``None`` (default): not declared, so the claim is not established."""
        return None


# ----------------------------------------------------------------------------- step generators
#: a protocol written as a generator: yields a list of ``(party, fn, *args)`` client calls (the
#: arguments of ``bus.local_map``), receives their results, returns its result
Steps = Generator[list, list, Any]


def drive(steps: Steps, bus: Bus) -> Any:
    """Run a step generator to the end, each batch of client calls through ``bus.local_map``;
    returns what the generator returns."""
    try:
        calls = next(steps)
        while True:
            calls = steps.send(bus.local_map(calls))
    except StopIteration as stop:
        return stop.value


def drive_many(
    steps: Iterable[Steps], bus: Bus, window: int, on_done: Callable[[int, Any], None]
) -> int:
    """Run independent step generators in lock step, at most ``window`` at a time.

    At each step the pending client calls of every unfinished generator go to one
    ``bus.local_map`` (an engine with remote parties then runs them together: one round trip per
    step instead of one per run), and the generators are resumed in the order they were taken
    from ``steps``; a finished run's slot is given to the next generator after the step. The
    messages they send are therefore logged in an order that depends only on the inputs and
    ``window``. Each generator receives exactly the results of its own calls, so it computes what
    :func:`drive` would. ``steps`` is read lazily (a run's generator is made when it starts), and
    ``on_done(i, result)`` is called when the ``i``-th run finishes. Returns the number of runs."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    source = iter(steps)
    live: dict[int, Steps] = {}
    pending: dict[int, list] = {}
    started = 0

    def advance(i: int, value=None) -> None:
        try:
            pending[i] = next(live[i]) if value is None else live[i].send(value)
        except StopIteration as stop:
            pending.pop(i, None)
            del live[i]
            on_done(i, stop.value)

    def fill() -> None:
        nonlocal started
        while len(live) < window:
            gen = next(source, None)
            if gen is None:
                return
            i, started = started, started + 1
            live[i] = gen
            advance(i)

    fill()
    while pending:
        order = sorted(pending)
        flat = [c for i in order for c in pending[i]]
        results = bus.local_map(flat) if flat else []
        pos = 0
        for i in order:
            n = len(pending[i])
            advance(i, list(results[pos : pos + n]))
            pos += n
        fill()
    return started
