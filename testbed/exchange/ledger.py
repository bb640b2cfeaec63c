r"""Privacy ledger: defenses record mechanism events; an accountant turns them into a claimed
(epsilon, delta) per party.

An event is a Gaussian mechanism invocation ``(noise_multiplier, sample_rate, count)`` where
``noise_multiplier = sigma / sensitivity`` (the L2 sensitivity stated by the defense). Events are
grouped by the party whose data they protect and composed over every release and round by the
ledger's accountant, named by ``accountant``:

- ``"pld"`` (the default): privacy-loss distributions, with Google's ``dp-accounting``. Full-batch
  Gaussian releases (``sample_rate`` 1) compose *exactly* into one Gaussian mechanism of noise
  multiplier :math:`z_\text{eff} = (\sum_i \text{count}_i / z_i^2)^{-1/2}` (the privacy loss of a
  Gaussian mechanism is Gaussian, and Gaussians compose by adding their means and variances; the
  μ-GDP of Dong, Roth and Su 2022), whose exact hockey-stick curve
  ``GaussianPrivacyLoss.get_delta_for_epsilon`` gives; epsilon is its inverse at ``delta``
  (bisection to 1e-9 relative). Poisson-subsampled events (``sample_rate`` < 1) are composed by
  dp-accounting's ``PLDAccountant`` (add/remove adjacency, as opacus's).
- ``"rdp"``: opacus's ``RDPAccountant`` over :data:`RDP_ORDERS` (an upper bound: looser than PLD
  at equal noise; 21 releases at z = 1, δ = 1e-5: ε = 30.9 against PLD's 29.3);
- ``"prv"``: opacus's PRV accountant.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from testbed.errors import TestbedError
from testbed.registry import PluginConfig

__all__ = [
    "ACCOUNTANTS",
    "RDP_ORDERS",
    "GaussianNoiseChoice",
    "MechanismEvent",
    "PrivacyLedger",
    "calibrate_noise_multiplier",
    "calibrated_multiplier",
    "surely_calibratable",
]

#: RDP orders: opacus's defaults extended to larger orders, so that few heavily-noised releases
#: and many lightly-noised ones both find their optimum inside the grid (a tighter valid bound).
RDP_ORDERS: list[float] = (
    [1 + x / 100.0 for x in range(1, 10)]
    + [1 + x / 10.0 for x in range(1, 100)]
    + list(range(12, 64))
    + [80, 100, 128, 160, 200, 256, 384, 512, 768, 1024]
)


#: the accountants a ledger can be given by name (the first is the default)
ACCOUNTANTS = ("pld", "rdp", "prv")


def gaussian_delta(z: float, epsilon: float) -> float:
    """δ(ε) of one full-batch Gaussian mechanism with noise multiplier ``z`` (noise std /
    L2 sensitivity): dp-accounting's exact hockey-stick divergence of N(1, z²) from N(0, z²)."""
    from dp_accounting.pld.privacy_loss_mechanism import (
        GaussianPrivacyLoss,  # dp_accounting: DP accounting only
    )

    return float(
        GaussianPrivacyLoss(standard_deviation=z, sensitivity=1.0).get_delta_for_epsilon(epsilon)
    )


def _pld_full_batch_epsilon(z_eff: float, delta: float) -> float:
    """The smallest ε with :func:`gaussian_delta` (z_eff, ε) <= ``delta`` (bisection, 1e-9
    relative; 0 when ε = 0 already meets it)."""
    if gaussian_delta(z_eff, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_delta(z_eff, hi) > delta:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-9 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if gaussian_delta(z_eff, mid) <= delta else (mid, hi)
    return hi


def _pld_epsilon(history: list[tuple[float, float, int]], delta: float) -> float:
    """PLD epsilon of Gaussian events ``(z, sample_rate, count)`` composed (module docstring)."""
    full = [(z, c) for z, q, c in history if q >= 1.0]
    sampled = [(z, q, c) for z, q, c in history if q < 1.0]
    if not sampled:
        return _pld_full_batch_epsilon(1.0 / math.sqrt(sum(c / z**2 for z, c in full)), delta)
    from dp_accounting import dp_event  # dp_accounting: DP accounting only
    from dp_accounting.pld.pld_privacy_accountant import (
        PLDAccountant,  # dp_accounting: DP accounting only
    )

    acc = PLDAccountant(value_discretization_interval=1e-3)
    if full:  # the full-batch part, exactly, as one Gaussian event
        acc.compose(dp_event.GaussianDpEvent(1.0 / math.sqrt(sum(c / z**2 for z, c in full))))
    for z, q, c in sampled:
        acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), int(c))
    return float(acc.get_epsilon(delta))


def _prv_quiet():
    """``np.errstate`` for opacus's PRV accountant: for a full-batch release (sample rate q = 1)
    it takes ``log(1 - q)`` = -inf on purpose, and its ``np.where`` then takes the other branch;
    numpy would print "divide by zero encountered in log" each time (``np.errstate`` holds per
    thread, unlike a warnings filter)."""
    return np.errstate(divide="ignore")


def _rdp_epsilon(acc, delta: float) -> float:
    with warnings.catch_warnings():
        # opacus warns when the optimum is an extreme order; the epsilon is still a valid bound
        warnings.filterwarnings("ignore", message="Optimal order is the")
        return float(acc.get_epsilon(delta=delta, alphas=RDP_ORDERS))


def calibrate_noise_multiplier(
    target_epsilon: float, delta: float, releases: int, accountant: str = "pld"
) -> float:
    """Smallest noise multiplier whose ``releases``-fold composition of the Gaussian mechanism
    (no subsampling) costs at most ``target_epsilon`` at ``delta`` under ``accountant`` (the
    ledger's, so that a calibrated defense's claim is its target). PLD: exact, z = z_eff·√releases
    with z_eff the Gaussian mechanism of ε = target at δ (bisection to 1e-9 relative, rounded up);
    RDP and PRV: opacus's ``get_noise_multiplier`` (to 0.005 in epsilon; RDP with the ledger's
    orders)."""
    if accountant == "pld":
        return _pld_calibrate(float(target_epsilon), float(delta)) * math.sqrt(int(releases))
    from opacus.accountants.utils import get_noise_multiplier  # opacus: DP-SGD only

    with warnings.catch_warnings(), _prv_quiet():
        warnings.filterwarnings("ignore", message="Optimal order is the")
        kw = {"alphas": RDP_ORDERS} if accountant == "rdp" else {}
        try:
            z = get_noise_multiplier(
                target_epsilon=target_epsilon,
                target_delta=delta,
                sample_rate=1.0,
                steps=int(releases),
                accountant=accountant,
                epsilon_tolerance=0.005,
                **kw,
            )
        except ValueError as exc:  # opacus: "The privacy budget is too low."
            raise TestbedError(
                f"target_epsilon {target_epsilon:g} at delta {delta:g} over {int(releases)} "
                f"release(s) is below what opacus can calibrate ({exc}); raise target_epsilon "
                "or give noise_multiplier"
            ) from None
        return float(z)


def _pld_calibrate(target: float, delta: float) -> float:
    """The smallest z whose one full-batch Gaussian release has δ(target) <= ``delta``
    (δ(ε) falls as z grows; bisection on log z, returned from the safe side)."""
    lo, hi = 1e-3, 1.0
    while gaussian_delta(hi, target) > delta:
        lo, hi = hi, 2.0 * hi
    while gaussian_delta(lo, target) <= delta:
        lo, hi = lo / 2.0, lo
    while hi - lo > 1e-10 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if gaussian_delta(mid, target) <= delta else (mid, hi)
    return hi


#: the largest noise multiplier opacus's ``get_noise_multiplier`` tries (it doubles from 10 and
#: gives up past its ``MAX_SIGMA`` = 1e6)
_LARGEST_TRIED = 10.0 * 2**16


def surely_calibratable(target_epsilon: float, delta: float, releases: int) -> bool:
    """A sufficient condition, in arithmetic only (no opacus, hence no torch import), that
    :func:`calibrate_noise_multiplier` finds a multiplier: at the largest one opacus tries, the
    ``releases``-fold Gaussian mechanism's RDP at the ledger's largest order :math:`\\alpha` is
    :math:`R\\alpha / (2\\sigma^2)`, and the RDP-to-DP conversion opacus uses
    (``get_privacy_spent``: Balle et al. 2020) is at most that plus
    :math:`\\log(1/\\delta) / (\\alpha - 1)`. A target above it is reached (1 % margin for
    opacus's tolerance). False means only "ask opacus" (``testbed validate`` then does)."""
    a = float(max(RDP_ORDERS))
    bound = releases * a / (2.0 * _LARGEST_TRIED**2) + math.log(1.0 / delta) / (a - 1.0)
    return target_epsilon >= 1.01 * bound


@functools.lru_cache(maxsize=256)
def calibrated_multiplier(
    target_epsilon: float, delta: float, releases: int, accountant: str = "pld"
) -> float:
    """:func:`calibrate_noise_multiplier`, memoised (sweep cells share their targets)."""
    return calibrate_noise_multiplier(target_epsilon, delta, releases, accountant)


class GaussianNoiseChoice(PluginConfig):
    """Parameters of a Gaussian mechanism: a noise multiplier, or a target epsilon that opacus
    calibrates it from (exactly one; default ``noise_multiplier: 1``)."""

    # noise a million times the sensitivity leaves nothing of the signal; far beyond that the
    # noise overflows in the mechanisms' products (1e300: inf in a cost matrix, then POT fails)
    noise_multiplier: float | None = Field(
        None,
        ge=0,
        le=1e6,
        description="z = noise std / sensitivity (or target_epsilon; default z = 1)",
    )
    # opacus's search never ends for a target its smallest noise cannot reach (1e15 and up);
    # an epsilon above a million protects nothing anyway
    target_epsilon: float | None = Field(
        None,
        gt=0,
        le=1e6,
        description="calibrate z (with `accountant`) so that the releases cost this",
    )
    target_delta: float = Field(1e-5, gt=0, lt=1)
    accountant: Literal["pld", "rdp", "prv"] = Field(
        "pld",
        description="how the releases compose into (epsilon, delta): pld (dp-accounting, "
        "the default and tightest), rdp or prv (opacus); target_epsilon is calibrated with it",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_multiplier(cls, data):
        if (
            isinstance(data, dict)
            and "noise_multiplier" not in data
            and "target_epsilon" not in data
        ):
            data = {**data, "noise_multiplier": 1.0}
        return data

    @model_validator(mode="after")
    def _exactly_one_noise_setting(self):
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError("give exactly one of noise_multiplier and target_epsilon")
        return self


@dataclass(frozen=True)
class MechanismEvent:
    party: str
    mechanism: str  # "gaussian" | "laplace" | "dpsgd" | ...
    noise_multiplier: float
    sample_rate: float = 1.0
    count: int = 1
    sensitivity: float = float("nan")
    sigma: float = float("nan")
    note: str = ""
    epsilon: float | None = None  # pure-DP events (Laplace) carry their own epsilon
    #: the numeric field of the envelope this event noised, as the mechanism audit names it
    #: (``payload/support``, ``payload/x/support``, ``payload`` for a scalar payload; see
    #: :func:`testbed.exchange.payload.numeric_leaves`); "" = the whole release
    field: str = ""


@dataclass
class PrivacyLedger:
    """Append-only list of mechanism events, with accounting."""

    accountant: str = "pld"
    events: list[MechanismEvent] = field(default_factory=list)
    claims: dict[str, tuple[float, float]] = field(default_factory=dict)

    def record(self, event: MechanismEvent) -> None:
        self.events.append(event)

    def claim(self, party: str, epsilon: float, delta: float) -> None:
        """Record an (epsilon, delta) computed elsewhere (e.g. opacus's own DP-SGD accountant)."""
        self.claims[party] = (float(epsilon), float(delta))

    def parties(self) -> list[str]:
        return sorted({e.party for e in self.events} | set(self.claims))

    def epsilon(self, party: str, delta: float) -> float:
        """Claimed epsilon for ``party``: its mechanism events' at ``delta`` plus a recorded
        claim's (at the claim's own δ: :meth:`delta` says the δ of the sum); ``inf`` when
        nothing protects it."""
        evs = [e for e in self.events if e.party == party]
        if party in self.claims and not evs:
            return self.claims[party][0]
        if not evs:
            return math.inf
        pure = sum(e.epsilon * e.count for e in evs if e.epsilon is not None)
        gauss = [e for e in evs if e.epsilon is None]
        eps = pure
        if gauss:
            if any(e.noise_multiplier <= 0 for e in gauss):
                return math.inf
            history = [(e.noise_multiplier, e.sample_rate, e.count) for e in gauss]
            if self.accountant == "pld":
                return eps + _pld_epsilon(history, delta) + self._claimed(party)
            from opacus.accountants import create_accountant  # opacus: DP-SGD only

            acc = create_accountant(self.accountant)
            acc.history = history
            if self.accountant == "rdp":
                eps += _rdp_epsilon(acc, delta)
            else:
                with _prv_quiet():
                    eps += float(acc.get_epsilon(delta=delta))
        return eps + self._claimed(party)

    def _claimed(self, party: str) -> float:
        return self.claims[party][0] if party in self.claims else 0.0

    def delta(self, party: str, delta: float) -> float:
        """The δ that goes with :meth:`epsilon` ``(party, delta)``: ``delta`` for the
        mechanism events (their accountant's), plus the δ of a claim recorded with
        :meth:`claim` (basic composition: (ε₁ + ε₂, δ₁ + δ₂)); a claim alone keeps its own δ.
        A claim made at another δ (opacus's DP-SGD accountant at the defense's ``delta``) is
        thus never reported at the ledger's smaller one."""
        has_events = any(e.party == party for e in self.events)
        if party not in self.claims:
            return delta
        claimed = self.claims[party][1]
        return delta + claimed if has_events else claimed

    def gdp_mu(self, party: str) -> float | None:
        """The μ-GDP the events of ``party`` claim when every one is a full-batch Gaussian
        mechanism (noise multiplier z: μ = 1/z per release; composition √Σ count/z²); ``None``
        when another kind of event or claim is involved (inf: nothing protects it)."""
        evs = [e for e in self.events if e.party == party]
        if party in self.claims or any(
            e.epsilon is not None or e.sample_rate != 1.0 or e.mechanism != "gaussian" for e in evs
        ):
            return None
        if not evs or any(e.noise_multiplier <= 0 for e in evs):
            return math.inf
        return math.sqrt(sum(e.count / e.noise_multiplier**2 for e in evs))

    def summary(self, delta: float) -> dict[str, dict]:
        return {
            p: {
                "epsilon": self.epsilon(p, delta),
                "delta": self.delta(p, delta),
                "events": sum(e.count for e in self.events if e.party == p),
                "accountant": self.accountant,
                "noise_multipliers": sorted(
                    {e.noise_multiplier for e in self.events if e.party == p}
                ),
            }
            for p in self.parties()
        }

    def to_json(self) -> list[dict]:
        return [asdict(e) for e in self.events]
