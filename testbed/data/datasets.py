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
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from testbed.errors import DataError
from testbed.measure import Measure
from testbed.registry import DATASETS, Plugin, PluginConfig

__all__ = [
    "Dataset",
    "PartyData",
    "build_parties",
    "check_matrix",
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

    #: ``load`` needs numpy only (no scikit-learn, gensim, ...): ``testbed validate`` may load
    #: the rows to check values against them (a defense's clip_norm against the rows' norms)
    light: ClassVar[bool] = False

    def load(self, rng: np.random.Generator) -> Dataset:  # pragma: no cover - abstract
        """The rows (and labels, when there are) as one :class:`Dataset` (required)."""
        raise NotImplementedError

    def has_labels(self) -> bool | None:
        """Whether a load gives labels, when the config alone tells (the file datasets: a
        ``label_column``): ``testbed validate`` refuses a partition or transform that needs
        labels on a dataset without. None: unknown (not checked)."""
        return None

    def possible_labels(self) -> frozenset[int] | None:
        """Every class label a load can hold, when the config alone tells (nothing is read):
        ``testbed validate`` refuses a partition that asks for another class. None: unknown."""
        return None

    def fresh_rows(
        self, rng: np.random.Generator, labels: np.ndarray | None, n: int
    ) -> np.ndarray | None:
        """``n`` new rows drawn from the same distribution, one of class ``labels[i]`` each, for
        the population the scorer compares a party's rows with (:mod:`testbed.data.population`):
        a generative dataset overrides it. Default: it cannot (``None``): the population is held
        out of the loaded rows instead."""
        return None


class GaussianComponent(PluginConfig):
    n: int = Field(gt=0, description="number of points")
    mean: float | list[float] = 0.0
    std: float = Field(1.0, gt=0, description="isotropic std (ignored when cov is given)")
    cov: list[list[float]] | None = None


class GaussiansConfig(PluginConfig):
    d: int = Field(2, gt=0)
    components: list[GaussianComponent] = Field(min_length=1)

    @field_validator("components")
    @classmethod
    def _sizes(cls, v, info: ValidationInfo):
        """Each component's mean (a list) has d entries and its cov is d x d."""
        d = info.data.get("d")
        if d is None:  # d itself was refused
            return v
        for k, c in enumerate(v):
            if not isinstance(c.mean, (int, float)) and len(c.mean) != d:
                raise ValueError(f"component {k}: mean has {len(c.mean)} entries, d = {d}")
            if c.cov is not None and (len(c.cov) != d or any(len(r) != d for r in c.cov)):
                shape = f"{len(c.cov)} rows of lengths {sorted({len(r) for r in c.cov})}"
                raise ValueError(f"component {k}: cov must be {d} x {d}, got {shape}")
        return v


@DATASETS.register
class Gaussians(DatasetPlugin):
    """Synthetic Gaussian components (label = component index); W2 between them has a closed form."""

    name = "gaussians"
    Config = GaussiansConfig
    light = True

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
        import sklearn.datasets as skd  # sklearn: validate imports datasets

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
    partition: Plugin,  # a testbed.data.partitions.PartitionerPlugin (which imports this module)
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
