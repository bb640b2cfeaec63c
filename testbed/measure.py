"""Discrete probability measures: a support (n x d) and nonnegative weights summing to one."""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np

from testbed.errors import DataError

_WEIGHT_TOL = 1e-8


def immutable(a, dtype=None) -> np.ndarray:
    """A read-only copy of ``a`` that cannot be made writable again.

    The copy's memory is an immutable ``bytes`` object, so ``setflags(write=True)`` raises
    instead of letting one holder change what every other holder of the array sees.
    """
    a = np.ascontiguousarray(a, dtype=dtype)
    if a.dtype.hasobject:  # no byte image; the best available is a read-only copy
        out = a.copy()
        out.setflags(write=False)
        return out
    return np.frombuffer(a.tobytes(), dtype=a.dtype).reshape(a.shape)


def is_mapped_readonly(a: np.ndarray) -> bool:
    """True when ``a`` is a C-contiguous, read-only view of a read-only :class:`mmap.mmap`
    (nothing can make it writable: its buffer refuses writes)."""
    if not isinstance(a, np.ndarray) or a.flags.writeable or not a.flags.c_contiguous:
        return False
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, mmap.mmap) and memoryview(base).readonly


def _frozen(a: np.ndarray) -> np.ndarray:
    return immutable(a, np.float64)


@dataclass(frozen=True, eq=False)
class Measure:
    """A discrete measure :math:`\\sum_i w_i \\delta_{x_i}`.

    Parameters
    ----------
    support : array of shape (n, d)
        Atom locations. Copied, stored as read-only float64.
    weights : array of shape (n,), optional
        Nonnegative masses summing to 1 (within 1e-8; they are renormalised exactly).
        Uniform when omitted.
    """

    support: np.ndarray
    weights: np.ndarray

    def __init__(self, support, weights=None):
        x = np.asarray(support, dtype=np.float64)
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2 or x.shape[0] == 0:
            raise DataError(
                f"Measure support must be a non-empty (n, d) array, got shape {x.shape}"
            )
        if not np.all(np.isfinite(x)):
            raise DataError("Measure support contains NaN or inf")
        n = x.shape[0]
        if weights is None:
            w = np.full(n, 1.0 / n)
        else:
            w = np.asarray(weights, dtype=np.float64).reshape(-1)
            if w.shape[0] != n:
                raise DataError(f"Measure has {n} atoms but {w.shape[0]} weights")
            if not np.all(np.isfinite(w)) or np.any(w < 0):
                raise DataError("Measure weights must be finite and nonnegative")
            total = w.sum()
            if abs(total - 1.0) > _WEIGHT_TOL * max(1, n):
                raise DataError(f"Measure weights must sum to 1, got {total:.12g}")
            w = w / total
        object.__setattr__(self, "support", _frozen(x))
        object.__setattr__(self, "weights", _frozen(w))

    @property
    def n(self) -> int:
        """Number of atoms."""
        return self.support.shape[0]

    @property
    def d(self) -> int:
        """Dimension of the support."""
        return self.support.shape[1]

    @property
    def is_uniform(self) -> bool:
        return bool(np.allclose(self.weights, 1.0 / self.n, rtol=0, atol=1e-15))

    @property
    def mean(self) -> np.ndarray:
        return self.weights @ self.support

    def __repr__(self) -> str:
        kind = "uniform" if self.is_uniform else "weighted"
        return f"Measure(n={self.n}, d={self.d}, {kind})"

    @classmethod
    def uniform(cls, support) -> Measure:
        return cls(support)

    @classmethod
    def restore(cls, support, weights, *, keep_mapped: bool = False) -> Measure:
        """Rebuild a measure from arrays that a :class:`Measure` produced, keeping their bytes.

        The constructor renormalises the weights (``w / w.sum()``), which changes the last bits
        of weights that were already normalised once; a saved transcript must reload byte for
        byte, so the loader uses this path: same validation, no renormalisation.

        ``keep_mapped``: arrays that are read-only views of a read-only memory map (a saved
        transcript's payload file) are kept as they are instead of being copied into memory;
        their buffer cannot be made writable, so they are as immutable as a copy.
        """
        x = np.asarray(support, dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] == 0 or w.shape != (x.shape[0],):
            raise DataError(
                f"stored measure has support shape {x.shape} and weights shape {w.shape}"
            )
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(w))) or np.any(w < 0):
            raise DataError("stored measure has NaN, inf or negative values")
        if abs(w.sum() - 1.0) > _WEIGHT_TOL * max(1, x.shape[0]):
            raise DataError(f"stored measure weights sum to {w.sum():.12g}, not 1")
        out = object.__new__(cls)
        keep = keep_mapped and is_mapped_readonly(x) and is_mapped_readonly(w)
        object.__setattr__(out, "support", x if keep else _frozen(x))
        object.__setattr__(out, "weights", w if keep else _frozen(w))
        return out
