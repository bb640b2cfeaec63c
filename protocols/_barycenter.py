"""The free-support Wasserstein barycenter's fixed point (Cuturi & Doucet 2014; Alvarez-Esteban
et al. 2016) with the arithmetic of POT's ``ot.lp.free_support_barycenter``: FedBary's server step
(:func:`barycenter_steps`) and the testbed's central reference (:func:`central_barycenter_on`,
its client solves on an engine's workers). POT's own function (:func:`central_barycenter`) is the
checked reference in tests/test_fedbary.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.exchange.bus import Bus
from testbed.measure import Measure

__all__ = [
    "REFERENCE_STEP",
    "barycenter_steps",
    "central_barycenter",
    "central_barycenter_on",
    "fixed_point_steps",
    "pooled_start",
]

#: The reference barycenter's fixed point stops once a step moves it by at most this fraction
#: of the pooled rows' RMS radius in W2 (an upper bound of how far any reference distance
#: moves in that step). At 1000 clients x 500 rows, d = 64 (docs/findings/benchmarks.md) it
#: stops after 20 steps, its distances within 0.14 % of where 100 steps take them (Spearman
#: 0.9989); 1e-3 took 71 steps (0.025 %), a precision that the error it scores (FedBary's 7 %
#: at 100 clients) does not need.
REFERENCE_STEP = 4e-3


def pooled_start(
    parties: Mapping[str, PartyData], clients: Sequence[str], S: int
) -> tuple[np.ndarray, float]:
    """The reference barycenter's start, ``S`` distinct rows of the clients' rows pooled in
    order (``default_rng(0)``), and the pooled rows' RMS distance to their mean, without
    stacking the pooled rows (at 1000 clients x 500 rows, d = 64: 256 MB)."""
    sizes = np.array([parties[c].n for c in clients])
    picks = np.random.default_rng(0).choice(int(sizes.sum()), S, replace=False)
    ends = np.cumsum(sizes)
    owner = np.searchsorted(ends, picks, side="right")
    dtype = np.result_type(*(parties[c].X.dtype for c in clients))  # np.vstack's
    init = np.empty((S, parties[clients[0]].X.shape[1]), dtype=dtype)
    for k in np.unique(owner):
        at = owner == k
        init[at] = parties[clients[k]].X[picks[at] - (ends[k] - sizes[k])]
    total = float(sizes.sum())
    mean = sum(parties[c].X.sum(axis=0) for c in clients) / total
    sq = sum(float(np.sum((parties[c].X - mean) ** 2)) for c in clients)
    return init, float(np.sqrt(sq / total))


def central_barycenter(
    measures: Sequence[Measure], X_init: np.ndarray, iterations: int = 100, stop_thr: float = 1e-7
) -> Measure:
    """POT's central free-support barycenter (``ot.lp.free_support_barycenter``), uniform λ,
    uniform weights on ``X_init``'s atoms, POT's ``stopThr`` = ``stop_thr``."""
    import ot  # ot: validate imports this module

    X = ot.lp.free_support_barycenter(
        [m.support for m in measures],
        [m.weights for m in measures],
        np.asarray(X_init, dtype=np.float64),
        numItermax=iterations,
        stopThr=stop_thr,
    )
    return Measure(X)


def fixed_point_steps(
    X_init: np.ndarray,
    count: int,
    steps: int,
    products: Callable[[np.ndarray, np.ndarray, int], Sequence[np.ndarray]],
    stop_thr: float = 1e-7,
) -> Measure:
    """The free-support barycenter's fixed-point iteration with the arithmetic of POT's
    ``ot.lp.free_support_barycenter`` (uniform λ over ``count`` measures, uniform weights ``b``
    on the atoms, the same update, summation order and ``stopThr`` rule).

    ``products(X, b, it)`` returns, for every measure :math:`i` in order, :math:`T_i Y_i`: the
    optimal plan between ``Measure(X, b)`` and measure :math:`i` times its support. The solves
    of one step are independent, so ``products`` may run them anywhere (on an engine's workers);
    the driver sums them here in POT's order, so where they ran does not change a bit."""
    X = np.asarray(X_init, dtype=np.float64)
    k, d = X.shape
    b = np.ones((k,), dtype=np.float64) / k
    lam = np.ones((count,), dtype=np.float64) / count
    displacement = stop_thr + 1.0
    it = 0
    while displacement > stop_thr and it < steps:
        T_sum = np.zeros((k, d), dtype=np.float64)
        for TY, w in zip(products(X, b, it), lam):
            T_sum = T_sum + w * 1.0 / b[:, None] * TY
        displacement = np.sum((T_sum - X) ** 2)
        X = T_sum
        it += 1
    return Measure(X)


def _plan_from(
    X: np.ndarray, b: np.ndarray, m: Measure, assignment: bool
) -> np.ndarray | tot.Assignment:
    """Optimal plan from the atoms ``X`` with weights ``b`` as POT's barycenter passes them (not
    renormalised by :class:`Measure`, which moves 1/k by an ulp for some k) to ``m`` (an
    :class:`~testbed.ot.Assignment` when ``assignment`` solved it: only its product is used)."""
    T, _ = tot.emd_plan(b, m.weights, tot.cost_matrix(X, m.support), assignment, dense=False)
    return T


def barycenter_steps(
    measures: Sequence[Measure],
    X_init: np.ndarray,
    steps: int,
    first_plans: Sequence[np.ndarray | None] | None = None,
    stop_thr: float = 1e-7,
    assignment: bool = False,
    first_products: Sequence[np.ndarray | None] | None = None,
) -> Measure:
    """``steps`` steps of :func:`fixed_point_steps` on ``measures`` in this process, so the
    result equals :func:`central_barycenter`'s bit for bit (tests/test_fedbary.py).

    ``first_plans[i]``, when given, is the optimal plan between ``Measure(X_init)`` and
    ``measures[i]`` already solved elsewhere (FedBary's server solved exactly that problem for
    its interpolation in the same round): the first step reuses it instead of solving it again.
    The network simplex is deterministic, so the reused plan is the one POT would compute. Plans
    not given are solved with :func:`testbed.ot.plan` (iteration cap 1e7, non-optimality is an
    error; POT's barycenter uses its default cap 1e5 and only warns); ``assignment``: see
    :func:`testbed.ot.emd_plan`. ``first_products[i]``, when given, is that plan already applied
    to ``measures[i].support`` (:func:`testbed.ot.plan_product`, the same function on the same
    inputs wherever it ran): FedBary's server step returns this k x d product from a worker
    instead of the k x n plan."""

    def products(X, b, it):
        out = []
        for i, m in enumerate(measures):
            if it == 0 and first_products is not None and first_products[i] is not None:
                out.append(first_products[i])
                continue
            T = first_plans[i] if it == 0 and first_plans is not None else None
            if T is None:
                T = _plan_from(X, b, m, assignment)
            out.append(tot.plan_product(T, m.support))
        return out

    return fixed_point_steps(X_init, len(measures), steps, products, stop_thr)


def _pushforward(party: PartyData, X: np.ndarray, b: np.ndarray, assignment: bool) -> np.ndarray:
    """Testbed side, at the worker holding ``party``: :math:`T Y` for the optimal plan :math:`T`
    between ``Measure(X, b)`` and the party's rows :math:`Y` (one client solve of a central
    barycenter step)."""
    own = party.measure
    return tot.plan_product(_plan_from(X, b, own, assignment), own.support)


def central_barycenter_on(
    bus: Bus,
    clients: Sequence[str],
    X_init: np.ndarray,
    iterations: int = 100,
    assignment: bool = True,
    stop_thr: float = 1e-7,
) -> Measure:
    """:func:`central_barycenter` of the clients' rows (uniform weights), computed with each
    step's client solves on ``bus``'s workers (``bus.local_map``) and summed here in POT's order:
    the same quantity, bit for bit, as ``ot.lp.free_support_barycenter`` when every optimal plan
    is unique (tests/test_fedbary.py). ``assignment``: solve the uniform equal-size plans with
    :func:`testbed.ot.assignment_plan` (exact; the plan may be another optimal one on ties).
    ``stop_thr``: POT's rule, stop once a step moves the atoms by at most this much (the sum of
    their squared moves); POT's default, 1e-7, runs until no client's assignment changes."""

    def products(X, b, it):
        return bus.local_map([(c, _pushforward, X, b, assignment) for c in clients])

    return fixed_point_steps(X_init, len(clients), iterations, products, stop_thr)
