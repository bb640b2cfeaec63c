"""FedBary's central reference before and after issue 23, side by side in one process.

``python scripts/fedbary_reference_ab.py N``: N clients x 500 points, d = 64
(``bench.data.make_clients``); "before" = POT's ``free_support_barycenter`` and exact
``ot.emd2`` distances in this process (what ``FedBary.reference`` did), "after" =
``FedBary.reference`` with its solves on 2 in-process workers, then on 1. Prints each one's
seconds with the load average at its start, and whether the three give the same numbers. POT's
warnings are errors."""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))  # bench/: the checkout's, not installed


def main(n_clients: int) -> None:
    from testbed.threads import limit_blas_threads

    limit_blas_threads(1)  # as the CLI does
    from bench.data import make_clients
    from protocols.fedbary import FedBary, FedBaryConfig, central_barycenter, contributions
    from testbed import ot as tot
    from testbed.exchange.engines import reference_engine
    from testbed.measure import Measure

    parties = make_clients(n_clients, 500, 64, 0)

    def before() -> dict[str, float]:
        clients = list(parties)
        pooled = np.vstack([parties[c].X for c in clients])
        init = pooled[np.random.default_rng(0).choice(pooled.shape[0], 500, replace=False)]
        Q = central_barycenter([Measure(parties[c].X) for c in clients], init)
        dist = {c: tot.wasserstein(Measure(parties[c].X), Q) for c in clients}
        out = {f"distance_{c}": v for c, v in dist.items()}
        out.update({f"contribution_{c}": v for c, v in contributions(dist).items()})
        return out

    def after(workers: int):
        with reference_engine("inprocess", {"workers": workers}):
            return FedBary(FedBaryConfig()).reference(parties)

    warnings.simplefilter("error")
    res = {}
    for name, fn in (
        ("before", before),
        ("after, 2 workers", lambda: after(2)),
        ("after, 1 worker", lambda: after(1)),
    ):
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        res[name] = fn()
        print(f"{name}: {time.perf_counter() - t0:.1f} s (load {load:.1f})", flush=True)
    same = res["before"] == res["after, 2 workers"] == res["after, 1 worker"]
    print(f"same numbers: {same}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
