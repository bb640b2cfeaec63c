"""Does POT's warm start (``ot.emd(..., potentials_init=(u, v))``, POT >= 0.9.6) speed up FedWAD
paper mode? ``python -m bench.warm_start [n d S]`` (default 2000 64 10).

It replays FedWAD's barycentric iteration (t = 0.5, K = 20, the bench's data and xi^(0)) and
solves each client's plan twice, alternating: cold (as FedWAD does), and warm from the same
client's previous round, its potential on xi's atoms ``v`` (atom j of xi^(k) is atom j of
xi^(k-1) moved: the support is on xi's side) and the c-transform ``u_i = min_j M_ij - v_j`` on
the new costs, which makes the start dual-feasible. It prints the CPU time of each (fastest of
``repeats`` per problem, one BLAS thread), how many plans differ and by how much, and how many rows
change atom from one round to the next (what the warm start has to undo).
"""

from __future__ import annotations

import sys
import time

import numpy as np

__all__ = ["warm_start_study"]


def _fastest(repeats: int, fn, *args, **kw):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.process_time()
        out = fn(*args, **kw)
        best = min(best, time.process_time() - t0)
    return best, out


def warm_start_study(
    n: int = 2000, d: int = 64, S: int = 10, K: int = 20, repeats: int = 5, seed: int = 0
) -> dict:
    """Cold and warm CPU seconds over the 2K client solves of one run, plans differing, rows
    moved per round (median)."""
    import ot

    from bench.data import make_pair
    from testbed import ot as tot
    from testbed.measure import Measure

    parties = make_pair(n, d, seed)
    own = [Measure(parties["alice"].X), Measure(parties["bob"].X)]
    xi = Measure(np.random.default_rng(seed).normal(0.0, 1.0, size=(S, d)))
    cold = warm = 0.0
    differ, worst, moved = 0, 0.0, []
    v_prev: list[np.ndarray | None] = [None, None]
    plan_prev: list[np.ndarray | None] = [None, None]
    for _ in range(K):
        steps = []
        for c in (0, 1):
            a, b = own[c].weights, xi.weights
            M = tot.measure_cost(own[c], xi)
            v = v_prev[c]
            pot = None if v is None else ((M - v[None, :]).min(axis=1), v)
            kw = dict(numItermax=tot.NUM_ITERMAX, log=True)
            tc, (P, _) = _fastest(repeats, ot.emd, a, b, M, **kw)
            tw, (Pw, log) = _fastest(repeats, ot.emd, a, b, M, potentials_init=pot, **kw)
            cold, warm = cold + tc, warm + tw
            if not np.array_equal(P, Pw):
                differ += 1
                worst = max(worst, float(np.abs(P - Pw).max()))
            if plan_prev[c] is not None:
                moved.append(int(np.sum((P > 0) != (plan_prev[c] > 0))) // 2)
            v_prev[c], plan_prev[c] = np.asarray(log["v"]), P
            steps.append(tot.interpolate_barycentric(own[c], xi, 0.5, P=P))
        xi = tot.interpolate_barycentric(steps[0], steps[1], 0.5)
    return {
        "n": n,
        "d": d,
        "S": S,
        "solves": 2 * K,
        "cold_seconds": cold,
        "warm_seconds": warm,
        "plans_differ": differ,
        "largest_entry_difference": worst,
        "rows_moved_median": float(np.median(moved)) if moved else 0.0,
    }


if __name__ == "__main__":
    from testbed.threads import limit_blas_threads

    limit_blas_threads(1)
    args = [int(x) for x in sys.argv[1:4]]
    r = warm_start_study(*args)
    print(
        f"n={r['n']} d={r['d']} S={r['S']}: {r['solves']} client solves, CPU cold "
        f"{1e3 * r['cold_seconds']:.1f} ms, warm {1e3 * r['warm_seconds']:.1f} ms "
        f"(warm/cold {r['warm_seconds'] / r['cold_seconds']:.2f}); plans differ in "
        f"{r['plans_differ']} (largest entry difference {r['largest_entry_difference']:.2g}); "
        f"rows changing atom per round: median {r['rows_moved_median']:.0f} of {r['n']}"
    )
