"""The Gaussian mechanism on exchanged supports and distances, with PLD accounting.

Sensitivity (what the noise is calibrated to, and when the claim holds)
-----------------------------------------------------------------------
Neighbouring datasets differ by *replacing one row* of the protected party's data. The claimed
:math:`(\\varepsilon, \\delta)` holds only under these assumptions, which the run checks and the
report prints next to the claim:

1. every private row has L2 norm at most ``clip_norm`` :math:`C`. **Enforced**: the testbed
   clips each protected party's rows to norm :math:`C` at the party before the protocol starts
   (:meth:`GaussianMeasureNoise.prepare_party`); a row beyond it is shortened, never trusted.
   Choose :math:`C` near the rows' norms (e.g. the ``scale`` transform's ``clip_norm``, or a
   public a-priori bound such as 8 for digits scaled to [0, 1]): a smaller one distorts the data;
2. every released support is a **barycentric push**: atom :math:`j` is
   :math:`(1-\\lambda)\\,z_j + \\lambda\\,\\sum_i \\pi_{ji} x_i` with :math:`z_j` public to the
   receiver (it sent it), :math:`\\pi_{j\\cdot}` a probability vector, a private share
   :math:`\\lambda \\le` ``push_max`` (FedWAD: :math:`\\lambda = 1 - t`), and weights that do not
   depend on the private data. FedWAD's barycentric interpolation (eq. 10 with the support on
   the server's side) is of this form; its exact interpolation (eq. 5) is not (the atom count and
   weights depend on the data), and neither is any message not listed here;
3. each released distance is :math:`W_2(\\mu, \\xi)` with :math:`\\mu` uniform over the party's
   :math:`n \\ge` ``min_rows`` rows and :math:`\\xi` public to the receiver.

Replacing one row can change the optimal plan arbitrarily, so the only plan-free bound is that
each atom's barycentric image stays in the ball of radius :math:`C`: it moves by at most
:math:`2C`, hence the support (an S x d matrix) moves by at most

.. math:: \\Delta_{\\text{support}} = 2\\,C\\,\\lambda_{\\max}\\sqrt{S}

in Frobenius norm (``calibration: worst_case``). ``calibration: tight`` (the default) charges a
FedWAD client's support, when S < ``min_rows``,
:math:`2C\\lambda_{\\max}\\sqrt{\\sum_j \\min(1, 1/(\\texttt{min\\_rows}\\,b_j))^2}`
(:math:`2C\\lambda S^{3/2}/n` for uniform weights): valid for a *unique* optimal plan (an
augmenting-path argument, docs/reference/privacy.md), which it enforces by setting FedWAD's
``plan_tie_break`` (a data-independent random perturbation of the costs); with ties the solver's
own choice can move the push by more (the counterexample in docs/reference/privacy.md). Every other support
keeps the worst case, but TriangleWad's eta with one gamma atom (tight: :math:`2C\\lambda`, one
atom moves). ``min_rows`` is enforced: a party with fewer rows is refused at the party.
The push structure is the protocol's declaration (``barycentric_push_check``, read in
:meth:`GaussianMeasureNoise.bind_protocol`); a support that is not a push (FedBary's
:math:`\\gamma_i`, which mixes the server's atoms by a plan that moves with the private rows;
TriangleWad with k > 1; FedWAD's exact interpolation or S >= n) has every atom clipped to norm
:math:`C` before the noise and is charged :math:`2C\\sqrt{S}`; a distance whose target is not
public to the receiver (FedBary's) is clipped to :math:`[0, 2C]` and charged :math:`2C`.
A distance moves by at most :math:`W_2(\\mu, \\mu') \\le 2C/\\sqrt{n}`, so
:math:`\\Delta_{\\text{distance}} = 2C/\\sqrt{\\texttt{min\\_rows}}`. Every release adds
:math:`\\mathcal N(0, (z\\Delta)^2 I)` with the same noise multiplier :math:`z`; each is one
Gaussian-mechanism event in the ledger, and the ledger's accountant (PLD by default, exact for
these full-batch Gaussian releases; ``accountant: rdp`` for opacus's RDP) composes them (adaptive
composition: every later input the party receives is post-processing of earlier noisy releases
and of data that is not its own). Distances are clipped at 0 after the noise (post-processing).

The bound is worst-case and loose: on real data it makes formal DP very expensive in accuracy.
That is a finding the report shows, not a bug.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from defenses._base import MEASURE_PROTOCOLS, Defense, DefenseConfig
from testbed.data.datasets import PartyData
from testbed.errors import TestbedError
from testbed.exchange.bus import Envelope
from testbed.exchange.ledger import (
    GaussianNoiseChoice,
    MechanismEvent,
    PrivacyLedger,
    calibrated_multiplier,
)
from testbed.measure import Measure
from testbed.registry import DEFENSES, PROTOCOLS

__all__ = ["PUBLIC_TARGET_DISTANCES", "GaussianMeasureNoise", "GaussianMeasureNoiseConfig"]

#: protocols whose released scalars are distances W2(own rows, a measure the receiver sent): one
#: row moves them by at most 2C/sqrt(n). Elsewhere (FedBary's W2(P_i, gamma_i): gamma_i is the
#: client's own state, built from its rows) the target moves with the row too, so the value is
#: clipped to [0, 2C] before the noise and charged 2C (docs/reference/privacy.md)
PUBLIC_TARGET_DISTANCES = frozenset({"fedwad"})


class GaussianMeasureNoiseConfig(DefenseConfig, GaussianNoiseChoice):
    clip_norm: float = Field(
        1.0, gt=0, description="C: bound on the L2 norm of every private row (assumption, checked)"
    )
    releases: int | None = Field(
        None,
        gt=0,
        description="releases per party the target covers: the supports and distances one "
        "party sends that this defense noises (FedWAD: K + 1); testbed validate names the count "
        "when the protocol declares it (Protocol.client_releases)",
    )
    push_max: float = Field(
        1.0, gt=0, le=1, description="bound on the private share of an atom (FedWAD: 1 - t)"
    )
    min_rows: int = Field(
        1,
        ge=1,
        description="public lower bound on each party's row count (enforced: a party with "
        "fewer rows is refused)",
    )
    calibration: Literal["tight", "worst_case"] = Field(
        "tight",
        description="tight: a FedWAD client's support is charged 2 C push_max "
        "sqrt(sum_j min(1, 1/(min_rows b_j))^2) (unique plans enforced; docs/reference/privacy.md), "
        "TriangleWad's eta (k = 1) 2 C push_max, never more than the worst case; worst_case: "
        "2 C push_max sqrt(S) for every push (a support that is not one: 2 C sqrt(S), its atoms "
        "clipped)",
    )
    noise_distances: bool = Field(True, description="also noise scalar distances")

    @model_validator(mode="after")
    def _releases(self):
        if self.target_epsilon is not None and self.releases is None:
            raise ValueError("target_epsilon needs releases (how many releases it must cover)")
        return self


@DEFENSES.register
class GaussianMeasureNoise(Defense):
    """Gaussian mechanism on sent supports and distances; PLD-accounted claimed (epsilon, delta)."""

    name = "gaussian_measure_noise"
    Config = GaussianMeasureNoiseConfig
    #: it acts on measures (and distances): idle on a protocol that sends none
    protocols = MEASURE_PROTOCOLS

    def check_releases(
        self, protocol_name: str, protocol_params, parties: Sequence[str]
    ) -> str | None:
        """With a target epsilon: a problem when ``releases`` is below what one defended party
        of the protocol releases in a run (``Protocol.client_releases``, when the protocol can
        tell from its params and the scenario's ``parties``); the run would stop at the release
        the target does not cover."""
        c = self.config
        if c.target_epsilon is None or c.releases is None:
            return None
        cls = PROTOCOLS.get(protocol_name)
        if c.senders is not None and any(s in cls.extra_senders for s in c.senders):
            return None  # the server's releases are not counted
        cfg = protocol_params  # the protocol's config as it runs (or its params, as a mapping)
        protocol = cls(cfg) if isinstance(cfg, cls.Config) else cls.from_params(dict(cfg))
        roles = protocol.client_releases(list(parties))
        counts = {
            party: sum(
                n
                for kind, n, what in sends
                if (what == "measure" or c.noise_distances)
                and any(fnmatch.fnmatchcase(kind, k) for k in c.kinds)
            )
            for party, sends in (roles or {}).items()
            if c.senders is None or party in c.senders
        }
        if not counts:
            return None
        party = max(counts, key=counts.get)
        need = counts[party]
        if c.releases >= need:
            return None
        return (
            f"releases={c.releases}, but party {party!r} of {protocol_name} makes {need} "
            f"releases this defense noises in a run (its params); the run would stop at release "
            f"#{c.releases + 1}: give releases: {need}"
        )

    def bind_protocol(self, protocol_name: str, params, sizes: Mapping[str, int]) -> None:
        """Which support bound applies: the barycentric-push bounds only where the protocol
        declares that structure (``barycentric_push_check``) with a private share within
        ``push_max``; otherwise every released atom is clipped to norm ``clip_norm`` and the
        support charged 2 C sqrt(S)."""
        check = _push_check(protocol_name, params, self.config.push_max, sizes)
        self.__dict__["_protocol"] = protocol_name
        self.__dict__["_push_structure"] = bool(check["holds"])

    def pushes(self) -> bool:
        """Whether released supports are barycentric pushes of public atoms (the protocol
        declares it; :meth:`bind_protocol`). False before the protocol is bound."""
        return bool(self.__dict__.get("_push_structure", False))

    def bounded_support(self, support: np.ndarray) -> np.ndarray:
        """The support as released before the noise: unchanged for a barycentric push; else
        every atom clipped to norm ``clip_norm`` (what the 2 C sqrt(S) charge assumes)."""
        if self.pushes():
            return support
        return _clip_rows(support, self.config.clip_norm)

    def bounded_distance(self, value: float) -> float:
        """A released distance before the noise: unchanged when its target is public to the
        receiver (:data:`PUBLIC_TARGET_DISTANCES`); else clipped to [0, 2C]."""
        if self.__dict__.get("_protocol") in PUBLIC_TARGET_DISTANCES:
            return value
        return min(max(value, 0.0), 2.0 * self.config.clip_norm)

    def bounded(self, env: Envelope):
        """The payload with the clips :meth:`on_send` applies before its noise."""

        def walk(p):
            if isinstance(p, Measure):
                return Measure(self.bounded_support(p.support), p.weights)
            if isinstance(p, float) and self.config.noise_distances:
                return self.bounded_distance(p)
            if isinstance(p, Mapping):
                return {k: walk(v) for k, v in p.items()}
            return p

        return walk(env.payload)

    def protocol_overrides(self, protocol_name: str) -> dict:
        """Tight calibration on FedWAD: every client plan made unique (``plan_tie_break``),
        which the tight support bound needs (docs/reference/privacy.md). Remembers the protocol: the
        tight bound is used for FedWAD's own messages only."""
        self.__dict__["_protocol"] = protocol_name
        if self.config.calibration == "tight" and protocol_name == "fedwad":
            return {"plan_tie_break": True}
        return {}

    def prepare_party(self, data: PartyData) -> PartyData:
        """Assumptions 1 and 3, enforced: a party with fewer than ``min_rows`` rows is refused;
        every row clipped to L2 norm ``clip_norm`` (rows within it are returned bit for bit).
        What it clipped is kept for :meth:`assumptions`."""
        n = np.asarray(data.X).shape[0]
        if n < self.config.min_rows:
            raise TestbedError(
                f"defense gaussian_measure_noise: party {data.name!r} has {n} rows, "
                f"fewer than min_rows={self.config.min_rows} its sensitivities assume"
            )
        return self.prepare_rows(data)

    def prepare_rows(self, data: PartyData) -> PartyData:
        """The clip of :meth:`prepare_party` alone (population and held-out rows)."""
        X = np.asarray(data.X, dtype=np.float64)
        norms = np.linalg.norm(X, axis=1)
        over = norms > self.config.clip_norm
        self.__dict__.setdefault("_clipped", {})[data.name] = (
            int(over.sum()),
            X.shape[0],
            float(norms.max(initial=0.0)),
        )
        if not over.any():
            return data
        X = _clip_rows(X, self.config.clip_norm)
        X.setflags(write=False)
        return PartyData(data.name, X, data.y, data.source_index)

    def multiplier(self) -> float:
        """The noise multiplier z (given, or calibrated from the target epsilon with the ledger's
        accountant, ``accountant``)."""
        c = self.config
        if c.noise_multiplier is not None:
            return float(c.noise_multiplier)
        return calibrated_multiplier(
            float(c.target_epsilon), float(c.target_delta), int(c.releases), c.accountant
        )

    def support_sensitivity(self, n_atoms: int, weights: np.ndarray | None = None) -> float:
        """L2 sensitivity of a released support of ``n_atoms`` atoms with (public) ``weights``
        (None: uniform). Not a barycentric push (:meth:`pushes`): 2 C √S, its atoms clipped to
        norm C. Worst case 2 C λ √S; tight on TriangleWad (k = 1): 2 C λ; tight (FedWAD, unique plans, S < min_rows, so
        the support is the server's atoms pushed): 2 C λ √(Σ_j min(1, 1/(min_rows b_j))²)."""
        c = self.config
        if not self.pushes():
            return 2.0 * c.clip_norm * math.sqrt(n_atoms)
        worst = 2.0 * c.clip_norm * c.push_max * math.sqrt(n_atoms)
        if c.calibration == "tight" and self.__dict__.get("_protocol") in _OWN_ATOM_PUSHES:
            return min(worst, 2.0 * c.clip_norm * c.push_max)  # one row moves its own atom only
        if not self._tight_support(n_atoms):
            return worst
        b = np.full(n_atoms, 1.0 / n_atoms) if weights is None else np.asarray(weights, float)
        per_atom = np.minimum(1.0, 1.0 / (c.min_rows * np.maximum(b, 1e-300)))
        return min(worst, 2.0 * c.clip_norm * c.push_max * float(np.sqrt(np.sum(per_atom**2))))

    def _tight_support(self, n_atoms: int) -> bool:
        """The tight bound's structure: FedWAD (its plans made unique by this defense's
        override) and fewer atoms than any party's rows (side 'smallest': the server's atoms)."""
        return (
            self.config.calibration == "tight"
            and self.__dict__.get("_protocol") == "fedwad"
            and n_atoms < self.config.min_rows
        )

    def distance_sensitivity(self) -> float:
        """2C/sqrt(min_rows) for a distance to a public measure; 2C for one clipped to [0, 2C]
        (:meth:`bounded_distance`)."""
        if self.__dict__.get("_protocol") in PUBLIC_TARGET_DISTANCES:
            return 2.0 * self.config.clip_norm / math.sqrt(self.config.min_rows)
        return 2.0 * self.config.clip_norm

    def on_send(
        self, env: Envelope, rng: np.random.Generator, ledger: PrivacyLedger | None
    ) -> Envelope:
        z = self.multiplier()
        events: list[MechanismEvent] = []

        def noisy(p, path):
            if isinstance(p, Measure):
                delta = self.support_sensitivity(p.n, p.weights)
                sigma = z * delta
                events.append(
                    self._event(env, z, delta, sigma, f"{env.kind}:{path}support", path + "support")
                )
                support = self.bounded_support(p.support)
                return Measure(support + rng.normal(0.0, sigma, support.shape), p.weights)
            if isinstance(p, float) and self.config.noise_distances:
                delta = self.distance_sensitivity()
                sigma = z * delta
                events.append(self._event(env, z, delta, sigma, f"{env.kind}:{path}distance", path))
                return max(0.0, self.bounded_distance(p) + float(rng.normal(0.0, sigma)))
            if isinstance(p, Mapping):
                return {k: noisy(v, f"{path}{k}/") for k, v in p.items()}
            if isinstance(p, np.ndarray) and p.dtype.kind == "f":
                raise TestbedError(
                    f"defense gaussian_measure_noise: no sensitivity bound for an array payload "
                    f"(message {env.kind}, field {path or 'value'}); restrict `kinds`"
                )
            return p

        payload = noisy(env.payload, "")
        if ledger is not None:
            self._check_budget(env.sender, ledger, len(events))
            for e in events:
                ledger.record(e)
        return self.marked(env, payload)

    def _event(self, env, z, delta, sigma, note, path) -> MechanismEvent:
        return MechanismEvent(
            field=("payload/" + path).rstrip("/"),
            party=env.sender,
            mechanism="gaussian",
            noise_multiplier=z,
            sensitivity=delta,
            sigma=sigma,
            note=note,
        )

    def _check_budget(self, party: str, ledger: PrivacyLedger, new: int) -> None:
        """With a target epsilon, refuse releases beyond those it was calibrated for."""
        c = self.config
        if c.releases is None or c.target_epsilon is None:
            return
        done = sum(e.count for e in ledger.events if e.party == party and e.mechanism == "gaussian")
        if done + new > c.releases:
            raise TestbedError(
                f"defense gaussian_measure_noise: party {party!r} would make release "
                f"#{done + new} but target_epsilon={c.target_epsilon} was calibrated for "
                f"releases={c.releases}; raise `releases`"
            )

    def assumptions(self, parties, protocol_name: str, protocol_params) -> list[dict]:
        """Check the stated assumptions against the run (a testbed diagnostic, never sent).
        ``protocol_params``: the protocol's config as it runs (or its params, as a mapping)."""
        c = self.config
        out = []
        senders = c.senders if c.senders is not None else list(parties)
        for p in senders:
            if p not in parties:
                continue
            X = np.asarray(parties[p].X)
            max_norm = float(np.linalg.norm(X, axis=1).max())
            out.append(
                {
                    "party": p,
                    "defense": self.name,
                    "assumption": f"every row has L2 norm <= clip_norm={c.clip_norm:g}",
                    "holds": max_norm <= c.clip_norm * (1 + 1e-12),
                    "detail": _clip_detail(self.__dict__.get("_clipped", {}).get(p), max_norm),
                }
            )
            out.append(
                {
                    "party": p,
                    "defense": self.name,
                    "assumption": f"party has >= min_rows={c.min_rows} rows",
                    "holds": X.shape[0] >= c.min_rows,
                    "detail": f"{X.shape[0]} rows",
                }
            )
        out.append(
            {
                "party": "*",
                "defense": self.name,
                "assumption": f"released supports are barycentric pushes, private share <= {c.push_max:g}",
                **_push_report(protocol_name, protocol_params, c, parties),
            }
        )
        return out


def _clip_detail(clipped, max_norm: float) -> str:
    """What the enforced clipping did to a party's rows."""
    if clipped is None:
        return f"max row norm {max_norm:.4g}"
    k, n, before = clipped
    return (
        f"{k} of {n} rows clipped at the party (enforced; max row norm {before:.4g} before, "
        f"{max_norm:.4g} after)"
    )


def _clip_rows(X: np.ndarray, C: float) -> np.ndarray:
    """Each row of X scaled onto the ball of radius C (rows within it unchanged)."""
    X = np.array(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1)
    over = norms > C
    X[over] *= (C / norms[over])[:, None]
    return X


#: protocols whose released support, when it is a push (:meth:`GaussianMeasureNoise.pushes`),
#: keeps the sender's own atoms pushed toward one public atom (TriangleWad with k = 1: atom i is
#: (1 - t) x_i + t g), so replacing row i moves atom i alone, by at most 2 C (1 - t)
_OWN_ATOM_PUSHES = frozenset({"triangle_wad"})


def _push_check(protocol_name: str, params, push_max: float, sizes) -> dict:
    """Whether the protocol's released supports have the barycentric-push form with a private
    share within ``push_max`` (the protocol's own check)."""
    cls = PROTOCOLS.get(protocol_name)
    found = cls.barycentric_push_check(params, push_max, dict(sizes))
    if found is None:
        return {
            "holds": False,
            "detail": f"protocol {protocol_name} does not declare that its supports are "
            "barycentric pushes",
        }
    return dict(found)


def _push_report(protocol_name: str, params, c, parties) -> dict:
    """The push assumption as the report states it: where the structure is not a push, the
    defense clips every released atom to norm C and charges 2 C sqrt(S), so it holds."""
    out = _push_check(protocol_name, params, c.push_max, {p: d.n for p, d in parties.items()})
    if out["holds"]:
        return out
    return {
        "holds": True,
        "detail": f"{out['detail']}: not a push, so every released atom is clipped to norm "
        f"{c.clip_norm:g} and each support charged 2 C sqrt(S) (enforced)",
    }
