"""Copies of private rows in thin disguise, in what an observer saw (the contract kit's
``no_private_rows`` and the scorecard's copy check, beside the guard's near-copy search).

The guard (:class:`testbed.exchange.guard.PrivacyGuard`) finds rows sent as they are, within a
tolerance. A protocol can send every row and still lie near none of them: rows × 1.0001, rows plus
1e-5 relative noise, a public column permutation, a rotation, an affine map, or a summary from
which the rows solve exactly. Here every block of data-width rows in a message is checked for

- **near copies** within :data:`DISGUISE_REL_TOL` × the party's median row norm (looser than the
  guard: catches scaling by 1 ± 1e-4 and relative noise of 1e-5);
- **similarity** and **affine** images: after OT matching, the best similarity transform
  (Procrustes) or affine map (least squares) of the block onto the party's rows
  (:mod:`testbed.scoring.transforms`) puts at least ``3`` (similarity) or ``d + 2`` (affine) of
  them within the tolerance — more than a fit with that many parameters can match by chance;
- **moment inversion**: a party with ``n <= d + 1`` rows whose mean and covariance (``ddof`` 0 or
  1) the observer saw: two rows are fixed by them exactly (mean ± the covariance's principal
  axis); ``3 <= n <= d + 1`` rows are fixed up to a rotation of their own ``n - 1`` sample
  coordinates ((n − 1)(n − 2)/2 angles), which the message says.

A mean alone, or one projected number, fixes no row and is not reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from testbed.exchange.payload import iter_arrays
from testbed.scoring.records import EXACT_RECOVERY_REL_TOL
from testbed.scoring.transforms import _min_rows, best_fit

__all__ = ["DISGUISE_REL_TOL", "DisguiseFinding", "disguise_findings", "disguised_rows"]

#: rows within this fraction of the party's median row norm (after a transform) count as copies
DISGUISE_REL_TOL = 1e-3
#: larger blocks are checked for near copies only (the transform fits grow as rows²)
MAX_FIT_ROWS = 2000


@dataclass(frozen=True)
class DisguiseFinding:
    """Rows of ``party`` recovered from message ``seq`` by undoing ``transform``."""

    seq: int
    kind: str
    sender: str
    receiver: str
    party: str
    path: str
    transform: str
    recovered: int
    rows: int

    def line(self) -> str:
        return (
            f"message #{self.seq} {self.kind} {self.sender}->{self.receiver} at {self.path}: "
            f"{self.recovered} of {self.party}'s {self.rows} rows recovered, {self.transform}"
        )


def _blocks(payload, meta, d: int) -> Iterator[tuple[str, np.ndarray]]:
    """Data-width row blocks of a payload (and its meta): ``(path, rows)``."""
    arrays = list(iter_arrays(payload))
    for k, v in (meta or {}).items():
        try:
            arrays.append((f"meta/{k}", np.asarray(v)))
        except (TypeError, ValueError):
            continue
    for path, a in arrays:
        if a.dtype.kind not in "fiu" or a.size < d:
            continue
        a = np.asarray(a, dtype=np.float64)
        if a.ndim >= 2 and a.shape[-1] == d:
            yield path, a.reshape(-1, d)
        elif a.ndim == 2 and a.shape[0] == d:
            yield f"{path}.T", a.T
        elif a.ndim == 1 and a.size % d == 0:
            yield path, a.reshape(-1, d)


def _hits(M: np.ndarray, X: np.ndarray, tol: float) -> int:
    M = M[np.all(np.isfinite(M), axis=1)]
    if len(M) == 0:
        return 0
    d, _ = cKDTree(M).query(X)
    return int(np.sum(d <= tol))


def disguised_rows(R: np.ndarray, X: np.ndarray) -> tuple[str, int] | None:
    """``(transform, rows recovered)`` when the block ``R`` is a near copy, or a similarity or
    affine image, of the private rows ``X`` (see the module docstring); else None."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    norm = float(np.median(np.linalg.norm(X, axis=1)))
    tol = DISGUISE_REL_TOL * (norm if norm > 0 else 1.0)
    exact = EXACT_RECOVERY_REL_TOL * (norm if norm > 0 else 1.0)
    cache: dict = {}  # the matchings of (R, X), computed once for every transform and test
    if _hits(R, X, exact) >= min(n, 2):
        return None  # rows as they are: the guard's near-copy search reports them
    if 3 <= len(R) <= MAX_FIT_ROWS:
        # undone exactly by a transform: name it (scale, permutation, rotation, affine map)
        for kind in ("similarity", "affine"):
            got, _, what = best_fit(R, X, kind, lambda M: float(_hits(M, X, exact)), cache)
            if got is not None and got >= _min_rows(kind, d):
                return f"a copy under {_article(what)}", int(got)
    k = _hits(R, X, tol)
    if k >= min(n, 2):
        return f"near copy (within {DISGUISE_REL_TOL:g} x the median row norm)", k
    if len(R) < 3 or len(R) > MAX_FIT_ROWS:
        return None
    for kind in ("similarity", "affine"):  # a transform, then noise below the tolerance
        got, _, what = best_fit(R, X, kind, lambda M: float(_hits(M, X, tol)), cache)
        if got is not None and got >= _min_rows(kind, d):
            return f"a noisy copy (within {DISGUISE_REL_TOL:g}) under {_article(what)}", int(got)
    return None


def _moments(X: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    mu = X.mean(0)
    return [(mu, np.atleast_2d(np.cov(X, rowvar=False, ddof=dd))) for dd in (0, 1)]


def _moment_inversion(vectors, matrices, X: np.ndarray, tol: float) -> str | None:
    """What a seen (mean, covariance) pair of the rows ``X`` (n <= d + 1) fixes, else None."""
    n, d = X.shape
    for mu in vectors:
        if np.linalg.norm(mu - X.mean(0)) > tol:
            continue
        for S in matrices:
            if n == 2:
                w, V = np.linalg.eigh((S + S.T) / 2)
                for c in (1.0, 0.5):  # ddof 0: S = v v^T; ddof 1: S = 2 v v^T
                    v = np.sqrt(max(w[-1], 0.0) * c) * V[:, -1]
                    if _hits(np.vstack([mu + v, mu - v]), X, tol) == 2:
                        return "moment inversion: mean and covariance of 2 rows fix both rows"
            elif any(
                np.linalg.norm(S - C) <= tol * max(1.0, float(np.linalg.norm(C)))
                for _, C in _moments(X)
            ):
                return (
                    f"moment inversion: mean and covariance of {n} <= d + 1 = {d + 1} rows fix "
                    f"the rows up to {(n - 1) * (n - 2) // 2} rotation angle(s)"
                )
    return None


def disguise_findings(run, coalitions=()) -> dict[str, list[DisguiseFinding]]:
    """``{observer: [DisguiseFinding]}`` over the same threat models as
    :func:`testbed.testing.protocol_checks.private_row_findings` (observers, then ``(observer,
    colluders)`` keyed ``"observer+colluder+..."``). What is private is the testbed's rule, as
    for the guard: every party's rows but those of the parties the scenario marks public, which
    also exempt equal rows of the others (``World.public_data``)."""
    world = run.world
    public = set(world.public_data)
    private = _not_exempt(
        {p: d.X for p, d in world.parties.items() if p not in public},
        [d.X for p, d in world.parties.items() if p in public],
    )
    models = [(o, ()) for o in run.observers] + [(o, tuple(c)) for o, c in coalitions]
    out = {}
    memo: dict[tuple, tuple[str, int] | None] = {}  # threat models share envelopes
    for obs, coll in models:
        who = {obs, *coll}
        found: list[DisguiseFinding] = []
        sent: dict[str, tuple[list, list, list]] = {}  # party -> (vectors, matrices, envelopes)
        for env in run.transcript.view(obs, coll).envelopes:
            for party, X in private.items():
                if party in who:
                    continue
                n, d = X.shape
                for path, R in _blocks(env.payload, env.meta, d):
                    key = (env.seq, party, path)
                    if key not in memo:
                        memo[key] = disguised_rows(R, X)
                    hit = memo[key]
                    if hit is not None:
                        found.append(_finding(env, party, path, hit, n))
                    if n <= d + 1 and env.sender == party:
                        vecs, mats, envs = sent.setdefault(party, ([], [], []))
                        if R.shape == (d, d):
                            mats.append(R)
                        vecs.extend(R)
                        envs.append(env)
        for party, (vecs, mats, envs) in sent.items():
            X = private[party]
            norm = float(np.median(np.linalg.norm(X, axis=1)))
            how = _moment_inversion(vecs, mats, X, DISGUISE_REL_TOL * max(norm, 1e-12))
            if how is not None:
                found.append(
                    _finding(envs[-1], party, "(its messages together)", (how, len(X)), len(X))
                )
        out["+".join((obs, *coll))] = found
    return out


def _not_exempt(private, exempt) -> dict[str, np.ndarray]:
    """Each party's rows without those equal to public data (e.g. a transfer set overlapping a
    client's data), as the guard does."""
    ex = [np.atleast_2d(np.asarray(e, dtype=np.float64)) for e in exempt or ()]
    out = {}
    for p, X in private.items():
        X = np.asarray(X, dtype=np.float64)
        for E in ex:
            if E.shape[-1] == X.shape[1] and len(X):
                norm = float(np.median(np.linalg.norm(X, axis=1)))
                keep = _nn_rows(E, X) > DISGUISE_REL_TOL * max(norm, 1e-12)
                X = X[keep]
        if len(X) >= 1:
            out[p] = X
    return out


def _nn_rows(M: np.ndarray, X: np.ndarray) -> np.ndarray:
    return cKDTree(M).query(X)[0]


def _finding(env, party: str, path: str, hit: tuple[str, int], n: int) -> DisguiseFinding:
    return DisguiseFinding(env.seq, env.kind, env.sender, env.receiver, party, path, *hit, n)


def _article(what: str) -> str:
    return ("an " if what[:1] in "aeiou" else "a ") + what
