"""Which rows the guard guards and each party's threshold (``PrivacyGuard._private_rows``),
computed for all parties of a width at once, must be exactly what the rule gives party by
party: thresholds go into results.json, so a different last bit would make ``testbed verify
--rerun`` call an old run changed."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.exchange.guard import PrivacyGuard


def _by_party(private, exempt, rel_tol):
    """The rule, one party at a time (module docstring of testbed.exchange.guard)."""
    thresholds, parts = {}, {}
    for i, (party, X) in enumerate(private.items()):
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        if X.size == 0:
            continue
        norms = np.linalg.norm(X, axis=1)
        scale = float(np.median(norms)) or float(norms.max()) or 1.0
        tol = rel_tol * scale
        keep = norms > tol
        for e in exempt:
            if e.shape[1] == X.shape[1]:
                dist = np.linalg.norm(X[:, None, :] - e[None, :, :], axis=2).min(axis=1)
                keep &= dist > tol
        if keep.any():
            thresholds[party] = tol
            parts.setdefault(X.shape[1], []).append(
                (X[keep], np.full(int(keep.sum()), i), np.full(int(keep.sum()), tol))
            )
    rows = {
        d: tuple(np.concatenate([p[k] for p in ps]) for k in range(3)) for d, ps in parts.items()
    }
    return thresholds, rows


@st.composite
def _parties(draw):
    n = draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    private = {}
    for k in range(n):
        d = draw(st.sampled_from([1, 2, 3, 8]))
        m = draw(st.integers(0, 9))
        X = rng.normal(size=(m, d)) * draw(st.sampled_from([0.0, 1e-9, 1.0, 1e6]))
        if m and draw(st.booleans()):
            X[draw(st.integers(0, m - 1))] = 0.0  # a row at the origin
        private[f"p{k}"] = X
    exempt = []
    if draw(st.booleans()):
        nonempty = [X for X in private.values() if len(X)]
        if nonempty:
            exempt.append(nonempty[0][:1].copy())  # a public row equal to a private one
    return private, exempt


@settings(max_examples=150, deadline=None)
@given(case=_parties(), rel_tol=st.sampled_from([1e-6, 1e-2, 0.5]))
def test_rows_and_thresholds_are_those_of_the_rule_party_by_party(case, rel_tol):
    private, exempt = case
    guard = PrivacyGuard(private, exempt=exempt, rel_tol=rel_tol, worker=False)
    thresholds, rows = _by_party(private, exempt, rel_tol)
    # the same thresholds, bit for bit and in party order (results.json writes them in order)
    assert list(guard.thresholds.items()) == list(thresholds.items())
    assert list(guard._rows) == list(rows)  # widths in the same order
    for d in rows:
        for got, want in zip(guard._rows[d], rows[d]):
            assert got.dtype == want.dtype and np.array_equal(got, want)
