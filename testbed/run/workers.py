"""Sweep worker processes die with the sweep (issue 12: :func:`tie_to_parent`, shared with the
pool engine's workers) and leave Ctrl-C to the sweep (issue 23)."""

from __future__ import annotations

import os

from testbed.exchange.engines._lifetime import tie_to_parent

__all__ = ["tie_to_parent", "worker_init"]


def worker_init() -> None:
    """Initializer of a sweep's worker processes: tied to the sweep, deaf to Ctrl-C, CLI BLAS
    threading, and the in-process engine's ``workers: auto`` is one worker there (the sweep's
    processes already use the cores)."""
    from testbed.exchange.engines.pool import IN_SWEEP_WORKER
    from testbed.run.interrupt import ignore_sigint
    from testbed.threads import limit_blas_threads

    ignore_sigint()  # Ctrl-C: the sweep stops its workers itself
    os.environ[IN_SWEEP_WORKER] = "1"

    tie_to_parent()
    limit_blas_threads()
