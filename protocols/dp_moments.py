"""Private dataset distance from noisy first and second moments (our design, not a paper's).

Aimed at the private-and-accurate corner of the frontier. The DP baselines release one noisy
vector *per row* — in effect local differential privacy, whose noise does not shrink with the
number of rows. This protocol releases only aggregates, whose sensitivity falls as :math:`1/n`:
each client clips its rows to norm :math:`C` and sends, once, through the Gaussian mechanism,

.. math:: \\hat m = \\tfrac1n \\sum_i \\bar x_i + Z_1, \\qquad
          \\hat S = \\tfrac1n \\sum_i \\bar x_i \\bar x_i^\\top + C\\,Z_2

(``covariance: full``: the upper triangle of :math:`S`, mirrored; ``diagonal``: its diagonal).
The server forms :math:`\\hat\\Sigma = \\hat S - \\hat m \\hat m^\\top` (eigenvalues clipped at 0:
post-processing) and returns the Bures–Wasserstein distance between
:math:`\\mathcal N(\\hat m_\\mu, \\hat\\Sigma_\\mu)` and :math:`\\mathcal N(\\hat m_\\nu, \\hat\\Sigma_\\nu)`
(closed form, :func:`bures_w2`).

Sensitivity. Replacing one row changes :math:`m` by at most :math:`2C/n` and
:math:`S` by :math:`\\|\\bar x\\bar x^\\top - \\bar x'\\bar x'^\\top\\|_F/n \\le 2C^2/n` (Frobenius;
the upper triangle or the diagonal is no larger). Releasing :math:`(m, S/C)` as one vector, the L2
sensitivity is :math:`\\Delta = 2\\sqrt2\\,C/n`, and noise :math:`\\mathcal N(0, (z\\Delta)^2)` on every
entry is one Gaussian-mechanism event per client in the ledger (opacus RDP). :math:`n` is public
(as every party's size is in the testbed).

What it estimates, and its bias: the Gaussian (Gelbrich) bound
:math:`W_2(\\mathcal N(m_\\mu,\\Sigma_\\mu), \\mathcal N(m_\\nu,\\Sigma_\\nu)) \\le W_2(\\mu,\\nu)`, equal
for Gaussian data. Accuracy is measured against the exact :math:`W_2` (the task), and the
noise-free Gaussian value of the clipped rows is in the reference (``gaussian_bound``) so the two error sources can be told apart.
What it leaks: the released moments themselves (a distributional leak bounded by the DP claim);
``attacks/moments_sampling.py`` samples from the released Gaussian, the best a reconstruction can do
from two moments.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from protocols._base import ProtocolResult
from protocols.dp_baselines import (
    DP_RELEASED,
    DPClientsBase,
    clip_rows,
    pairwise_estimates,
    two_or_more_parties,
)
from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.errors import DataError
from testbed.exchange.bus import SERVER, Bus
from testbed.exchange.ledger import GaussianNoiseChoice, MechanismEvent
from testbed.exchange.schema import Array, Message, Record
from testbed.measure import Measure
from testbed.registry import PROTOCOLS

__all__ = ["DPGaussianMoments", "DPGaussianMomentsConfig", "bures_w2", "moments_from_release"]


class DPGaussianMomentsConfig(GaussianNoiseChoice):
    clients: list[str] | None = Field(
        None, description="parties whose distances are computed (default: all, at least 2)"
    )
    clip_norm: float = Field(
        1.0, gt=0, description="C: every row is clipped to this L2 norm before the moments"
    )
    covariance: Literal["full", "diagonal"] = Field(
        "full", description="release the full second-moment matrix or its diagonal"
    )

    @field_validator("clients")
    @classmethod
    def _clients(cls, v, info: ValidationInfo):
        return two_or_more_parties(v, info)


def _release(party: PartyData, C: float, sigma: float, diagonal: bool, seed: int) -> dict:
    """At the client: noisy mean and (scaled) second moments, once."""
    X = clip_rows(party.X, C)
    n, d = X.shape
    g = np.random.default_rng(seed)
    m = X.mean(axis=0) + g.normal(0.0, sigma, size=d)
    if diagonal:
        s = (X**2).mean(axis=0) + C * g.normal(0.0, sigma, size=d)
        return {"mean": m, "second": s}
    S = X.T @ X / n
    iu = np.triu_indices(d)
    up = S[iu] + C * g.normal(0.0, sigma, size=iu[0].size)
    return {"mean": m, "second": up}


def moments_from_release(p: dict, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Post-processing of a release: ``(mean, covariance)`` with eigenvalues clipped at 0."""
    m = np.asarray(p["mean"], dtype=np.float64)
    s = np.asarray(p["second"], dtype=np.float64)
    if s.size == d:
        S = np.diag(s)
    else:
        S = np.zeros((d, d))
        S[np.triu_indices(d)] = s
        S = S + S.T - np.diag(np.diag(S))
    cov = S - np.outer(m, m)
    w, V = np.linalg.eigh((cov + cov.T) / 2)
    return m, (V * np.maximum(w, 0.0)) @ V.T


def _psd_sqrt(S: np.ndarray) -> np.ndarray:
    w, V = np.linalg.eigh((S + S.T) / 2)
    return (V * np.sqrt(np.maximum(w, 0.0))) @ V.T


def bures_w2(m1, S1, m2, S2) -> float:
    r""":math:`W_2` between Gaussians, :math:`\|m_1-m_2\|^2 + \mathrm{tr}\,S_1 + \mathrm{tr}\,S_2
    - 2\,\mathrm{tr}(S_1^{1/2} S_2 S_1^{1/2})^{1/2}`, with symmetric eigen-square-roots so that
    singular covariances (constant features, e.g. blank digit pixels) stay finite; equal to
    POT's ``bures_wasserstein_distance`` where that is finite (tested)."""
    r = _psd_sqrt(S1)
    cross = np.trace(_psd_sqrt(r @ S2 @ r))
    sq = float(
        np.sum((np.asarray(m1) - np.asarray(m2)) ** 2) + np.trace(S1) + np.trace(S2) - 2 * cross
    )
    return float(np.sqrt(max(sq, 0.0)))


def _size_dim(party: PartyData) -> tuple[int, int]:
    return party.n, int(party.X.shape[1])


def _clipped_moments(X: np.ndarray, C: float) -> tuple[np.ndarray, np.ndarray]:
    Xc = clip_rows(X, C)
    return Xc.mean(axis=0), np.atleast_2d(np.cov(Xc, rowvar=False, bias=True))


@PROTOCOLS.register
class DPGaussianMoments(DPClientsBase):
    """Bures-Wasserstein distance between clients' DP noisy means and covariances (our design)."""

    name = "dp_gaussian_moments"
    messages = {
        "dp_gaussian_moments.moments": Message(
            Record(mean=Array("f", ("d",)), second=Array("f", ("*",)))
        )
    }
    released = DP_RELEASED
    Config = DPGaussianMomentsConfig
    #: measured: scripts/protocol_tolerances.py (largest error over seeds 0-19, plus margin)
    reference_tolerance = 0.15
    client_role = "client (releases noisy moments)"

    def run(self, parties, bus: Bus, rng) -> ProtocolResult:
        cfg = self.config
        names = self._clients(parties)
        sd = dict(zip(names, bus.local_map([(n, _size_dim) for n in names])))
        dims = {n: v[1] for n, v in sd.items()}
        if len(set(dims.values())) != 1:
            raise DataError(f"{self.name}: dimension mismatch {dims}")
        d = next(iter(dims.values()))
        z = self.multiplier()
        seeds = rng.integers(0, 2**31 - 1, size=len(names))
        calls, sigmas = [], {}
        for n, s in zip(names, seeds):
            delta = 2.0 * np.sqrt(2.0) * cfg.clip_norm / sd[n][0]
            sigmas[n] = (z * delta, delta)
            calls.append(
                (n, _release, cfg.clip_norm, z * delta, cfg.covariance == "diagonal", int(s))
            )
        got = {}
        for n, rel in zip(names, bus.local_map(calls)):
            sigma, delta = sigmas[n]
            if bus.ledger is not None:
                bus.ledger.record(
                    MechanismEvent(
                        party=n,
                        mechanism="gaussian",
                        noise_multiplier=z,
                        sensitivity=float(delta),
                        sigma=float(sigma),
                        note=f"{self.name}.moments: (mean, S/C), 2*sqrt(2)*C/n",
                    )
                )
            p = bus.send(n, SERVER, f"{self.name}.moments", rel, round=1).payload
            got[n] = moments_from_release(p, d)
        estimates = pairwise_estimates(
            "wasserstein", [got[n] for n in names], lambda a, b: bures_w2(*a, *b)
        )
        return ProtocolResult(
            estimates=estimates,
            outputs={"clients": names, "noise_multiplier": z, "covariance": cfg.covariance},
            mode=f"{cfg.covariance}/z={z:.4g}",
            deviations=(
                "our design (not a paper's): Gaussian (Gelbrich) bound of W2 from DP moments",
            ),
        )

    def reference(self, parties) -> dict[str, Any]:
        names = self._clients(parties)
        out = pairwise_estimates(
            "wasserstein", [Measure(parties[n].X) for n in names], tot.wasserstein
        )
        # the noise-free Gaussian bound on the clipped rows: separates approximation from noise
        mom = [_clipped_moments(parties[n].X, self.config.clip_norm) for n in names]
        out["gaussian_bound"] = bures_w2(*mom[0], *mom[1])
        return out
