"""What the canary audits read of a message: every numeric field of its payload *and* its meta,
and the observer's own baseline for it.

A canary of the data's width d moves the rows of width d a message carries (a Measure's support,
an array of d columns anywhere in a mapping, a d-vector such as a noisy mean, in the payload or
in ``meta``); the other numeric fields (scalars such as distances, arrays of another width such
as weights) cannot be attributed to one canary direction, so the many-run game reads each as one
feature (its mean) and fits their weights on the trials that choose the statistic.

The baseline of a message is what the observer itself knows it was computed from: the latest
earlier message its receiver sent to its sender (FedWAD: the ξ the server sent a client, before
the client's interpolation ξ_μ comes back; FedBary: the γ_i a client sent, before the server's
η_Q answers it). Every observer that sees a message from another party is that message's receiver
or the eavesdropper, so it saw that earlier message too. A message with no such counterpart of
the same shape is centred on a noiseless run of the protocol instead (exact until the first noisy
release; it drifts from the real run after that, which is why it is only the fallback).
"""

from __future__ import annotations

import numpy as np

from testbed.exchange.payload import numeric_leaves

__all__ = ["counterparts", "numeric_fields", "projections", "rows_of_width"]


def numeric_fields(env) -> list[tuple[str, np.ndarray]]:
    """Every numeric field of ``env`` as ``(path, array)``: the payload's under ``payload/``,
    the meta's under ``meta/`` (non-finite values zeroed: a field is read, never trusted)."""
    leaves = numeric_leaves(env.payload, getattr(env, "meta", None))
    return [(path, np.where(np.isfinite(a), a, 0.0)) for path, a in leaves.items()]


def rows_of_width(env, d: int) -> np.ndarray | None:
    """Every row of width ``d`` in ``env`` (matrices with d columns and d-vectors, payload and
    meta; a Measure's weights never, though S may equal d), stacked; None when there are none."""
    rows = []
    for path, a in numeric_fields(env):
        if path.endswith("weights"):
            continue
        if a.ndim == 2 and a.shape[1] == d:
            rows.append(a)
        elif a.ndim == 1 and a.shape[0] == d:
            rows.append(a[None, :])
    return np.vstack(rows) if rows else None


def projections(envelopes, U: np.ndarray) -> list[np.ndarray | None]:
    """Per envelope: its rows of the data's width projected on each direction (rows x m), or
    None when it carries none."""
    out = []
    for e in envelopes:
        rows = rows_of_width(e, U.shape[1])
        out.append(None if rows is None else rows @ U.T)
    return out


def counterparts(envelopes, proj: list) -> list[int | None]:
    """Per envelope ``i`` (``s`` to ``r``): the index of the latest earlier envelope ``r`` sent
    to ``s`` whose projections have the same shape (the message ``i`` answers), else None."""
    last: dict[tuple[str, str, tuple], int] = {}
    out: list[int | None] = []
    for i, e in enumerate(envelopes):
        p = proj[i]
        key = (e.receiver, e.sender, None if p is None else p.shape)
        out.append(last.get(key) if p is not None else None)
        if p is not None:
            last[(e.sender, e.receiver, p.shape)] = i
    return out
