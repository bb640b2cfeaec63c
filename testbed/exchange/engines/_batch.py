"""Shared by the engines that run a batch of party calls per worker: putting the replies back
in call order."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["in_call_order", "run_in_order"]


def run_in_order(calls: Iterable[tuple], parties) -> list[tuple]:
    """Worker side: run ``(party | None, fn, args, kwargs)`` calls in order (``party`` None: a
    call that reads no party's data); ``(True, value)`` or ``(False, exception)`` per call,
    stopping at the first failure, as the plain bus stops at its first failing call."""
    out = []
    for party, fn, args, kwargs in calls:
        try:
            value = fn(*args, **kwargs) if party is None else fn(parties[party], *args, **kwargs)
            out.append((True, value))
        except BaseException as exc:  # returned to the driver and raised there
            out.append((False, exc))
            break
    return out


def in_call_order(n: int, replies: Iterable[tuple[Sequence[int], Sequence[tuple]]]) -> list[Any]:
    """Results of ``n`` calls from each worker's ``(call indices, [(ok, value), ...])``; a worker
    stops at its first failing call, and the first failing call in call order is raised."""
    results: list[Any] = [None] * n
    failed: dict[int, BaseException] = {}
    for idx, got in replies:
        for i, (ok, value) in zip(idx, got):
            if ok:
                results[i] = value
            else:
                failed[i] = value
    if failed:
        raise failed[min(failed)] from None
    return results
