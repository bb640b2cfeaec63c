"""What the benchmarks time: the protocol cases (two parties, N clients), the options of a
benchmark run, the exact ``ot.emd`` baseline, and the public FedWAD code's algorithm
(re-implemented for timing only)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.timing import peak_memory, time_interleaved
from testbed.errors import TestbedError
from testbed.exchange.bus import Bus

__all__ = [
    "CLIENT_CASES",
    "PAIR_CASES",
    "BenchCase",
    "BenchOptions",
    "case_keys",
    "emd_baseline",
    "fedwad_public_algorithm",
    "make_protocol",
    "measure_against",
    "pick",
    "registered",
    "run_protocol",
]

FULL_N = (250, 500, 1000, 2000, 4000)
FULL_D = (2, 64, 784)
FULL_CLIENTS = (5, 20, 100, 1000)
QUICK_N = (250, 500)
QUICK_D = (2, 64)
QUICK_CLIENTS = (5, 20)


def fedwad_public_algorithm(
    X: np.ndarray,
    Y: np.ndarray,
    support_size: int = 10,
    iterations: int = 20,
    t: float = 0.5,
    rng: np.random.Generator | None = None,
    xi0: np.ndarray | None = None,
) -> float:
    """The public FedWAD code's *algorithm*, re-implemented for timing (the code is not copied).

    Barycentric interpolating measures with uniform weights and the map ``n * P @ Y`` (support on
    the smaller side), POT's default ``ot.emd`` (iteration cap 1e5; its warnings are swallowed, as
    in the public code), t fixed, distances only at the end, xi's weights taken uniform.
    Returns :math:`W(\\mu, \\xi^{(K)}) + W(\\xi^{(K)}, \\nu)`.
    """
    import ot  # at first use: importing POT takes seconds that refusing bad input does not need

    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if xi0 is None:
        rng = rng if rng is not None else np.random.default_rng(0)
        xi0 = rng.normal(0.0, 1.0, size=(support_size, X.shape[1]))
    xi = np.asarray(xi0, dtype=np.float64)

    def emd(A, B):
        a, b = ot.unif(len(A)), ot.unif(len(B))
        return ot.emd(a, b, ot.dist(A, B))

    def interp(A, B):
        P = emd(A, B)
        if len(A) <= len(B):
            return (1.0 - t) * A + t * len(A) * (P @ B)
        return (1.0 - t) * len(B) * (P.T @ A) + t * B

    def w(A, B):
        M = ot.dist(A, B)
        P = ot.emd(ot.unif(len(A)), ot.unif(len(B)), M)
        return math.sqrt(max(float(np.sum(P * M)), 0.0))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(iterations):
            xi_mu = interp(X, xi)
            xi_nu = interp(Y, xi)
            xi = interp(xi_mu, xi_nu)
        return w(X, xi) + w(xi, Y)


@dataclass(frozen=True)
class BenchCase:
    """One protocol setting to time. ``max_n`` / ``max_clients`` cap it in the full grid (its
    cost there is noted in the output instead)."""

    key: str
    protocol: str
    params: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    max_n: int | None = None
    max_clients: int | None = None
    max_ray_clients: int | None = None
    points_per_client: int = 50
    dim: int = 64


PAIR_CASES: tuple[BenchCase, ...] = (
    BenchCase(
        "fedwad_paper",
        "fedwad",
        {"support_size": 10, "iterations": 20, "trace": False},
        "FedWAD, paper mode, S=10, K=20",
    ),
    BenchCase(
        "fedwad_accurate",
        "fedwad",
        {"mode": "accurate", "trace": False},
        "FedWAD, accurate mode",
        max_n=500,
    ),
    BenchCase("triangle_wad", "triangle_wad", {}, "TriangleWad, known t, defaults"),
)

CLIENT_CASES: tuple[BenchCase, ...] = (
    BenchCase(
        "fedbary",
        "fedbary",
        {"trace": False},
        "FedBary, no validation set, K=10, S=points per client",
        points_per_client=50,
        dim=64,
    ),
    BenchCase(
        "fedwad_pairwise",
        "fedwad_clustering",
        {"fedwad": {"support_size": 10, "iterations": 10, "init_scale": 5.0, "trace": False}},
        "pairwise FedWAD + spectral clustering, S=10, K=10",
        max_clients=100,
        max_ray_clients=20,
        points_per_client=50,
        dim=64,
    ),
)


@dataclass
class BenchOptions:
    ns: Sequence[int] = QUICK_N
    ds: Sequence[int] = QUICK_D
    clients: Sequence[int] = QUICK_CLIENTS
    cases: Sequence[str] | None = None  # case keys; None = every case whose protocol exists
    memory: bool = True
    overhead_n: Sequence[int] = (500,)
    overhead_d: Sequence[int] = (64,)
    public_fedwad: bool = True
    targets: bool = False
    report_scenario: str | None = None
    budget: float = 2.0
    seed: int = 0
    ray: bool = False
    ray_clients: Sequence[int] = ()
    pairwise_clients: Sequence[int] = ()  # pairwise FedWAD on Ray (bench.pairwise)
    pairwise_pairs: int | None = 500  # None: every pair
    log: Callable[[str], None] = field(default=lambda s: None)
    progress: bool = False  # progress bars on long sections (the full pairwise run)
    #: what a user waits for (bench.waits): on in ``testbed bench`` (quick and full)
    waits: bool = False

    @classmethod
    def quick(cls, **kw) -> BenchOptions:
        return cls(**{"waits": True, **kw})

    @classmethod
    def full(cls, **kw) -> BenchOptions:
        base = dict(
            ns=FULL_N,
            ds=FULL_D,
            clients=FULL_CLIENTS,
            overhead_n=(1000,),
            overhead_d=(64, 784),
            targets=True,
            pairwise_clients=(100, 200, 400, 1000),
            waits=True,
        )
        base.update(kw)
        return cls(**base)


def registered(name: str) -> bool:
    import protocols  # noqa: F401  (registers the built-ins)
    from testbed.registry import PROTOCOLS

    return name in dict(PROTOCOLS.items())


def make_protocol(case: BenchCase):
    from testbed.registry import PROTOCOLS

    cls = PROTOCOLS.get(case.protocol)
    return cls(cls.Config(**dict(case.params)))


def emd_baseline(X: np.ndarray, Y: np.ndarray) -> Callable[[], Any]:
    import ot

    a, b = ot.unif(len(X)), ot.unif(len(Y))
    M = ot.dist(X, Y)

    def run():
        return ot.emd(a, b, M, numItermax=10_000_000)

    return run


def run_protocol(case: BenchCase, parties, bus_factory=None, seed: int = 0):
    proto = make_protocol(case)

    def run():
        bus = bus_factory(parties) if bus_factory else Bus(parties=parties)
        run.bus = bus  # the last run's bus (its transcript digest is compared across engines)
        return proto.run(parties, bus, np.random.default_rng(seed))

    return run


def measure_against(fn, baseline, opts: BenchOptions, memory: bool) -> dict[str, Any]:
    """Time ``fn`` against ``baseline``; ``_result`` holds what the last call of ``fn`` returned."""
    last: list[Any] = []

    def call():
        last[:] = [fn()]

    t_fn, t_base, reps = time_interleaved(call, baseline, budget=opts.budget)
    row = {
        "seconds": t_fn,
        "emd_seconds": t_base,
        "ratio": t_fn / t_base,
        "repeats": reps,
        "_result": last[0],
    }
    if memory:
        m_fn, m_base = peak_memory(fn), peak_memory(baseline)
        row.update(peak_mib=m_fn / 2**20, emd_peak_mib=m_base / 2**20, mem_ratio=m_fn / m_base)
    return row


#: ``--cases`` keys that name a section rather than a protocol case: the public FedWAD code's
#: algorithm beside paper mode, the sandbox's cost per attack, and ``pairwise``, which names no
#: case (``--pairwise N --cases pairwise``: that section alone)
SECTION_KEYS = ("fedwad_public", "isolation", "pairwise")


def case_keys(text: str) -> list[str]:
    """The keys of a ``--cases`` value (comma-separated); an unknown key is bad input."""
    keys = [c.strip() for c in text.split(",") if c.strip()]
    known = [c.key for c in (*PAIR_CASES, *CLIENT_CASES)] + list(SECTION_KEYS)
    unknown = [k for k in keys if k not in known]
    if unknown or not keys:
        what = f"unknown case {unknown[0]!r}" if unknown else "no case given"
        raise TestbedError(f"bench: --cases: {what}; the cases: {', '.join(known)}")
    return keys


def pick(cases: Sequence[BenchCase], opts: BenchOptions) -> list[BenchCase]:
    return [c for c in cases if opts.cases is None or c.key in opts.cases]
