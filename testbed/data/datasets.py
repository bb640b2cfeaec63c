"""Datasets, partitioners and noise injection. All offline: scikit-learn's bundled sets, synthetic
Gaussians, and the user's own CSV/NPY files.

A dataset plugin returns a :class:`Dataset` (features ``X``, optional labels ``y``). A partitioner
splits its rows among named parties. Noise injection corrupts some parties' rows for valuation and
detection work and records which rows it touched (ground truth that only the scorer sees).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from testbed.errors import DataError
from testbed.measure import Measure
from testbed.registry import (
    DATASETS,
    PARTITIONERS,
    Plugin,
    PluginConfig,
    check_parties,
    scenario_parties,
)

__all__ = [
    "Dataset",
    "PartyData",
    "PartyRows",
    "Side",
    "build_parties",
    "check_matrix",
    "equal_rows",
    "inject_noise",
]


# ----------------------------------------------------------------------------- containers
@dataclass(frozen=True)
class Dataset:
    """A pool of rows to partition. ``meta`` carries facts such as closed-form parameters."""

    X: np.ndarray
    y: np.ndarray | None = None
    name: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.X.shape[0]


@dataclass(frozen=True)
class PartyData:
    """One party's private data. ``X`` and ``y`` are read-only."""

    name: str
    X: np.ndarray
    y: np.ndarray | None = None
    source_index: np.ndarray | None = None  # row indices in the pooled dataset

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @cached_property
    def measure(self) -> Measure:
        """The uniform empirical measure of ``X``, validated and copied once per party (a
        Measure is immutable, so every protocol step at this party can share it)."""
        return Measure(self.X)


def _ro(a):
    if a is None:
        return None
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def check_matrix(X: np.ndarray, where: str) -> np.ndarray:
    """Validate a feature matrix: 2-D, non-empty, finite. Raises DataError naming ``where``."""
    X = np.asarray(X)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise DataError(f"{where}: expected a 2-D array, got shape {X.shape}")
    if X.shape[0] == 0:
        raise DataError(f"{where}: no rows")
    if X.dtype.kind == "c":
        raise DataError(f"{where}: complex values (dtype {X.dtype}); features must be real")
    if not np.issubdtype(X.dtype, np.number) or X.dtype.kind == "b":
        raise DataError(f"{where}: non-numeric data (dtype {X.dtype})")
    bad = ~np.isfinite(X.astype(np.float64))
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DataError(f"{where}: NaN or inf at row {r}, column {c}")
    return X.astype(np.float64)


# ----------------------------------------------------------------------------- datasets
class DatasetPlugin(Plugin):
    """Base class of dataset plugins."""

    def load(self, rng: np.random.Generator) -> Dataset:  # pragma: no cover - abstract
        raise NotImplementedError

    def possible_labels(self) -> frozenset[int] | None:
        """Every class label a load can hold, when the config alone tells (nothing is read):
        ``testbed validate`` refuses a partition that asks for another class. None: unknown."""
        return None


class GaussianComponent(PluginConfig):
    n: int = Field(gt=0, description="number of points")
    mean: float | list[float] = 0.0
    std: float = Field(1.0, gt=0, description="isotropic std (ignored when cov is given)")
    cov: list[list[float]] | None = None


class GaussiansConfig(PluginConfig):
    d: int = Field(2, gt=0)
    components: list[GaussianComponent] = Field(min_length=1)


@DATASETS.register
class Gaussians(DatasetPlugin):
    """Synthetic Gaussian components (label = component index); W2 between them has a closed form."""

    name = "gaussians"
    Config = GaussiansConfig

    def possible_labels(self):
        return frozenset(range(len(self.config.components)))  # label = component index

    def params(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        c, d = self.config.components[k], self.config.d
        mean = np.full(d, float(c.mean)) if np.isscalar(c.mean) else np.asarray(c.mean, float)
        if mean.shape != (d,):
            raise DataError(f"gaussians component {k}: mean has {mean.size} entries, d = {d}")
        if c.cov is not None:
            cov = np.asarray(c.cov, float)
            if cov.shape != (d, d):
                raise DataError(f"gaussians component {k}: cov must be {d}x{d}")
        else:
            cov = np.eye(d) * c.std**2
        return mean, cov

    def load(self, rng):
        Xs, ys, means, covs = [], [], [], []
        for k, c in enumerate(self.config.components):
            mean, cov = self.params(k)
            Xs.append(rng.multivariate_normal(mean, cov, size=c.n, method="cholesky"))
            ys.append(np.full(c.n, k))
            means.append(mean.tolist())
            covs.append(cov.tolist())
        return Dataset(
            np.vstack(Xs), np.concatenate(ys), "gaussians", {"means": means, "covs": covs}
        )

    def fresh_rows(self, rng, labels, n: int) -> np.ndarray:
        """``n`` new rows (the population the scorer compares with): of component ``labels[i]``
        each, or, without labels, of components drawn in the proportions of their sizes."""
        sizes = np.array([c.n for c in self.config.components], dtype=np.float64)
        if labels is None:
            labels = rng.choice(sizes.size, size=n, p=sizes / sizes.sum())
        labels = np.asarray(labels, dtype=np.int64)
        X = np.empty((labels.size, self.config.d))
        for k in np.unique(labels):
            mean, cov = self.params(int(k))
            at = labels == k
            X[at] = rng.multivariate_normal(mean, cov, size=int(at.sum()), method="cholesky")
        return X


class SklearnConfig(PluginConfig):
    scale: Literal["none", "standard", "minmax"] = "none"
    n_samples: int | None = Field(None, gt=0, description="random subsample of this many rows")


class _SklearnSet(DatasetPlugin):
    """Base of scikit-learn's bundled sets: ``loader`` (the ``sklearn.datasets`` function),
    ``labels`` ("class", or "ordinal5": a target binned into 5 quantile levels) and
    ``n_classes`` (labels 0..n-1, known without loading)."""

    Config = SklearnConfig
    loader: str
    labels: str = "class"
    n_classes: int

    def load(self, rng):
        import sklearn.datasets as skd

        bunch = getattr(skd, self.loader)()
        X = bunch.data.astype(np.float64)
        y = bunch.target
        if self.labels == "ordinal5":  # diabetes: disease progression binned into 5 quantile levels
            edges = np.quantile(y, [0.2, 0.4, 0.6, 0.8])
            y = np.searchsorted(edges, y, side="right")
        if self.config.n_samples is not None:
            if self.config.n_samples > X.shape[0]:
                raise DataError(
                    f"{self.name}: n_samples={self.config.n_samples} but only {X.shape[0]} rows exist"
                )
            idx = np.sort(rng.choice(X.shape[0], self.config.n_samples, replace=False))
            X, y = X[idx], y[idx]
        if self.config.scale == "standard":
            X = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
        elif self.config.scale == "minmax":
            span = X.max(0) - X.min(0)
            X = (X - X.min(0)) / np.where(span > 0, span, 1.0)
        return Dataset(X, np.asarray(y).astype(np.int64), self.name)

    def possible_labels(self):
        return frozenset(range(self.n_classes))


# one class each (not made in a loop), so that `testbed plugins` reads each description from the
# source without importing it
@DATASETS.register
class Digits(_SklearnSet):
    """scikit-learn digits: 1797 x 64 pixel images (0..16), 10 classes."""

    name, loader, n_classes = "digits", "load_digits", 10


@DATASETS.register
class Wine(_SklearnSet):
    """scikit-learn wine: 178 x 13, 3 classes."""

    name, loader, n_classes = "wine", "load_wine", 3


@DATASETS.register
class BreastCancer(_SklearnSet):
    """scikit-learn breast cancer: 569 x 30, 2 classes."""

    name, loader, n_classes = "breast_cancer", "load_breast_cancer", 2


@DATASETS.register
class Iris(_SklearnSet):
    """scikit-learn iris: 150 x 4, 3 classes."""

    name, loader, n_classes = "iris", "load_iris", 3


@DATASETS.register
class Diabetes(_SklearnSet):
    """scikit-learn diabetes: 442 x 10, progression binned into 5 ordinal levels."""

    name, loader, labels, n_classes = "diabetes", "load_diabetes", "ordinal5", 5


# ----------------------------------------------------------------------------- partitioners
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

    def split(
        self, ds: Dataset, parties: Sequence[str], rng
    ) -> dict[str, np.ndarray]:  # pragma: no cover
        raise NotImplementedError

    def party_rows(
        self, n: int, parties: Sequence[str], class_rows: Mapping[int, int] | None = None
    ) -> PartyRows | None:
        """The rows :meth:`split` gives each party of a dataset of ``n`` rows (``class_rows``:
        rows per label, when the dataset's parameters fix them), without the data: exact where
        the parameters fix them, else an upper bound. ``None`` (default): unknown; the memory
        preflight then assumes an equal split."""
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

    def party_rows(self, n, parties, class_rows=None):
        # random: a party holds at most what the others' min_size rows leave
        most = max(n - (len(parties) - 1) * self.config.min_size, 1)
        return PartyRows(dict.fromkeys(parties, most), n)

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


# ----------------------------------------------------------------------------- noise
class NoiseSpec(PluginConfig):
    party: str
    kind: Literal["features", "labels"]
    rate: float = Field(ge=0, le=1, description="share of the party's rows to corrupt")
    scale: float = Field(1.0, ge=0, description="feature noise std, in units of the feature's std")


def inject_noise(
    party: PartyData, spec: NoiseSpec, rng, n_classes: int | None
) -> tuple[PartyData, np.ndarray]:
    """Corrupt ``rate`` of a party's rows; returns the new data and the boolean mask of touched rows."""
    n = party.n
    k = int(round(spec.rate * n))
    mask = np.zeros(n, dtype=bool)
    mask[rng.choice(n, k, replace=False)] = True
    X = np.array(party.X, copy=True)
    y = None if party.y is None else np.array(party.y, copy=True)
    if spec.kind == "features":
        std = X.std(0)
        std = np.where(std > 0, std, 1.0)
        X[mask] += rng.normal(size=(k, X.shape[1])) * std * spec.scale
    else:
        if y is None:
            raise DataError(f"noise on party {party.name!r}: label noise needs labels")
        classes = np.arange(n_classes) if n_classes else np.unique(y)
        for i in np.flatnonzero(mask):
            others = classes[classes != y[i]]
            y[i] = rng.choice(others)
    return PartyData(party.name, _ro(X), _ro(y), party.source_index), mask


# ----------------------------------------------------------------------------- assembly
def build_parties(
    ds: Dataset,
    partition: PartitionerPlugin,
    party_names: Sequence[str],
    rng_partition,
    noise: Sequence[NoiseSpec] = (),
    rng_noise=None,
) -> tuple[dict[str, PartyData], dict[str, np.ndarray]]:
    """Partition a dataset and apply noise. Returns parties and the noise masks (ground truth)."""
    X = check_matrix(ds.X, f"dataset {ds.name}")
    if ds.y is not None and len(ds.y) != X.shape[0]:
        raise DataError(f"dataset {ds.name}: {X.shape[0]} rows but {len(ds.y)} labels")
    split = partition.split(Dataset(X, ds.y, ds.name, ds.meta), list(party_names), rng_partition)
    parties: dict[str, PartyData] = {}
    for p in party_names:
        idx = split.get(p)
        if idx is None or len(idx) == 0:
            raise DataError(f"party {p!r} received no rows from partition {partition.name!r}")
        parties[p] = PartyData(p, _ro(X[idx]), _ro(None if ds.y is None else ds.y[idx]), _ro(idx))
    masks: dict[str, np.ndarray] = {}
    n_classes = None if ds.y is None else int(np.max(ds.y)) + 1
    for spec in noise:
        if spec.party not in parties:
            raise DataError(f"noise: unknown party {spec.party!r}; parties: {', '.join(parties)}")
        parties[spec.party], m = inject_noise(parties[spec.party], spec, rng_noise, n_classes)
        masks[spec.party] = masks.get(spec.party, np.zeros(parties[spec.party].n, bool)) | m
    return parties, masks
