"""Can FedWAD paper mode's exact solves be made cheaper? ``python -m bench.warm_start [n d S]``
(default 2000 64 10).

It replays FedWAD's barycentric iteration (t = 0.5, K = 20, the bench's data and xi^(0)) and
solves each of the 2K client problems (n x S) with every candidate, interleaved, keeping the
fastest of ``repeats`` CPU times per problem (one BLAS thread):

- ``cold``: ``ot.emd(a, b, M)`` from scratch, as FedWAD does;
- ``warm_ctransform``: POT's warm start (``potentials_init``, POT >= 0.9.6) from the same client's
  previous round: its potential ``v`` on xi's atoms (atom j of xi^(k) is atom j of xi^(k-1)
  moved: the support is on xi's side) and ``u_i = min_j M_ij - v_j``, its c-transform on the new
  costs, a dual-feasible start;
- ``warm_previous``: the previous round's ``(u, v)`` as they are;
- ``warm_same``: the *same* problem's optimal potentials (solved beforehand, not counted): the
  most any warm start can give, since no start is closer;
- ``transposed``: ``ot.emd(b, a, M.T)`` (S x n: the same problem, the smaller side first).

It also counts the rows whose atom changes from one round to the next (a round with none
would make every later round repeat it: an exact fixed point). Every candidate's cost is checked
against the cold one at 1e-12 relative.
"""

from __future__ import annotations

import sys
import time

import numpy as np

__all__ = ["CANDIDATES", "warm_start_study"]

#: the solvers compared, in the order they run on each problem
CANDIDATES = ("cold", "warm_ctransform", "warm_previous", "warm_same", "transposed")


def _problems(n: int, d: int, S: int, K: int, seed: int) -> list[tuple]:
    """The 2K client problems of one paper-mode run: (client, M, a, b, P, u, v) per solve."""
    import ot

    from bench.data import make_pair
    from testbed import ot as tot
    from testbed.measure import Measure

    parties = make_pair(n, d, seed)
    own = [Measure(parties["alice"].X), Measure(parties["bob"].X)]
    xi = Measure(np.random.default_rng(seed).normal(0.0, 1.0, size=(S, d)))
    out = []
    for _ in range(K):
        steps = []
        for c in (0, 1):
            M = tot.measure_cost(own[c], xi)
            P, log = ot.emd(own[c].weights, xi.weights, M, numItermax=tot.NUM_ITERMAX, log=True)
            out.append((c, M, own[c].weights, xi.weights, P, np.asarray(log["u"]), log))
            steps.append(tot.interpolate_barycentric(own[c], xi, 0.5, P=P))
        xi = tot.interpolate_barycentric(steps[0], steps[1], 0.5)
    return out


def _calls(problems: list[tuple], i: int) -> dict:
    """Each candidate's call on problem ``i`` (the warm starts from the same client's previous
    problem, ``i - 2``; on a client's first problem they start cold)."""
    import ot

    from testbed import ot as tot

    _, M, a, b, _, _, log = problems[i]
    kw = dict(numItermax=tot.NUM_ITERMAX, log=True, center_dual=False, check_marginals=False)
    prev = problems[i - 2][6] if i >= 2 else None
    same = (np.asarray(log["u"]), np.asarray(log["v"]))
    warm = {}
    if prev is not None:
        v = np.asarray(prev["v"])
        warm = {
            "warm_ctransform": ((M - v[None, :]).min(axis=1), v),
            "warm_previous": (np.asarray(prev["u"]), v),
        }
    Mt = np.ascontiguousarray(M.T)
    return {
        "cold": lambda: ot.emd(a, b, M, **kw),
        "warm_ctransform": lambda: ot.emd(
            a, b, M, potentials_init=warm.get("warm_ctransform"), **kw
        ),
        "warm_previous": lambda: ot.emd(a, b, M, potentials_init=warm.get("warm_previous"), **kw),
        "warm_same": lambda: ot.emd(a, b, M, potentials_init=same, **kw),
        "transposed": lambda: ot.emd(b, a, Mt, **kw),
    }


def warm_start_study(
    n: int = 2000, d: int = 64, S: int = 10, K: int = 20, repeats: int = 5, seed: int = 0
) -> dict:
    """CPU seconds of every candidate over the 2K client solves of one run (sum of each
    problem's fastest of ``repeats``, the candidates interleaved), plans that differ from the
    cold ones beyond rounding, and the rows changing atom per round."""
    problems = _problems(n, d, S, K, seed)
    best = {k: np.full(len(problems), np.inf) for k in CANDIDATES}
    differ = dict.fromkeys(CANDIDATES, 0)
    for r in range(repeats):
        for i, (_, _, _, _, P, _, log) in enumerate(problems):
            for name, call in _calls(problems, i).items():
                t0 = time.process_time()
                G, lg = call()
                best[name][i] = min(best[name][i], time.process_time() - t0)
                if r == 0:
                    G = G.T if name == "transposed" else G
                    if abs(lg["cost"] - log["cost"]) > 1e-12 * abs(log["cost"]):
                        raise AssertionError(f"{name}: cost {lg['cost']!r} vs {log['cost']!r}")
                    differ[name] += int(np.abs(G - P).max() > 1e-12)
    moved = [
        int(np.sum((problems[i][4] > 0) != (problems[i - 2][4] > 0))) // 2
        for i in range(2, len(problems))
    ]
    seconds = {k: float(v.sum()) for k, v in best.items()}
    return {
        "n": n,
        "d": d,
        "S": S,
        "solves": len(problems),
        "seconds": seconds,
        "over_cold": {k: v / seconds["cold"] for k, v in seconds.items()},
        "plans_differ": differ,
        "rows_moved": moved,
        "rounds_without_change": sum(m == 0 for m in moved),
    }


def _report(r: dict) -> str:
    lines = [
        f"n={r['n']} d={r['d']} S={r['S']}: {r['solves']} client solves, CPU ms (sum of each "
        "problem's fastest), x cold, plans differing beyond 1e-12:"
    ]
    for k in CANDIDATES:
        lines.append(
            f"  {k:16s} {1e3 * r['seconds'][k]:8.1f} ms  {r['over_cold'][k]:5.2f}x  "
            f"{r['plans_differ'][k]}"
        )
    m = r["rows_moved"]
    lines.append(
        f"rows changing atom per round: median {np.median(m):.0f} of {r['n']} (min {min(m)}, "
        f"max {max(m)}); rounds without a change: {r['rounds_without_change']}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    from testbed.threads import limit_blas_threads

    limit_blas_threads(1)
    print(_report(warm_start_study(*[int(x) for x in sys.argv[1:4]])))
