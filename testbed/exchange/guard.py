"""The privacy guard: no message may carry a party's private row, or a near-copy of one.

A payload row is a *near-copy* of a private row ``x`` when it lies within
``rel_tol × median_i ||x_i||`` of it, the median taken over that party's private rows, so the
threshold follows the data's scale (default ``rel_tol = 1e-6``). Rows are looked for in every
array of a payload and of the envelope's ``meta``, whatever their dtype (cast to float64; integer
arrays are also compared with the private rows truncated to integers, which catches
``X.astype(int)``) and whatever their shape: rows of width ``d``, the transpose of a ``d × k``
block, and any array read as consecutive ``d``-vectors starting at each offset (a flattened
block, or rows embedded in a longer vector).

Search: every private row is projected onto ``k`` orthonormal directions and put in a
``scipy.spatial.cKDTree``. Projection does not increase distances, so every payload row within
the threshold of a private row is among the tree's ball-query candidates; candidates are then
checked at full dimension. The cost is a few tree queries per payload row, not an n × m
distance matrix.

``mode="stop"`` raises :class:`~testbed.errors.PrivacyGuardError` naming sender, receiver, kind
and round; ``mode="record"`` lets the run go on and keeps each violation as a finding.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial import cKDTree

from testbed.errors import PrivacyGuardError
from testbed.exchange.payload import iter_arrays

__all__ = ["GuardFinding", "PrivacyGuard"]

_PROJ_DIM = 8
_MAX_FINDINGS = 100


@dataclass(frozen=True)
class GuardFinding:
    """One near-copy found in a message."""

    seq: int
    round: int
    sender: str
    receiver: str
    kind: str
    party: str
    path: str
    row: int
    distance: float
    threshold: float

    def line(self) -> str:
        return (
            f"privacy guard: message #{self.seq} {self.kind} (round {self.round}) from "
            f"{self.sender} to {self.receiver} carries a near-copy of a private row of "
            f"{self.party!r} at {self.path}[{self.row}] (distance {self.distance:.3g} <= "
            f"threshold {self.threshold:.3g})"
        )


class _Index:
    """Near-neighbour index of one party's private rows (float and integer-truncated)."""

    def __init__(self, X: np.ndarray, tol: float, basis: np.ndarray):
        self.X, self.tol, self.basis = X, tol, basis
        self.tree = cKDTree(X @ basis)
        self._trunc: list[tuple[np.ndarray, cKDTree]] | None = None

    def trunc(self) -> list[tuple[np.ndarray, cKDTree]]:
        """The integer-truncated private rows (none when every row truncates to zero)."""
        if self._trunc is None:
            T = np.trunc(self.X)
            T = T[np.any(T != 0, axis=1)]  # an all-zero row says nothing about the data
            self._trunc = [(T, cKDTree(T @ self.basis))] if len(T) else []
        return self._trunc

    def first_hit(self, rows: np.ndarray, integer: bool) -> tuple[int, float] | None:
        tables = [(self.X, self.tree)] + (self.trunc() if integer else [])
        proj = rows @ self.basis
        for X, tree in tables:
            for i, cand in enumerate(tree.query_ball_point(proj, r=self.tol)):
                if cand:
                    dist = np.linalg.norm(X[cand] - rows[i], axis=1)
                    j = int(np.argmin(dist))
                    if dist[j] <= self.tol:
                        return i, float(dist[j])
        return None


def _row_views(a: np.ndarray, d: int) -> Iterator[tuple[str, np.ndarray]]:
    """Ways of reading ``a`` as rows of width ``d`` (suffix names the reading)."""
    if a.ndim >= 2 and a.shape[-1] == d:
        yield "", a.reshape(-1, d)
    if a.ndim == 2 and a.shape[0] == d:  # a d x k block, square ones included
        yield ".T", np.ascontiguousarray(a.T)
    if a.ndim >= 2 and a.shape[-1] == d:
        return
    flat = a.reshape(-1)
    # a vector: rows may start at any offset; another 2-D layout: read it from its start only
    offsets = range(min(d, max(flat.size - d + 1, 0))) if a.ndim == 1 else range(1)
    for o in offsets:
        k = (flat.size - o) // d
        if k:
            yield (f"@{o}" if o else ".flat"), flat[o : o + k * d].reshape(k, d)


class PrivacyGuard:
    """Refuses (or records) any message that carries a private row or a near-copy of one.

    Parameters
    ----------
    private : mapping party -> (n, d) array
        Each party's private rows.
    exempt : arrays, optional
        Rows the receiving side legitimately holds (e.g. a public transfer set): private rows
        within the threshold of an exempt row are not guarded.
    rel_tol : float
        Threshold relative to the median private row norm of each party.
    mode : ``"stop"`` or ``"record"``
    """

    def __init__(
        self,
        private: Mapping[str, np.ndarray],
        exempt: Sequence[np.ndarray] | None = None,
        rel_tol: float = 1e-6,
        mode: str = "stop",
    ):
        if mode not in ("stop", "record"):
            raise ValueError(f"guard mode must be 'stop' or 'record', got {mode!r}")
        self.rel_tol, self.mode = float(rel_tol), mode
        self.findings: list[GuardFinding] = []
        self.violations = 0
        self.rows_checked = 0
        self.messages_checked = 0
        self._index: dict[str, _Index] = {}
        self.thresholds: dict[str, float] = {}
        ex = [np.atleast_2d(np.asarray(e, dtype=np.float64)) for e in (exempt or ())]
        for party, arr in private.items():
            X = np.atleast_2d(np.asarray(arr, dtype=np.float64))
            if X.size == 0:
                continue
            norms = np.linalg.norm(X, axis=1)
            scale = float(np.median(norms)) or float(norms.max()) or 1.0
            tol = self.rel_tol * scale
            d = X.shape[1]
            for e in ex:
                if e.shape[1] == d and len(X):
                    dist, _ = cKDTree(e).query(X, k=1)
                    X = X[dist > tol]
            if not len(X):
                continue
            basis = np.linalg.qr(np.random.default_rng(d).standard_normal((d, min(d, _PROJ_DIM))))[
                0
            ]
            self._index[party] = _Index(np.ascontiguousarray(X), tol, basis)
            self.thresholds[party] = tol

    def find(self, payload: Any, meta: Mapping[str, Any] | None = None):
        """``(party, path, row, distance)`` of the first near-copy in a payload (or its meta),
        else None."""
        arrays = list(iter_arrays(payload))
        for k, v in (meta or {}).items():
            try:
                a = np.asarray(v)
            except (TypeError, ValueError):
                continue
            arrays.append((f"meta/{k}", a))
        for path, arr in arrays:
            if arr.dtype.kind not in "fiub" or arr.size == 0:
                continue
            integer = arr.dtype.kind in "iub"
            a = np.asarray(arr, dtype=np.float64)
            if not np.all(np.isfinite(a)):
                a = np.where(np.isfinite(a), a, 0.0)
            for party, idx in self._index.items():
                d = idx.X.shape[1]
                for how, rows in _row_views(a, d):
                    self.rows_checked += len(rows)
                    hit = idx.first_hit(rows, integer)
                    if hit is not None:
                        return party, f"{path}{how}", hit[0], hit[1]
        return None

    def check(self, env) -> None:
        """Check one envelope: raise (mode stop) or record a finding (mode record)."""
        self.messages_checked += 1
        hit = self.find(env.payload, env.meta)
        if hit is None:
            return
        party, path, row, dist = hit
        finding = GuardFinding(
            env.seq,
            env.round,
            env.sender,
            env.receiver,
            env.kind,
            party,
            path,
            row,
            dist,
            self.thresholds[party],
        )
        if self.mode == "stop":
            raise PrivacyGuardError(finding.line())
        self.violations += 1
        if len(self.findings) < _MAX_FINDINGS:
            self.findings.append(finding)

    def summary(self) -> dict[str, Any]:
        """What the guard checked and found, for results.json."""
        return {
            "mode": self.mode,
            "rel_tol": self.rel_tol,
            "rule": "payload or meta row within rel_tol x median private row norm of a private "
            "row (any dtype; rows, transposed blocks, flattened runs at every offset)",
            "thresholds": dict(self.thresholds),
            "messages_checked": self.messages_checked,
            "rows_checked": self.rows_checked,
            "violations": self.violations,
            "findings": [f.__dict__ | {"message": f.line()} for f in self.findings],
        }
