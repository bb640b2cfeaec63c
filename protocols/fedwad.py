r"""FedWAD: federated Wasserstein distance by geodesic interpolating measures.

Algorithm 1 of Rakotomamonjy, Nadjahi & Ralaivola, *Federated Wasserstein Distance* [1].

Two clients hold :math:`\mu` and :math:`\nu`; the server holds an iterate :math:`\xi^{(k)}`.
At every round the server sends :math:`\xi^{(k-1)}` to both clients; client :math:`\mu` returns
:math:`\xi_\mu^{(k)} = \mathrm{Interp}(\mu, \xi^{(k-1)}, t)`, client :math:`\nu` returns
:math:`\xi_\nu^{(k)} = \mathrm{Interp}(\nu, \xi^{(k-1)}, t)`, and the server sets
:math:`\xi^{(k)} = \mathrm{Interp}(\xi_\mu^{(k)}, \xi_\nu^{(k)}, t)`. After K rounds the
server sends :math:`\xi^{(K)}`; the clients return :math:`W(\mu, \xi^{(K)})` and
:math:`W(\xi^{(K)}, \nu)`, whose sum is the estimate (an upper bound of :math:`W(\mu,\nu)` by
the triangle inequality).

``Interp`` is the exact interpolating measure (eq. 5) or its barycentric approximation (eq. 10,
in its general-weight form diag(1/a)·P·Y). Every measure and distance goes through the bus.

Deviations from the public reference code (papers/README.md, fact 4), all deliberate:
the final cost keeps the weights of a non-uniform :math:`\xi` (4a); the barycentric map is
diag(1/a)·P·Y (4b); every ``ot.emd`` passes numItermax >= 1e6 and fails on non-optimality (4c);
t is fixed unless ``t: random`` is asked for (4d).

**Accurate mode** (``mode: accurate``; not in the paper, our design). The paper's barycentric
mode cannot go below the S-point quantisation error of each measure (papers/README.md, fact 3:
+28 % to +143 % on d = 50 Gaussians and digits), and with S ~ n and a spread-out random
:math:`\xi^{(0)}` the iteration freezes at a stable but non-optimal matching (+15 % on d = 50).
The accurate mode changes three things: :math:`\xi^{(0)}` is a single atom ``z`` (``init_mean``),
every interpolation is exact (eq. 5, support at most n + m - 1 per step, coinciding atoms merged:
:func:`testbed.ot.interpolate_exact`), and the clients send
:math:`W(\cdot, \xi^{(k-1)})` every round so the server stops once the bound decreases by less than
``tol`` (relative) and reports the smallest bound seen (each is an upper bound of W). Measured:
2e-5 to 6e-5 relative error on digits (0-4 vs 5-9, random halves) and d = 50 Gaussians
(1000 vs 1000, 1000 vs 333) within 7-9 rounds.
**What it exchanges**: about n + m atoms per message instead of S, and — the price of the
accuracy — the round-1 message of client :math:`\mu` is :math:`(1-t)\mu + t\,\delta_z`, i.e. the
client's data up to a public homothety, which the server inverts in one line. It is a
*reference point for accuracy*, not a private protocol; the attacks measure this.

Theorem 2 of [1] states that the bound :math:`A^{(k)}` is non-increasing with exact
interpolation. The testbed records :math:`A^{(k)}` each round as a diagnostic (computed by the
testbed with access to both datasets, never sent) so tests can check it.

References
----------
.. [1] A. Rakotomamonjy, K. Nadjahi, L. Ralaivola. Federated Wasserstein Distance. ICLR 2024.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from protocols._base import Protocol, ProtocolResult, drive
from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.errors import DataError
from testbed.exchange.bus import SERVER, Bus, parallel_safe
from testbed.exchange.schema import Array, MeasureOf, Message, Num, Record
from testbed.measure import Measure
from testbed.registry import PROTOCOLS, PluginConfig, check_parties

__all__ = ["FedWAD", "FedWADConfig", "fedwad_round_interp"]


class FedWADConfig(PluginConfig):
    clients: list[str] | None = Field(
        None, description="the two parties holding mu and nu (default: the first two)"
    )
    mode: Literal["paper", "accurate"] = Field(
        "paper",
        description="'paper' = Algorithm 1 as published; 'accurate' = see the class docstring",
    )
    interpolation: Literal["barycentric", "exact"] = Field(
        "barycentric", description="eq. 10 (fixed support S) or eq. 5 (support grows)"
    )
    support_size: int = Field(
        10, gt=0, description="S: atoms of xi^(0) (and of every iterate in barycentric mode)"
    )
    iterations: int = Field(20, gt=0, description="K: rounds of Algorithm 1")
    t: float | Literal["random"] = Field(
        0.5, description="interpolation time in (0,1), or 'random' (drawn per measure per round)"
    )
    t_range: tuple[float, float] = Field((0.05, 0.95), description="range of t when t='random'")
    distances: Literal["end", "every_round"] = Field(
        "end", description="send distances only at the end (paper's privacy advice) or every round"
    )
    init_scale: float = Field(
        1.0, gt=0, description="xi^(0) ~ N(init_mean, init_scale^2 I), drawn by the server"
    )
    init_mean: float = 0.0
    prune: float = Field(
        1e-12, ge=0, description="exact mode: plan entries below prune*max are dropped"
    )
    tol: float = Field(
        1e-3,
        gt=0,
        description="accurate mode: stop when the bound decreases by less than this (relative)",
    )
    plan_tie_break: bool = Field(
        False,
        description="break ties of each client's OT plan by a data-independent random "
        "perturbation of the costs (1e-6 (1 + max |xi atom|^2) U(0,1)), so the plan is unique and a barycentric "
        "push moves by O(C S^1.5 / n) when one row changes (gaussian_measure_noise's tight "
        "calibration sets it; not in the paper)",
    )
    trace: bool = Field(
        True,
        description="record the bound A^(k) and the running estimate each round (testbed diagnostic, not sent)",
    )

    @field_validator("clients")
    @classmethod
    def _two_parties(cls, v, info: ValidationInfo):
        if v:  # [] is the default, as null
            if len(v) != 2:
                raise ValueError(f"names the two parties holding mu and nu, got {len(v)}")
            check_parties(v, info)
        return v

    @model_validator(mode="after")
    def _check(self):
        if isinstance(self.t, float) and not 0.0 < self.t < 1.0:
            raise ValueError("t must be in (0, 1) or 'random'")
        lo, hi = self.t_range
        if not 0.0 < lo < hi < 1.0:
            raise ValueError("t_range must satisfy 0 < low < high < 1")
        return self


def fedwad_round_interp(
    a: Measure,
    b: Measure,
    t: float,
    interpolation: str,
    prune: float = 1e-12,
    assignment: bool = False,
    dense: bool = True,
    tie_seed: int | None = None,
) -> tuple[Measure, np.ndarray | tot.Assignment, float]:
    """One ``InterpMeas(a, b, t)`` of Algorithm 1; returns the measure, the plan and W^2(a, b).

    ``interpolation`` is ``"exact"`` (eq. 5) or ``"barycentric"`` (eq. 10); ``assignment`` and
    ``dense`` (the plan as an :class:`~testbed.ot.Assignment` when it is one): see
    :func:`testbed.ot.emd_plan`. ``tie_seed``: the plan is the optimum of the costs plus
    1e-6 × (1 + max_j |b_j|²) × U(0, 1) noise drawn from it (``b`` is the public measure the
    client received: nothing here depends on ``a``'s rows), which is unique with probability 1;
    W^2 is then the exact one."""
    if interpolation not in ("exact", "barycentric"):
        raise ValueError(f"interpolation must be 'exact' or 'barycentric', got {interpolation!r}")
    if tie_seed is not None:
        return _tie_broken_interp(a, b, t, interpolation, prune, tie_seed)
    P, cost = tot.plan(a, b, assignment=assignment, dense=dense)
    if interpolation == "exact":
        return tot.interpolate_exact(a, b, t, P=P, prune=prune), P, cost
    return tot.interpolate_barycentric(a, b, t, side="smallest", P=P), P, cost


def _tie_broken_interp(a, b, t, interpolation, prune, tie_seed):
    M = tot.measure_cost(a, b)
    noise = np.random.default_rng(tie_seed).uniform(size=M.shape)
    # the scale must not depend on the private rows (a: the client's own measure): the proof
    # compares two datasets under the *same* perturbed costs of their common rows
    scale = 1e-6 * (1.0 + float(np.max(np.sum(b.support**2, axis=1))))
    P, _ = tot.plan(a, b, M=M + scale * noise)
    cost = tot.sq_wasserstein(a, b, M)
    if interpolation == "exact":
        return tot.interpolate_exact(a, b, t, P=P, prune=prune), P, cost
    return tot.interpolate_barycentric(a, b, t, side="smallest", P=P), P, cost


# -- computations that run at a client (through ``bus.local``): they see the client's own data.
# Each reads only its arguments and its party's data, so the two clients' calls of a round may run
# at once on an in-process bus (``parallel_safe``; same results bit for bit).
def _dim(party: PartyData) -> int:
    return party.X.shape[1]


@parallel_safe
def _client_step(
    party: PartyData,
    xi: Measure,
    t: float,
    interpolation: str,
    prune: float,
    tie_seed: int | None = None,
) -> tuple[Measure, float]:
    """Client side of a round: the interpolating measure toward xi, and W(own, xi)."""
    own = party.measure
    out, _, cost = fedwad_round_interp(own, xi, t, interpolation, prune, tie_seed=tie_seed)
    return out, float(np.sqrt(cost))


@parallel_safe
def _distance_to(party: PartyData, xi: Measure) -> float:
    return tot.wasserstein(party.measure, xi)


@parallel_safe
def _trace_own(party: PartyData, xi_own: Measure) -> float:
    return tot.wasserstein(party.measure, xi_own)


def _trace_estimate(xi: Measure, sides) -> Generator[list, list, float]:
    """The trace's W(mu, xi) + W(xi, nu) for the iterate ``xi`` of a round. ``sides`` holds, per
    client, (party, the measure it received next, the distance it computed to that measure):
    its next step (or the final distance) solves exactly W(own, received), so when the received
    measure is ``xi`` itself (no defense changed it) that distance is the term, bit for bit, and
    is not solved again; otherwise the term is computed at the client from ``xi``."""
    terms = {}
    for name, got, w in sides:
        if got is xi or (
            got.support.shape == xi.support.shape
            and np.array_equal(got.support, xi.support)
            and np.array_equal(got.weights, xi.weights)
        ):
            terms[name] = w
    redo = [name for name, _, _ in sides if name not in terms]
    if redo:
        terms.update(zip(redo, (yield [(name, _distance_to, xi) for name in redo])))
    return terms[sides[0][0]] + terms[sides[1][0]]


def _seed(rng: np.random.Generator | None) -> int | None:
    return None if rng is None else int(rng.integers(2**63))


#: every message kind one FedWAD run sends (reused by the protocols built on it)
#: FedWAD's messages (shared by the protocols built on it): the interpolating measures xi (any
#: support size: exact interpolation grows it; any dimension: OTDD-augmented rows), distances
_XI = Message(MeasureOf("*", "*"))
FEDWAD_MESSAGES = {
    "fedwad.xi": _XI,
    "fedwad.xi_mu": _XI,
    "fedwad.xi_nu": _XI,
    "fedwad.distance": Message(Num()),
    "fedwad.xi_final": _XI,
}
FEDWAD_KINDS = tuple(FEDWAD_MESSAGES)


@PROTOCOLS.register
class FedWAD(Protocol):
    """FedWAD (Rakotomamonjy et al.): W2 between two clients via server-side interpolating measures."""

    name = "fedwad"
    messages = FEDWAD_MESSAGES
    released = {
        "estimates": Record(wasserstein=Num()),
        "history": Record(estimate=Array(), bound=Array(), support_size=Array(), reported=Array()),
        "outputs": Record(xi_support_size=Num("i"), rounds=Num("i")),
    }
    Config = FedWADConfig
    #: measured: scripts/protocol_tolerances.py (largest error over seeds 0-19, plus margin)
    reference_tolerance = 0.25
    headline_accuracy = ("wasserstein",)
    min_parties = 2  # mu and nu: `clients`, or the first two parties

    def client_releases(
        self, parties: Sequence[str]
    ) -> dict[str, list[tuple[str, int, str]]] | None:
        """What each client sends in a run, known from the config and the scenario's party
        names: per party, (message kind, times sent, 'measure' or 'distance'); a defense
        calibrated for a number of releases checks it at validate. None in accurate mode (it
        may stop early)."""
        cfg = self.config
        names = cfg.clients or list(parties)[:2]
        if cfg.mode == "accurate" or len(names) != 2:
            return None
        K = cfg.iterations
        n_dist = K + 1 if cfg.distances == "every_round" else 1
        return {
            name: [(f"fedwad.xi_{side}", K, "measure"), ("fedwad.distance", n_dist, "distance")]
            for name, side in zip(names, ("mu", "nu"))
        }

    # -- roles
    def _clients(self, parties: Mapping[str, PartyData]) -> tuple[str, str]:
        names = self.config.clients or list(parties)[:2]
        if len(names) != 2 or any(n not in parties for n in names):
            raise DataError(
                f"fedwad needs exactly two client parties; got {names}, parties are {list(parties)}"
            )
        return names[0], names[1]

    def roles(self, parties):
        a, b = self._clients(parties)
        return {a: "client (mu)", b: "client (nu)"}

    def exact_ot_pairs(self, rows):
        """W(mu, nu) between the two clients (the reference); the support terms are counted
        apart, from ``support_size``."""
        names = self.config.clients or list(rows.rows)[:2]
        return [(names[0], names[1])] if len(names) == 2 else None

    def _t(self, rng: np.random.Generator) -> float:
        if self.config.t == "random":
            return float(rng.uniform(*self.config.t_range))
        return float(self.config.t)

    # -- the protocol
    def run(self, parties, bus: Bus, rng) -> ProtocolResult:
        return drive(self.steps(parties, bus, rng), bus)

    def steps(self, parties, bus: Bus, rng) -> Generator[list, list, ProtocolResult]:
        """The protocol as a generator: it yields each batch of independent client calls
        (``bus.local_map`` arguments), is sent their results, and returns the
        :class:`ProtocolResult`. :meth:`run` drives it with :func:`drive`; several runs can be
        driven in lock step with :func:`drive_many` (their client calls batched into one
        ``local_map``), which is how ``fedwad_clustering`` keeps many pairs in flight on an
        engine with remote parties. Messages are sent from inside the generator, so one run's
        messages and results are the same whichever driver runs it."""
        cfg = self.config
        accurate = cfg.mode == "accurate"
        interpolation = "exact" if accurate else cfg.interpolation
        every_round = accurate or cfg.distances == "every_round"
        name_mu, name_nu = self._clients(parties)
        d_mu, d_nu = yield [(name_mu, _dim), (name_nu, _dim)]
        if d_mu != d_nu:
            raise DataError(f"fedwad: dimension mismatch ({d_mu} vs {d_nu})")
        rng_server, rng_mu, rng_nu = rng.spawn(3)
        # a fourth stream, only when asked: the other three (and the paper's run) are unchanged
        rng_ties = rng.spawn(1)[0] if cfg.plan_tie_break else None
        if accurate:  # one atom at the public point z = init_mean
            xi = Measure(np.full((1, d_mu), cfg.init_mean))
        else:
            xi = Measure(
                rng_server.normal(cfg.init_mean, cfg.init_scale, size=(cfg.support_size, d_mu))
            )
        history: dict[str, list[float]] = {"estimate": [], "bound": [], "support_size": []}
        reported: list[float] = []  # W(mu, xi^(k-1)) + W(xi^(k-1), nu), as the server learns it
        rounds = 0
        traced = None  # the trace's last xi, whose distances the next solves give
        for k in range(1, cfg.iterations + 1):
            rounds = k
            # server -> clients: xi^(k-1)
            xi_at_mu = bus.send(SERVER, name_mu, "fedwad.xi", xi, round=k).payload
            xi_at_nu = bus.send(SERVER, name_nu, "fedwad.xi", xi, round=k).payload
            # clients: xi_mu^(k) = Interp(mu, xi^(k-1), t), xi_nu^(k) = Interp(nu, xi^(k-1), t)
            # the two clients' steps are independent (run at once on an engine with remote parties)
            (xi_mu, w_mu_prev), (xi_nu, w_nu_prev) = yield (
                [
                    (name, _client_step, x, self._t(r), interpolation, cfg.prune, _seed(rng_ties))
                    for name, x, r in ((name_mu, xi_at_mu, rng_mu), (name_nu, xi_at_nu, rng_nu))
                ]
            )
            if traced is not None:  # W(mu, xi^(k-1)) + W(xi^(k-1), nu), from these steps
                sides = ((name_mu, xi_at_mu, w_mu_prev), (name_nu, xi_at_nu, w_nu_prev))
                history["estimate"].append((yield from _trace_estimate(traced, sides)))
            got_mu = bus.send(name_mu, SERVER, "fedwad.xi_mu", xi_mu, round=k).payload
            got_nu = bus.send(name_nu, SERVER, "fedwad.xi_nu", xi_nu, round=k).payload
            if every_round:
                r_mu = bus.send(name_mu, SERVER, "fedwad.distance", w_mu_prev, round=k).payload
                r_nu = bus.send(name_nu, SERVER, "fedwad.distance", w_nu_prev, round=k).payload
                reported.append(r_mu + r_nu)
            # server: xi^(k) = Interp(xi_mu, xi_nu, t)
            xi, _, _ = fedwad_round_interp(
                got_mu, got_nu, self._t(rng_server), interpolation, cfg.prune
            )
            if cfg.trace:
                # A^(k) = W(mu,xi_mu) + W(xi_mu,xi) + W(xi,xi_nu) + W(xi_nu,nu): a testbed
                # diagnostic; the client terms are computed at the clients and never sent.
                # The running estimate W(mu,xi) + W(xi,nu) is taken from the clients' next
                # solves against xi (_trace_estimate), not solved twice.
                a_mu, a_nu = yield [(name_mu, _trace_own, xi_mu), (name_nu, _trace_own, xi_nu)]
                history["bound"].append(
                    a_mu + tot.wasserstein(xi_mu, xi) + tot.wasserstein(xi, xi_nu) + a_nu
                )
                traced = xi
            history["support_size"].append(float(xi.n))
            # accurate mode: the server stops once the reported bound has stalled
            if (
                accurate
                and len(reported) >= 3
                and (reported[-2] - reported[-1]) / reported[-1] < cfg.tol
            ):
                break
        # final round: distances to xi^(K)
        K = rounds + 1
        xi_mu_final = bus.send(SERVER, name_mu, "fedwad.xi_final", xi, round=K).payload
        xi_nu_final = bus.send(SERVER, name_nu, "fedwad.xi_final", xi, round=K).payload
        w_mu, w_nu = yield [
            (name_mu, _distance_to, xi_mu_final),
            (name_nu, _distance_to, xi_nu_final),
        ]
        if traced is not None:
            sides = ((name_mu, xi_mu_final, w_mu), (name_nu, xi_nu_final, w_nu))
            history["estimate"].append((yield from _trace_estimate(traced, sides)))
        d_mu = bus.send(name_mu, SERVER, "fedwad.distance", w_mu, round=K).payload
        d_nu = bus.send(name_nu, SERVER, "fedwad.distance", w_nu, round=K).payload
        final = float(d_mu + d_nu)
        # every reported sum is an upper bound of W (triangle inequality); the paper outputs the
        # last one, the accurate mode the smallest
        estimate = min([final, *reported]) if accurate else final
        if reported:
            history["reported"] = reported
        if not cfg.trace:
            history.pop("bound")
            history.pop("estimate")
        deviations = [
            "final cost keeps xi's weights (public code drops them)",
            "barycentric map diag(1/a)·P·Y (public code: n·P·Y)",
            "ot.emd with numItermax>=1e6, non-optimal plans are errors",
        ]
        if accurate:
            deviations.append(
                "accurate mode (not in the paper): one-atom xi^(0), exact interpolation, distances every round, "
                "adaptive stop; round-1 messages are the clients' data up to a public homothety"
            )
        return ProtocolResult(
            estimates={"wasserstein": estimate},
            history=history,
            outputs={"xi_support_size": xi.n, "rounds": rounds},
            mode=f"{cfg.mode}/{interpolation}",
            deviations=tuple(deviations),
        )

    def reference_key(self) -> str:
        return f"clients={self.config.clients}"  # the exact W depends on nothing else

    @classmethod
    def barycentric_push_check(cls, params, push_max: float, sizes) -> dict:
        """Whether the clients' messages are barycentric pushes with private share <= push_max.

        Used by ``gaussian_measure_noise`` to state whether its sensitivity bound applies: a
        client's ``Interp(own, xi, t)`` keeps xi's atoms and weights (public to the server) when
        S < n, and each atom is ``(1 - t) * (barycentric image of own data) + t * xi_j``, so the
        private share is ``1 - t``."""
        # the run's config (built once), or params (a test's, a plugin's own call)
        cfg = params if isinstance(params, cls.Config) else cls.Config(**params)
        t_min = cfg.t_range[0] if cfg.t == "random" else float(cfg.t)
        names = cfg.clients or list(sizes)[:2]
        problems = []
        if cfg.interpolation != "barycentric" or cfg.mode == "accurate":
            problems.append("exact interpolation: atom count and weights depend on the data")
        small = [p for p in names if sizes.get(p, 0) <= cfg.support_size]
        if small:
            problems.append(f"S={cfg.support_size} >= rows of {small}: support on the data side")
        if 1.0 - t_min > push_max + 1e-12:
            problems.append(f"private share 1 - t = {1.0 - t_min:g} exceeds push_max={push_max:g}")
        detail = "; ".join(problems) or f"barycentric, S={cfg.support_size}, share <= {1 - t_min:g}"
        return {"holds": not problems, "detail": detail}

    def reference(self, parties) -> dict[str, float]:
        a, b = self._clients(parties)
        return {"wasserstein": tot.wasserstein(Measure(parties[a].X), Measure(parties[b].X))}
