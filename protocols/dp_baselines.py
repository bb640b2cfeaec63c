"""Formally private baselines: the Gaussian mechanism on random projections of each party's rows.

Two published designs the TriangleWad paper (§2.3) names as the differentially private way to
compare datasets, implemented on the testbed's bus so they sit on the same leakage/accuracy axes
as the federated protocols:

``dp_sliced_wasserstein`` — Rakotomamonjy & Ralaivola, *Differentially Private Sliced Wasserstein
Distance*, ICML 2021 [1]. The server draws :math:`k` directions :math:`\\theta_l` uniformly on the
sphere :math:`\\mathbb S^{d-1}` and announces their seed; every party releases once
:math:`Y = \\bar X U + Z`, :math:`U = [\\theta_1 \\dots \\theta_k] \\in \\mathbb R^{d\\times k}`,
:math:`Z_{il} \\sim \\mathcal N(0, \\sigma^2)`; the server computes, for every pair,

.. math:: \\widehat{SW}_2(\\mu,\\nu) = \\Big(\\frac1k \\sum_{l} W_2^2(Y^\\mu_{\\cdot l}, Y^\\nu_{\\cdot l})\\Big)^{1/2}

with POT's 1-D solver (``ot.wasserstein_1d``). This is the paper's *smoothed* sliced distance:
each 1-D marginal is convolved with :math:`\\mathcal N(0,\\sigma^2)`; [1] shows it is itself a
distance. It is compared with the central SW of the raw rows (``ot.sliced_wasserstein_distance``,
``reference_projections`` directions, fixed seed 0).

``dp_jl_ot`` — Lê Tien, Habrard & Sebban, *Differentially Private Optimal Transport: Application to
Domain Adaptation*, IJCAI 2019 [2]. A Johnson–Lindenstrauss matrix
:math:`M \\in \\mathbb R^{d\\times k}`, :math:`M_{ij} \\sim \\mathcal N(0, 1/k)` (seed announced by the
server), and every party releases :math:`Y = \\bar X M + Z` once. The server solves exact OT
(``ot.emd2``) between the released rows. Since :math:`\\mathbb E\\|(x-y)M\\|^2 = \\|x-y\\|^2` and
the noise adds :math:`k(\\sigma_\\mu^2+\\sigma_\\nu^2)` to every expected squared cost (a constant,
so the plan is unchanged), the read-out is
:math:`\\hat W = \\sqrt{\\max(0, W_2^2(Y^\\mu, Y^\\nu) - k(\\sigma_\\mu^2+\\sigma_\\nu^2))}` with
``debias: true`` ([2] debiases the cost the same way for its one noisy side; here both sides are
noisy). The central reference is the exact :math:`W_2` of the raw rows.

Sensitivity and the privacy claim (both protocols)
--------------------------------------------------
Neighbouring datasets differ by *replacing one row*. Each party first clips its rows to L2 norm
:math:`C` (``clip_norm``, :math:`\\bar X`; part of the mechanism, so the bound needs no
assumption about the data). Replacing row :math:`i` changes only row :math:`i` of
:math:`\\bar X U`, by :math:`(\\bar x_i - \\bar x'_i) U`, so the L2 (Frobenius) sensitivity of the
release is

.. math:: \\Delta = \\sup \\|(\\bar x - \\bar x')U\\|_2 \\le 2C\\,\\|U\\|_{op}.

[1] (Theorem on the sensitivity of the random-direction projection) bounds
:math:`\\|(x-x')U\\|` *with high probability over the directions* by a chi-square tail bound,
which adds a failure probability to :math:`\\delta`; [2] bounds the JL release the same way through
the JL lemma. The directions here are public and drawn before the data are touched, so we use the
exact operator norm :math:`\\|U\\|_{op}` of the matrix actually drawn: a deterministic bound with
no failure probability (a deviation from both papers, never looser than theirs). Noise
:math:`\\sigma = z\\Delta` gives one Gaussian-mechanism event per party in the privacy ledger;
opacus's RDP accountant turns it into :math:`(\\varepsilon, \\delta)`. With ``target_epsilon`` the
multiplier :math:`z` is calibrated by opacus for one release. The server's computation is
post-processing. ``noise_multiplier: 0`` is the non-private limit (:math:`\\varepsilon = \\infty`).

Leak of the non-private limit: with :math:`k \\ge d` directions and no noise the server inverts the
projection (:math:`\\hat X = Y U^+`); ``attacks/projection_inversion.py`` does exactly that, and
with noise it is the best linear (ridge) reconstruction.

References
----------
.. [1] A. Rakotomamonjy, L. Ralaivola. Differentially Private Sliced Wasserstein Distance. ICML 2021.
.. [2] N. Lê Tien, A. Habrard, M. Sebban. Differentially Private Optimal Transport: Application to
   Domain Adaptation. IJCAI 2019.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from protocols._base import Protocol, ProtocolResult
from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.errors import DataError
from testbed.exchange.bus import SERVER, Bus
from testbed.exchange.ledger import GaussianNoiseChoice, MechanismEvent, calibrated_multiplier
from testbed.exchange.schema import Array, Choice, Message, Num, Parties, Record
from testbed.measure import Measure
from testbed.registry import PROTOCOLS, check_parties

__all__ = [
    "DPClientsBase",
    "DPJLOT",
    "DPJLOTConfig",
    "DPSlicedWasserstein",
    "DPSlicedWassersteinConfig",
    "clip_rows",
    "pairwise_estimates",
    "projection_matrix",
    "projection_sensitivity",
    "smoothed_sliced_wasserstein",
    "two_or_more_parties",
]


# ----------------------------------------------------------------------------- pure functions
def projection_matrix(kind: Literal["sphere", "jl"], d: int, k: int, seed: int) -> np.ndarray:
    """The public d x k projection: ``sphere`` = k directions uniform on S^{d-1} (columns of unit
    norm, [1]); ``jl`` = i.i.d. N(0, 1/k) entries ([2]). Regenerated by anyone from the seed."""
    g = np.random.default_rng(int(seed))
    if kind == "sphere":
        U = g.normal(size=(d, k))
        return U / np.linalg.norm(U, axis=0, keepdims=True)
    return g.normal(0.0, 1.0 / math.sqrt(k), size=(d, k))


def clip_rows(X: np.ndarray, C: float) -> np.ndarray:
    """Rows scaled to L2 norm at most ``C`` (rows already inside the ball are unchanged)."""
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X * np.minimum(1.0, C / np.maximum(norms, 1e-300))


def projection_sensitivity(U: np.ndarray, C: float) -> float:
    """L2 sensitivity of ``clip(X) @ U`` under replacement of one row: ``2 C ||U||_op``."""
    return 2.0 * float(C) * float(np.linalg.norm(U, 2))


def smoothed_sliced_wasserstein(Ya: np.ndarray, Yb: np.ndarray) -> float:
    """:math:`(\\frac1k\\sum_l W_2^2)^{1/2}` over the columns of two projected samples (uniform
    weights), each 1-D distance with ``ot.wasserstein_1d``."""
    import ot  # ot: validate imports this module

    per = ot.wasserstein_1d(np.asarray(Ya), np.asarray(Yb), p=2)
    return float(np.sqrt(max(float(np.mean(per)), 0.0)))


def pairwise_estimates(key: str, items: Sequence[Any], distance) -> dict[str, Any]:
    """``{key: distance(items[0], items[1])}``, plus the N x N ``distance_matrix`` when there are
    more than two parties (the dataset-distance task)."""
    D = np.zeros((len(items), len(items)))
    for i, j in combinations(range(len(items)), 2):
        D[i, j] = D[j, i] = distance(items[i], items[j])
    out: dict[str, Any] = {key: float(D[0, 1])}
    if len(items) > 2:
        out["distance_matrix"] = D
    return out


# ----------------------------------------------------------------------------- config
class _DPConfig(GaussianNoiseChoice):
    """``noise_multiplier: 0`` is the non-private limit; ``target_epsilon`` covers one release."""

    clients: list[str] | None = Field(
        None, description="parties whose distances are computed (default: all, at least 2)"
    )
    projections: int = Field(50, gt=0, description="k: number of random directions / JL dimension")
    clip_norm: float = Field(
        1.0, gt=0, description="C: every row is clipped to this L2 norm before projection"
    )
    directions_seed: int | None = Field(
        None, ge=0, description="seed of the projection; null = drawn by the server, announced"
    )

    @field_validator("clients")
    @classmethod
    def _clients(cls, v, info: ValidationInfo):
        return two_or_more_parties(v, info)


def two_or_more_parties(v: list[str] | None, info: ValidationInfo) -> list[str] | None:
    """A ``clients`` list of the DP protocols: at least two of the scenario's parties ([] is the
    default, as null)."""
    if v:
        if len(v) < 2:
            raise ValueError(f"names at least two parties, got {len(v)}")
        check_parties(v, info)
    return v


class DPSlicedWassersteinConfig(_DPConfig):
    reference_projections: int = Field(
        1000, gt=0, description="directions of the central SW reference (seed 0)"
    )


class DPJLOTConfig(_DPConfig):
    projections: int = Field(20, gt=0, description="k: JL target dimension")
    debias: bool = Field(True, description="subtract the noise's expected cost k(s_a^2 + s_b^2)")


# ----------------------------------------------------------------------------- party side
def _dim(party: PartyData) -> int:
    return int(party.X.shape[1])


def _release(party: PartyData, U: np.ndarray, C: float, sigma: float, seed: int) -> np.ndarray:
    """At the party: clip, project, add N(0, sigma^2) to every entry."""
    Y = clip_rows(party.X, C) @ U
    if sigma > 0:
        Y = Y + np.random.default_rng(seed).normal(0.0, sigma, size=Y.shape)
    return Y


# ----------------------------------------------------------------------------- shared logic
class DPClientsBase(Protocol):
    """Shared by the one-release DP protocols: the client list and the noise multiplier."""

    client_role: str = "client (releases noisy projections)"
    min_parties = 2  # the distance between two releases, at least
    #: the N x N distances when more than two clients release (the dataset-distance task)
    headline_accuracy = ("distance_matrix", "wasserstein")

    def multiplier(self) -> float:
        c = self.config
        if c.noise_multiplier is not None:
            return float(c.noise_multiplier)
        return calibrated_multiplier(
            float(c.target_epsilon), float(c.target_delta), 1, c.accountant
        )

    def _clients(self, parties: Mapping[str, Any]) -> list[str]:
        names = list(self.config.clients or parties)
        if len(names) < 2 or any(n not in parties for n in names):
            raise DataError(
                f"{self.name} needs at least two client parties; got {names}, "
                f"parties are {list(parties)}"
            )
        return names

    def roles(self, parties):
        return {p: self.client_role for p in self._clients(parties)}


class _DPProjectionBase(DPClientsBase):
    kind: str = "sphere"
    estimate_key: str = ""

    def _pair_distance(self, Ya: np.ndarray, Yb: np.ndarray, sa: float, sb: float) -> float:
        raise NotImplementedError

    def _central(self, Xa: np.ndarray, Xb: np.ndarray) -> float:
        raise NotImplementedError

    def run(self, parties, bus: Bus, rng) -> ProtocolResult:
        cfg = self.config
        names = self._clients(parties)
        dims = {n: bus.local(n, _dim) for n in names}
        if len(set(dims.values())) != 1:
            raise DataError(f"{self.name}: dimension mismatch {dims}")
        d = next(iter(dims.values()))
        seed = cfg.directions_seed
        if seed is None:
            seed = int(rng.integers(0, 2**31 - 1))
            params = {"seed": seed, "kind": self.kind, "dim": d, "projections": cfg.projections}
            for n in names:
                got = bus.send(SERVER, n, f"{self.name}.directions", params, round=0).payload
                seed = int(got["seed"])
        U = projection_matrix(self.kind, d, cfg.projections, seed)
        z = self.multiplier()
        delta = projection_sensitivity(U, cfg.clip_norm)
        sigma = z * delta
        noise_seeds = rng.integers(0, 2**31 - 1, size=len(names))
        released = bus.local_map(
            [(n, _release, U, cfg.clip_norm, sigma, int(s)) for n, s in zip(names, noise_seeds)]
        )
        got: dict[str, np.ndarray] = {}
        for n, Y in zip(names, released):
            if bus.ledger is not None:
                bus.ledger.record(
                    MechanismEvent(
                        party=n,
                        mechanism="gaussian",
                        noise_multiplier=z,
                        sensitivity=delta,
                        sigma=sigma,
                        note=f"{self.name}.projections: Gaussian mechanism, 2C||U||_op",
                    )
                )
            got[n] = np.asarray(bus.send(n, SERVER, f"{self.name}.projections", Y, round=1).payload)
        estimates = pairwise_estimates(
            self.estimate_key,
            [got[n] for n in names],
            lambda a, b: self._pair_distance(a, b, sigma, sigma),
        )
        return ProtocolResult(
            estimates=estimates,
            outputs={
                "clients": names,
                "noise_multiplier": z,
                "sigma": sigma,
                "sensitivity": delta,
                "projections": cfg.projections,
            },
            mode=f"{self.kind}/z={z:.4g}",
            deviations=self._deviations(),
        )

    def _deviations(self) -> tuple[str, ...]:
        return (
            "sensitivity from the exact operator norm of the drawn public projection "
            "(2C||U||_op, deterministic) instead of the paper's high-probability bound",
            "rows clipped to clip_norm at each party before projection (part of the mechanism)",
        )

    def reference(self, parties) -> dict:
        names = self._clients(parties)
        return pairwise_estimates(self.estimate_key, [parties[n].X for n in names], self._central)


#: the projection protocols' messages: the server announces the public directions, each client
#: sends its clipped rows' noisy projections
_DIRECTIONS = Message(
    Record(seed=Num("i"), kind=Choice("sphere", "jl"), dim=Num("i"), projections=Num("i"))
)
_PROJECTIONS = Message(Array("f", ("n_sender", "projections")))
#: what the DP baselines release (the moments protocol adds ``covariance``)
DP_RELEASED = {
    "estimates": Record(
        wasserstein=Num(), sliced_wasserstein=Num(), distance_matrix=Array("f", ("*", "*"))
    ),
    "outputs": Record(
        clients=Parties(),
        noise_multiplier=Num(),
        sigma=Num(),
        sensitivity=Num(),
        projections=Num("i"),
        covariance=Choice("full", "diagonal"),
    ),
}


@PROTOCOLS.register
class DPSlicedWasserstein(_DPProjectionBase):
    """DP sliced Wasserstein (Rakotomamonjy & Ralaivola 2021): Gaussian noise on random projections."""

    name = "dp_sliced_wasserstein"
    messages = {
        "dp_sliced_wasserstein.directions": _DIRECTIONS,
        "dp_sliced_wasserstein.projections": _PROJECTIONS,
    }
    released = DP_RELEASED
    Config = DPSlicedWassersteinConfig
    #: measured: scripts/protocol_tolerances.py (largest error over seeds 0-19, plus margin)
    reference_tolerance = 0.6
    kind = "sphere"
    estimate_key = "sliced_wasserstein"

    def _pair_distance(self, Ya, Yb, sa, sb) -> float:
        return smoothed_sliced_wasserstein(Ya, Yb)

    def _central(self, Xa, Xb) -> float:
        d = Xa.shape[1]
        U = projection_matrix("sphere", d, self.config.reference_projections, 0)
        import ot  # ot: validate imports this module

        return float(ot.sliced_wasserstein_distance(Xa, Xb, projections=U, p=2))


@PROTOCOLS.register
class DPJLOT(_DPProjectionBase):
    """DP optimal transport through a noisy JL projection (Lê Tien et al. 2019); exact OT after."""

    name = "dp_jl_ot"
    messages = {"dp_jl_ot.directions": _DIRECTIONS, "dp_jl_ot.projections": _PROJECTIONS}
    released = DP_RELEASED
    Config = DPJLOTConfig
    #: measured: scripts/protocol_tolerances.py (largest error over seeds 0-19, plus margin)
    reference_tolerance = 1.0
    kind = "jl"
    estimate_key = "wasserstein"

    def _pair_distance(self, Ya, Yb, sa, sb) -> float:
        sq = tot.sq_wasserstein(Measure(Ya), Measure(Yb))
        if self.config.debias:
            sq -= self.config.projections * (sa**2 + sb**2)
        return float(np.sqrt(max(sq, 0.0)))

    def _central(self, Xa, Xb) -> float:
        return tot.wasserstein(Measure(Xa), Measure(Xb))

    def _deviations(self) -> tuple[str, ...]:
        extra = ("cost debiased by k(s_a^2 + s_b^2) (both sides noisy; [2] noises one side)",)
        return super()._deviations() + (extra if self.config.debias else ())
