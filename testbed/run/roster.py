"""Stage 2: the World of a run — a Roster of Parties, the protocol, defenses and public info.

The protocol's driver code receives the :class:`Roster`, a mapping of party name to
:class:`PartyHandle`: names and public sizes, no rows, and no way to reach them. Local
computations run on the party through the bus (``bus.local(party, fn, ...)``), which an engine
executes where the party lives (this process, a worker process, a Ray actor).

The private side of the World (every party's rows, noise masks, membership labels) is for the
testbed: it hands the parties' data to the engine that hosts them
(:func:`testbed.run.exchange.run_protocol`), to the privacy guard, the central reference and the
scorer; attacks never receive it (:mod:`testbed.run.attack` runs them in another process on a
serialised View). Which rows the guard protects is the World's, not the protocol's: every
party's, except the parties the scenario's data marks public (:attr:`World.public_data`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from testbed.contract import provides
from testbed.data.datasets import NoiseSpec, PartyData, build_parties
from testbed.data.membership import draw_candidates, hold_out, reindex
from testbed.data.population import LazyPopulation, Population, population_rows
from testbed.data.public import gaussian_prior
from testbed.errors import DriverReadError, ScenarioError
from testbed.exchange.bus import PublicInfo
from testbed.exchange.ledger import PrivacyLedger
from testbed.registry import DATASETS, DEFENSES, PARTITIONERS, PROTOCOLS, TRANSFORMS
from testbed.run.scenario import ResolvedScenario
from testbed.seeding import component_rng

__all__ = ["PartyHandle", "Roster", "World", "build_world"]


@dataclass(frozen=True)
class PartyHandle:
    """What the protocol's driver holds for a party: its name and public size, never its rows."""

    name: str
    n: int
    dim: int

    def __getattr__(self, attr: str) -> Any:
        if attr in ("X", "y", "source_index"):
            raise DriverReadError(
                f"it read party {self.name!r}'s private `{attr}` on the driver; run local work "
                f"at the party with bus.local({self.name!r}, fn, ...)"
            )
        raise AttributeError(attr)


class Roster(Mapping[str, PartyHandle]):
    """The run's participants, in scenario order: name -> :class:`PartyHandle`.

    This is what ``Protocol.run`` receives: handles only. It holds no party's data, so nothing
    the protocol's driver code can call on it returns rows; the engine gets each party's data
    from the testbed.
    """

    def __init__(self, handles: Mapping[str, PartyHandle]):
        self._handles = dict(handles)

    @classmethod
    def of(cls, data: Mapping[str, PartyData]) -> Roster:
        return cls({p: PartyHandle(p, d.n, int(d.X.shape[1])) for p, d in data.items()})

    def __getitem__(self, name: str) -> PartyHandle:
        try:
            return self._handles[name]
        except KeyError:
            known = ", ".join(self._handles) or "(none)"
            raise KeyError(f"no party {name!r}; parties: {known}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._handles)

    def __len__(self) -> int:
        return len(self._handles)

    def __repr__(self) -> str:
        return f"Roster({', '.join(self._handles)})"


@dataclass
class World:
    """The roster stage's record: everything a run needs before the protocol starts.

    ``roster`` is what the protocol gets; ``parties`` (the same parties' data) stays on the
    testbed's side: the engine that hosts them, the guard, the central reference and the scorer.
    ``noise_masks``, ``meta["membership"]`` and ``meta["population"]`` are ground truth (scorer
    only). ``public_data``: the parties whose rows the scenario makes public (``data.public`` and
    the partitioner's own), which the privacy guard does not protect.
    """

    rs: ResolvedScenario  # the scenario and its plugins' configs (built once, at load time)
    parties: dict[str, PartyData]
    noise_masks: dict[str, np.ndarray]
    protocol: Any
    defenses: list
    ledger: PrivacyLedger
    public: PublicInfo
    meta: dict = field(default_factory=dict)
    roster: Roster | None = None
    public_data: tuple[str, ...] = ()

    def __post_init__(self):
        if self.roster is None:
            self.roster = Roster.of(self.parties)

    @property
    def scenario(self):  # testbed.scenario.schema.Scenario
        return self.rs.scenario

    @property
    def config_hash(self) -> str:
        return self.rs.config_hash


def build_world(rs: ResolvedScenario | Any) -> World:
    """Load data, partition, inject noise, transform; instantiate protocol and defenses;
    assemble the public information and the roster the protocol gets."""
    rs = ResolvedScenario.of(rs)
    sc, cfg, seed = rs.scenario, rs.configs, rs.seed
    ds_plugin = DATASETS.get(sc.data.dataset.name)(cfg.dataset)
    dataset = ds_plugin.load(component_rng(seed, "data"))
    held = keep = None
    if sc.membership is not None:  # held out before partitioning: no party holds these rows
        dataset, keep, held = hold_out(
            dataset, sc.membership.nonmembers, component_rng(seed, "membership", "holdout")
        )
    partitioner = PARTITIONERS.get(sc.data.partition.name)(cfg.partition)
    noise = [NoiseSpec.model_validate(n) for n in sc.data.noise]
    parties, masks = build_parties(
        dataset,
        partitioner,
        sc.data.party_names(),
        component_rng(seed, "partition"),
        noise,
        component_rng(seed, "noise"),
    )
    drawn_from = parties  # the population is drawn from the parties as partitioned
    if keep is not None:
        parties = reindex(parties, keep)
    tr = None
    if sc.data.transform is not None:
        tr = TRANSFORMS.get(sc.data.transform.name)(cfg.transform)
        parties = {p: tr.apply(d) for p, d in parties.items()}
        if held is not None:
            held = tr.apply(PartyData("heldout", held)).X
    defenses = [DEFENSES.get(d.name)(c) for d, c in zip(sc.defenses, cfg.defenses)]
    population = LazyPopulation(
        _population_maker(ds_plugin, dataset, drawn_from, seed, tr, defenses, list(parties))
    )
    parties, held = _enforce(defenses, parties, held)
    pool_meta: dict[str, Any] = {}
    cand_extra: dict[str, Any] = {}
    if held is not None:
        cp = draw_candidates(
            parties,
            np.asarray(held, dtype=np.float64),
            sc.membership.members,
            component_rng(seed, "membership", "candidates"),
            sc.membership.targets,
        )
        cand_extra = {"candidates": cp.candidates}
        pool_meta = {"membership": cp.labels}  # ground truth: the scorer only
    # with the knob defenses' overrides (validated with the scenario)
    protocol = PROTOCOLS.get(sc.protocol.name)(cfg.protocol_run)
    for dfn in defenses:  # a calibration that rests on the protocol's structure reads it here
        dfn.bind_protocol(sc.protocol.name, cfg.protocol_run, {p: v.n for p, v in parties.items()})
    d = next(iter(parties.values())).X.shape[1]
    pool = np.vstack([v.X for v in parties.values()])
    prior_mean, prior_cov, prior = gaussian_prior(
        pool, component_rng(seed, "public_prior"), max(v.n for v in parties.values())
    )
    public = PublicInfo(
        protocol=sc.protocol.name,
        params=protocol.public_params(),
        parties=tuple(parties),
        dim=d,
        prior=prior,
        extra={
            "dataset": sc.data.dataset.name,
            "sizes": {p: v.n for p, v in parties.items()},
            "prior_mean": prior_mean,
            "prior_cov": prior_cov,
            **dict(dataset.meta.get("public", {})),
            **cand_extra,
        },
    )
    return World(
        rs,
        parties,
        masks,
        protocol,
        defenses,
        PrivacyLedger(accountant=_accountant(defenses, protocol)),
        public,
        {"dataset_meta": dict(dataset.meta), **pool_meta, "population": population},
        public_data=tuple(
            p
            for p in parties
            if p in set(sc.data.public) | set(partitioner.public_parties(list(parties)))
        ),
    )


def _accountant(defenses, protocol) -> str:
    """The ledger's accountant: the one the Gaussian mechanisms of the run name (their
    ``accountant`` param; each calibrates its target with it), PLD when none does. Two
    mechanisms naming different accountants are refused: one ledger composes every release."""
    named = {
        str(c.accountant)
        for c in [d.config for d in defenses] + [protocol.config]
        if isinstance(getattr(c, "accountant", None), str)
    }
    if len(named) > 1:
        raise ScenarioError(
            f"the run's mechanisms name different accountants ({', '.join(sorted(named))}); "
            "one ledger composes every release: give them the same `accountant`"
        )
    return named.pop() if named else "pld"


def _enforce(defenses, parties, held):
    """Each defense's enforced assumptions (:meth:`~defenses._base.Defense.prepare_party`, e.g.
    rows clipped to the claim's norm bound) on the rows of the parties it protects, and the same
    on the rows those parties are scored against (the held-out rows here, their population rows
    in :func:`_population_maker`), so that scoring compares like with like."""
    for dfn in defenses:
        protected = [p for p in parties if dfn.protects(p)]
        if not protected:
            continue
        parties = {p: dfn.prepare_party(d) if p in protected else d for p, d in parties.items()}
        if held is not None:
            held = dfn.prepare_rows(PartyData("heldout", held)).X
    return parties, held


def _population_maker(ds_plugin, dataset, drawn_from, seed, tr, defenses, names):
    """The population rows (:func:`~testbed.data.population.population_rows`, their own rng
    stream), transformed like the parties' rows and prepared by the defenses that protect each
    party, as a function for :class:`~testbed.data.population.LazyPopulation`. It keeps the
    dataset only where the population is drawn from its held-out rows."""
    if provides(ds_plugin, "fresh_rows"):
        dataset = None  # fresh draws do not read it

    def make() -> Population:
        population = population_rows(
            ds_plugin, dataset, drawn_from, component_rng(seed, "population")
        )
        if tr is not None:
            population = Population(
                {
                    p: tr.apply(PartyData("population", rows, population.labels[p])).X
                    for p, rows in population.rows.items()
                },
                population.labels,
                population.method,
            )
        for dfn in defenses:
            protected = [p for p in names if dfn.protects(p)]
            if not protected:
                continue
            population = Population(
                {
                    p: dfn.prepare_rows(PartyData("population", rows)).X if p in protected else rows
                    for p, rows in population.rows.items()
                },
                population.labels,
                population.method,
            )
        return population

    return make
