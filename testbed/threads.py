"""BLAS thread control.

The protocols run many small matrix products (n x S plans times n x d supports). On a 2-core
machine shared with other work, a 2-thread OpenBLAS product of that size waits for its second
thread to be scheduled: we measured 10 x 1000 @ 1000 x 784 at 50-100 ms with 2 threads under load
against 0.8 ms with one (and 0.5 ms with two on an idle machine). The testbed therefore runs BLAS
single-threaded by default (``testbed`` CLI, benchmarks, Ray actors) and gets its parallelism from
processes instead (Ray actors, sweep workers). ``OT_TESTBED_BLAS_THREADS`` overrides the default;
``0`` leaves the libraries' own setting alone.
"""

from __future__ import annotations

import os

from testbed.errors import TestbedError

__all__ = ["DEFAULT_BLAS_THREADS", "blas_threads", "limit_blas_threads"]

DEFAULT_BLAS_THREADS = 1
_limiter = None


def blas_threads() -> int | None:
    """The BLAS thread count asked for by the environment (None = leave the libraries alone)."""
    raw = os.environ.get("OT_TESTBED_BLAS_THREADS", str(DEFAULT_BLAS_THREADS)).strip()
    try:
        n = int(raw)
    except ValueError:
        raise TestbedError(
            f"OT_TESTBED_BLAS_THREADS must be an integer >= 0, got {raw!r}"
        ) from None
    return None if n <= 0 else n


def limit_blas_threads(n: int | None = None) -> int | None:
    """Limit every loaded BLAS library to ``n`` threads for the rest of the process
    (default: :func:`blas_threads`). Returns the limit applied (None = none)."""
    global _limiter
    from threadpoolctl import threadpool_limits  # threadpoolctl: --version imports threads

    n = blas_threads() if n is None else n
    if n is None:
        return None
    # load every BLAS the testbed uses before limiting (threadpoolctl sees loaded libraries only)
    import numpy.linalg  # noqa: F401  # BLAS: loaded to be limited
    import scipy.linalg  # noqa: F401  # BLAS: loaded to be limited

    _limiter = threadpool_limits(limits=int(n), user_api="blas")
    return int(n)
