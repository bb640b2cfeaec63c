"""The error every metric raises when it cannot be computed."""

from __future__ import annotations

from testbed.errors import TestbedError

__all__ = ["MetricError"]


class MetricError(TestbedError):
    """A metric cannot be computed from what it was given (e.g. one class only for an AUC)."""
