"""A protocol's ``headline_accuracy`` declaration, read and checked by the testbed (the scorer
and ``testbed validate``/``run``'s preflight), never by the protocol's own code. Imports nothing
heavy: ``testbed validate`` calls it."""

from __future__ import annotations

from testbed.errors import TestbedError

__all__ = ["headline_patterns", "headline_ranking"]


def headline_patterns(protocol) -> tuple[str, ...]:
    """The globs a protocol (class or instance) names as its headline accuracy quantity; a
    single string is one glob. Anything but glob strings is a :class:`TestbedError` naming the
    protocol."""
    patterns = protocol.headline_accuracy or ()
    if isinstance(patterns, str):
        patterns = (patterns,)
    if not isinstance(patterns, (tuple, list)) or not all(isinstance(p, str) for p in patterns):
        raise TestbedError(
            f"protocol {getattr(protocol, 'name', getattr(protocol, '__name__', '?'))!r}: "
            f"headline_accuracy must be a tuple of glob strings, got {patterns!r}"
        )
    return tuple(patterns)


def headline_ranking(protocol) -> str | None:
    """The glob a protocol names as the per-party scores whose ranking is its headline accuracy
    (``headline_ranking``), or None. Anything but a string or None is a :class:`TestbedError`
    naming the protocol."""
    pattern = protocol.headline_ranking
    if pattern is not None and not isinstance(pattern, str):
        raise TestbedError(
            f"protocol {getattr(protocol, 'name', getattr(protocol, '__name__', '?'))!r}: "
            f"headline_ranking must be a glob string or None, got {pattern!r}"
        )
    return pattern
