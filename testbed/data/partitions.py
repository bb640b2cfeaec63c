"""The built-in partitioners: how a dataset's rows are split among the parties (``iid``,
``quantity_skew``, ``dirichlet``, ``class_subsets``, ``shared_base``), each with what it can say
about the parties' sizes before any data is loaded (:class:`PartyRows`, for the memory preflight)
and the checks it makes against the scenario's parties when validated with them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, ClassVar

import numpy as np
from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from testbed.data.datasets import Dataset
from testbed.errors import DataError
from testbed.registry import PARTITIONERS, Plugin, PluginConfig, check_parties, scenario_parties

__all__ = [
    "ClassSubsets",
    "DirichletLabel",
    "Iid",
    "PartitionerPlugin",
    "PartyRows",
    "QuantitySkew",
    "SharedBase",
    "Side",
    "equal_rows",
]


#: one side of an exact OT problem: a party's rows, several parties' rows pooled, or a number
#: of atoms (e.g. a support size)
Side = str | tuple[str, ...] | int


@dataclass(frozen=True)
class PartyRows:
    """Rows each party receives, known from the scenario before any data is loaded (the memory
    preflight, :mod:`testbed.scenario.resources`): exact where the partition fixes them, an upper
    bound where it draws them at random. ``total`` bounds the rows of any parties together: the
    dataset's rows for a disjoint split, ``None`` when parties may share rows (then ``rows`` are
    exact)."""

    rows: Mapping[str, int]
    total: int | None

    def pooled(self, side: Side) -> int:
        """Rows (or atoms) of one side: an int is itself; names pool their parties' rows."""
        if isinstance(side, int):
            return side
        names = (side,) if isinstance(side, str) else side
        n = sum(self.rows.get(p, 0) for p in names)
        return n if self.total is None else min(n, self.total)

    def pair(self, a: Side, b: Side) -> tuple[int, int]:
        """The largest ``n_a x n_b`` an exact OT between sides ``a`` and ``b`` can have: the
        sides' rows, or, when together they could exceed ``total`` (a random disjoint split),
        the split of ``total`` between them that maximises the product."""
        na, nb = self.pooled(a), self.pooled(b)
        if self.total is None or isinstance(a, int) or isinstance(b, int):
            return na, nb
        if na + nb <= self.total:
            return na, nb
        x = min(na, max(self.total - nb, self.total // 2))
        return x, self.total - x

    def largest(self) -> int:
        """Rows of the largest party."""
        return max((self.pooled(p) for p in self.rows), default=0)


def equal_rows(n: int, parties: Sequence[str]) -> PartyRows:
    """An equal split of ``n`` rows (the first ``n mod k`` parties one row more)."""
    return PartyRows(dict(zip(parties, _sizes_or_equal(n, len(parties), None, ""))), n)


class PartitionerPlugin(Plugin):
    """Base class: ``split(dataset, parties, rng) -> {party: row indices}``."""

    #: the split reads the labels: ``testbed validate`` refuses it on a dataset without
    needs_labels: ClassVar[bool] = False

    def split(
        self, ds: Dataset, parties: Sequence[str], rng
    ) -> dict[str, np.ndarray]:  # pragma: no cover
        """Party name -> the indices of its rows in ``ds`` (required)."""
        raise NotImplementedError

    def party_rows(
        self, n: int, parties: Sequence[str], class_rows: Mapping[int, int] | None = None
    ) -> PartyRows | None:
        """The rows :meth:`split` gives each party of a dataset of ``n`` rows (``class_rows``:
        rows per label, when the dataset's parameters fix them), without the data: exact where
        the parameters fix them, else an upper bound. ``None`` (default): unknown; the memory
        preflight then assumes an equal split."""
        return None

    def check_rows(self, n: int, parties: Sequence[str]) -> tuple[tuple, str] | None:
        """A parameter that no split of a dataset of ``n`` rows among ``parties`` can satisfy,
        known before the data is loaded (``testbed validate`` and ``testbed run`` refuse it,
        :mod:`testbed.scenario.resources`): ``(field location under data.partition, what is
        wrong)``, or ``None`` (default). Refuse only what every draw would fail, not what a
        random split might."""
        return None

    def public_parties(self, parties: Sequence[str]) -> list[str]:
        """Parties whose rows this split makes public by design (e.g. a transfer set the server
        sends to every client): the privacy guard does not protect them (default: none)."""
        return []


def one_per_party(v: list | None, info: ValidationInfo, what: str) -> list | None:
    """A partitioner's per-party list (``sizes``, ``fractions``, ``classes``) has one entry per
    party of the scenario (checked when validated with the scenario, PluginConfig)."""
    parties = scenario_parties(info)
    if v is not None and parties is not None and len(v) != len(parties):
        raise ValueError(
            f"{len(v)} {what} for {len(parties)} part{'y' if len(parties) == 1 else 'ies'} "
            f"({', '.join(parties[:5])}"
            f"{', ...' if len(parties) > 5 else ''}); give one per party, in data.parties' order"
        )
    return v


def _sizes_or_equal(total: int, k: int, sizes: list[int] | None, where: str) -> list[int]:
    if sizes is None:
        base = [total // k] * k
        for i in range(total - sum(base)):
            base[i] += 1
        return base
    if len(sizes) != k:
        raise DataError(f"{where}: {len(sizes)} sizes for {k} parties")
    if sum(sizes) > total:
        raise DataError(f"{where}: requested {sum(sizes)} rows but the dataset has only {total}")
    return list(sizes)


class IidConfig(PluginConfig):
    sizes: list[int] | None = Field(
        None, description="rows per party (default: equal split of all rows)"
    )

    @field_validator("sizes")
    @classmethod
    def _pos(cls, v, info: ValidationInfo):
        if v is not None and any(s <= 0 for s in v):
            raise ValueError("every size must be positive")
        return one_per_party(v, info, "sizes")


@PARTITIONERS.register
class Iid(PartitionerPlugin):
    """Uniformly random disjoint split (optionally with given sizes)."""

    name = "iid"
    Config = IidConfig

    def party_rows(self, n, parties, class_rows=None):
        sizes = self.config.sizes
        if sizes is None:
            return equal_rows(n, parties)
        return PartyRows(dict(zip(parties, sizes)), n) if len(sizes) == len(parties) else None

    def check_rows(self, n, parties):
        sizes = self.config.sizes
        if sizes is None and len(parties) > n:
            return ("name",), (
                f"partition iid: {len(parties)} parties cannot each get a row of the dataset's "
                f"{n}; use fewer parties or more rows"
            )
        if sizes is not None and sum(sizes) > n:
            return ("params", "sizes"), (
                f"partition iid: the sizes ask for {sum(sizes)} rows; the dataset has {n}"
            )
        return None

    def split(self, ds, parties, rng):
        sizes = _sizes_or_equal(ds.n, len(parties), self.config.sizes, "partition iid")
        perm = rng.permutation(ds.n)
        out, start = {}, 0
        for p, s in zip(parties, sizes):
            out[p] = np.sort(perm[start : start + s])
            start += s
        return out


class QuantityConfig(PluginConfig):
    fractions: list[float] | None = Field(
        None, description="share of rows per party (sums to <= 1)"
    )
    beta: float = Field(
        1.0, gt=0, description="Dirichlet concentration when fractions are not given"
    )

    @field_validator("fractions")
    @classmethod
    def _frac(cls, v, info: ValidationInfo):
        if v is not None and (any(f <= 0 for f in v) or sum(v) > 1 + 1e-9):
            raise ValueError("fractions must be positive and sum to at most 1")
        return one_per_party(v, info, "fractions")


@PARTITIONERS.register
class QuantitySkew(PartitionerPlugin):
    """Random split with unequal sizes (given fractions, or Dirichlet(beta) fractions)."""

    name = "quantity_skew"
    Config = QuantityConfig

    def party_rows(self, n, parties, class_rows=None):
        fr = self.config.fractions
        if fr is None:  # Dirichlet fractions: any party may hold all but one row per other party
            return PartyRows(dict.fromkeys(parties, max(n - len(parties) + 1, 1)), n)
        if len(fr) != len(parties):
            return None
        return PartyRows({p: max(1, int(np.floor(f * n))) for p, f in zip(parties, fr)}, n)

    def split(self, ds, parties, rng):
        fr = self.config.fractions
        if fr is None:
            fr = rng.dirichlet(np.full(len(parties), self.config.beta))
        elif len(fr) != len(parties):
            raise DataError(
                f"partition quantity_skew: {len(fr)} fractions for {len(parties)} parties"
            )
        sizes = [max(1, int(np.floor(f * ds.n))) for f in fr]
        return Iid(IidConfig(sizes=sizes)).split(ds, parties, rng)


class DirichletConfig(PluginConfig):
    alpha: float = Field(0.5, gt=0, description="label-skew concentration (small = more skew)")
    min_size: int = Field(1, ge=1)


@PARTITIONERS.register
class DirichletLabel(PartitionerPlugin):
    """Label skew: each class is spread over parties with Dirichlet(alpha) proportions."""

    name = "dirichlet"
    Config = DirichletConfig
    needs_labels = True

    def party_rows(self, n, parties, class_rows=None):
        # random: a party holds at most what the others' min_size rows leave
        most = max(n - (len(parties) - 1) * self.config.min_size, 1)
        return PartyRows(dict.fromkeys(parties, most), n)

    def check_rows(self, n, parties):
        need = len(parties) * self.config.min_size
        if n < need:
            return ("params", "min_size"), (
                f"partition dirichlet: {len(parties)} parties of at least "
                f"min_size={self.config.min_size} rows need {need} rows; the dataset has {n}"
            )
        return None

    def split(self, ds, parties, rng):
        if ds.y is None:
            raise DataError("partition dirichlet needs labels")
        k = len(parties)
        for _ in range(100):
            buckets = [[] for _ in range(k)]
            for c in np.unique(ds.y):
                idx = rng.permutation(np.flatnonzero(ds.y == c))
                props = rng.dirichlet(np.full(k, self.config.alpha))
                cuts = (np.cumsum(props) * len(idx)).astype(int)[:-1]
                for b, part in zip(buckets, np.split(idx, cuts)):
                    b.extend(part.tolist())
            if min(len(b) for b in buckets) >= self.config.min_size:
                return {p: np.sort(np.asarray(b, dtype=np.int64)) for p, b in zip(parties, buckets)}
        raise DataError(
            f"partition dirichlet: could not give every party {self.config.min_size} rows"
        )


def _label_range(labels) -> str:
    s = sorted(labels)
    if not s:
        return "none"
    return f"{s[0]}..{s[-1]}" if s == list(range(s[0], s[-1] + 1)) else ", ".join(map(str, s))


def _some_class(v: list[int]) -> list[int]:
    if not v:
        raise ValueError("empty class list: every party holds at least one class")
    return v


class ClassSubsetsConfig(PluginConfig):
    classes: list[Annotated[list[Annotated[int, Field(ge=0)]], AfterValidator(_some_class)]] = (
        Field(description="labels held by each party, one list per party")
    )
    sizes: list[int] | None = Field(
        None,
        description="rows per party (default: all rows of its classes, shared evenly when classes overlap)",
    )

    @field_validator("classes")
    @classmethod
    def _per_party(cls, v, info: ValidationInfo):
        one_per_party(v, info, "class lists")
        labels = (info.context or {}).get("labels")  # the dataset's, when its config tells
        if labels is not None:
            for i, cs in enumerate(v):
                for c in cs:
                    if c not in labels:
                        raise ValueError(
                            f"class {c} (list {i}) is not a label of the dataset (its labels: "
                            f"{_label_range(labels)})"
                        )
        return v


@PARTITIONERS.register
class ClassSubsets(PartitionerPlugin):
    """Each party holds only the listed classes (shared classes are split evenly)."""

    name = "class_subsets"
    needs_labels = True
    Config = ClassSubsetsConfig

    def party_rows(self, n, parties, class_rows=None):
        cl, sizes = self.config.classes, self.config.sizes or []
        if len(cl) != len(parties):
            return None
        owners: dict[int, int] = {}
        for cs in cl:
            for c in cs:
                owners[int(c)] = owners.get(int(c), 0) + 1
        rows = {}
        for i, (p, cs) in enumerate(zip(parties, cl)):
            if i < len(sizes):
                rows[p] = sizes[i]
            elif class_rows is not None:  # a shared class is split evenly (array_split)
                rows[p] = sum(-(-class_rows.get(int(c), 0) // owners[int(c)]) for c in cs)
            else:
                rows[p] = n  # the classes' rows are unknown before loading
        return PartyRows(rows, n)

    def split(self, ds, parties, rng):
        if ds.y is None:
            raise DataError("partition class_subsets needs labels")
        cl = self.config.classes
        if len(cl) != len(parties):
            raise DataError(
                f"partition class_subsets: {len(cl)} class lists for {len(parties)} parties"
            )
        owners: dict[int, list[int]] = {}
        for pi, cs in enumerate(cl):
            for c in cs:
                if not np.any(ds.y == c):
                    raise DataError(f"partition class_subsets: class {c} has no rows")
                owners.setdefault(int(c), []).append(pi)
        buckets = [[] for _ in parties]
        for c, ps in owners.items():
            idx = rng.permutation(np.flatnonzero(ds.y == c))
            for pi, part in zip(ps, np.array_split(idx, len(ps))):
                buckets[pi].extend(part.tolist())
        out = {}
        for i, (p, b) in enumerate(zip(parties, buckets)):
            b = np.asarray(b, dtype=np.int64)
            if self.config.sizes is not None:
                s = self.config.sizes[i] if i < len(self.config.sizes) else len(b)
                if s > len(b):
                    raise DataError(
                        f"partition class_subsets: party {p!r} asked for {s} rows, its classes have {len(b)}"
                    )
                b = rng.choice(b, s, replace=False)
            out[p] = np.sort(b)
        return out


class SharedBaseConfig(PluginConfig):
    holdout: dict[str, int] = Field(
        default_factory=dict, description="party -> rows: parties with their own disjoint rows"
    )
    base_size: int = Field(gt=0, description="rows of the one sample every other party receives")

    @field_validator("holdout")
    @classmethod
    def _parties(cls, v, info: ValidationInfo):
        check_parties(v, info)
        return v


@PARTITIONERS.register
class SharedBase(PartitionerPlugin):
    """Every party gets the same random sample of rows, except holdout parties (their own rows).

    Controlled experiments: every party not in ``holdout`` receives the *same* random sample of
    ``base_size`` rows (so they differ only by injected noise); holdout parties (e.g. a validation
    set) get their own disjoint rows."""

    name = "shared_base"
    Config = SharedBaseConfig

    def party_rows(self, n, parties, class_rows=None):
        hold = self.config.holdout
        rows = {p: hold.get(p, self.config.base_size) for p in parties}
        return PartyRows(rows, None)  # the parties outside holdout share one sample

    def split(self, ds, parties, rng):
        unknown = [p for p in self.config.holdout if p not in parties]
        if unknown:
            raise DataError(f"partition shared_base: holdout parties {unknown} are not parties")
        need = sum(self.config.holdout.values()) + self.config.base_size
        if need > ds.n:
            raise DataError(f"partition shared_base: needs {need} rows, the dataset has {ds.n}")
        perm = rng.permutation(ds.n)
        out, start = {}, 0
        for p, size in self.config.holdout.items():
            out[p] = np.sort(perm[start : start + size])
            start += size
        base = np.sort(perm[start : start + self.config.base_size])
        for p in parties:
            if p not in out:
                out[p] = base.copy()
        return out
