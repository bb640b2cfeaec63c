"""Attack plugin contract.

An attack receives only a read-only :class:`~testbed.exchange.bus.View` (what its observer saw) and the
public information; it returns a list of :class:`AttackOutput`. Ground truth never reaches an
attack: the scorer (:mod:`testbed.scoring.metrics`) compares outputs with it.

Writing an attack::

    from testbed.api import Attack, AttackConfig, AttackOutput

    class MyAttack(Attack):
        '''One line shown by `testbed plugins`.'''

        name = "my_attack"                 # == YAML key == entry-point name
        protocols = ("fedwad",)            # protocols whose messages it reads ("*" = any)

        class Config(AttackConfig):
            steps: int = 10

        def run(self, view, public, rng):
            ...                            # read view.messages(kind, receiver=view.observer)
            return [AttackOutput(kind="points", target="bob", points=guess)]

Third-party packages expose it with an entry point in the group ``ot_testbed.attacks`` and check
it with :func:`testbed.testing.check_plugin` (or ``testbed new-attack NAME`` to scaffold both).

What an attacker may know (:class:`~testbed.exchange.bus.PublicInfo`, filled by the runner):

- ``params``: the protocol's public parameters (``Protocol.public_params()``);
- ``prior`` / ``extra["prior_mean"]``, ``extra["prior_cov"]``: the **public prior** — a Gaussian
  with the mean and covariance of the pooled dataset (domain statistics treated as public, like
  the mean image of a benchmark) and a public sample of it (``prior``, drawn with its own seed);
- ``extra["released"]``: the protocol's final estimates, which are released to the participants
  (the point of running the protocol: the parties learn W);
- ``extra["sizes"]``: rows per party; ``extra["dataset"]``: the dataset's name.

A chained attack (its scenario entry has ``input: LABEL``) also finds, in ``view.upstream``, the
AttackOutputs of the attack with that label, run on the same view (in ``baseline``: that
attack's baseline outputs); docs/reference/attacks.md, "Chaining attacks".
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from testbed.errors import TestbedError
from testbed.exchange.bus import SERVER, PublicInfo, View, visible_to
from testbed.registry import Plugin, PluginConfig

__all__ = [
    "Attack",
    "AttackConfig",
    "AttackOutput",
    "AttackOutputError",
    "chance_scores",
    "member_guesses",
    "membership_candidates",
    "observed",
    "prior_points",
    "validate_outputs",
]

OutputKind = Literal["points", "scores", "words", "histogram"]
OUTPUT_KINDS: tuple[str, ...] = ("points", "scores", "words", "histogram")

#: a reconstruction may have at most this many rows per row of its target (and at least
#: POINTS_FLOOR rows whatever the target's size): the scorer compares it with the target's rows
#: and with the population by exact OT, whose cost grows with the product of the sizes
POINTS_PER_ROW = 10
POINTS_FLOOR = 10_000


class AttackOutputError(TestbedError):
    """An attack returned something that does not follow the AttackOutput schema."""


@dataclass(frozen=True)
class AttackOutput:
    """What an attack produced about one target party.

    kind="points": ``points`` (n x d) [+ ``weights``], a reconstruction of the target's data.
    kind="scores": ``scores`` (one per candidate row in ``public.extra['candidates']``), higher
    means "more likely a member / noisy".
    kind="words": ``words`` (retrieved tokens, one per shared support point) and optionally
    ``meta["ranked"]``: one ranked word list per shared point (for precision@k).
    kind="histogram": ``histogram`` (inferred label distribution).
    """

    kind: OutputKind
    target: str
    points: np.ndarray | None = None
    weights: np.ndarray | None = None
    scores: np.ndarray | None = None
    words: tuple[str, ...] | None = None
    histogram: np.ndarray | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


class AttackConfig(PluginConfig):
    """Base of attack parameters (unknown keys rejected, frozen). Subclass it per attack."""


class Attack(Plugin):
    """Base class of attack plugins. ``__init__`` stores the config and nothing else."""

    Config: ClassVar[type[PluginConfig]] = AttackConfig
    #: protocols this attack applies to ("*" for any)
    protocols: ClassVar[tuple[str, ...]] = ("*",)
    #: kinds of AttackOutput it returns
    output_kinds: ClassVar[tuple[str, ...]] = ("points",)
    #: scenario the contract kit runs it on. A relative path is looked up next to the module
    #: defining the class and up to its package root, then in the current directory, then in
    #: the testbed's scenarios/ (testbed.testing.checks.resolve_contract_scenario).
    #: Default: the tiny scenario of its first protocol (scenarios/contract_tiny[_<protocol>].yaml).
    contract_scenario: ClassVar[str | None] = None

    def applies_to(self, protocol: str) -> bool:
        """Whether this attack reads the messages of ``protocol`` (default: from ``protocols``)."""
        return "*" in self.protocols or protocol in self.protocols

    @abstractmethod
    def run(self, view: View, public: PublicInfo, rng: np.random.Generator) -> list[AttackOutput]:
        """Attack what ``view`` holds. Must not mutate the view; may use only messages the
        observer (and its colluders) sent or received."""

    def baseline(
        self, view: View, public: PublicInfo, rng: np.random.Generator
    ) -> list[AttackOutput]:
        """Prior-only attacker for the same targets: public information and the observer's own
        data only, no message. Default for point attacks: :func:`prior_points` per target; for
        score attacks: :func:`chance_scores` (every candidate scores the same, AUC 0.5). Other
        kinds have no default: override it to compare against a prior-only attacker."""
        if "points" in self.output_kinds:
            guesses = member_guesses(view, public)
            return [
                AttackOutput(kind="points", target=t, points=guess, meta={"baseline": who})
                for t in _targets(view, public)
                for who, guess in guesses
            ]
        if "scores" in self.output_kinds:
            return chance_scores(view, public)
        return []


def observed(view: View, kind: str = "*") -> list:
    """Envelopes of ``kind`` (glob) that the observer or a colluder sent or received (every one
    for an eavesdropper). Attacks should select messages through this."""
    who = {view.observer, *view.colluders}
    return [e for e in view.messages(kind) if visible_to(e, who)]


def _targets(view: View, public: PublicInfo) -> list[str]:
    """Parties other than the observer, its colluders and the server."""
    me = {view.observer, *view.colluders, SERVER}
    return [p for p in public.parties if p not in me]


def membership_candidates(public: PublicInfo, target: str) -> np.ndarray | None:
    """The membership-candidate rows of ``target`` (``public.extra["candidates"]``: one array for
    every target, or a mapping target -> rows, as the scenario's ``membership:`` pool gives), or
    None when there are none."""
    cand = public.extra.get("candidates")
    if isinstance(cand, Mapping):
        cand = cand.get(target)
    if cand is None:
        return None
    cand = np.asarray(cand, dtype=np.float64)
    return cand if cand.ndim == 2 and cand.shape[0] > 0 else None


def chance_scores(view: View, public: PublicInfo) -> list[AttackOutput]:
    """The prior-only membership baseline: every candidate of every target other than the
    observer and its colluders scores the same (no message read, chance)."""
    out = []
    for t in public.parties:
        cand = membership_candidates(public, t)
        if cand is not None and t != view.observer and t not in view.colluders:
            out.append(
                AttackOutput(
                    kind="scores",
                    target=t,
                    scores=np.zeros(cand.shape[0]),
                    meta={"candidates": cand, "baseline": "prior"},
                )
            )
    return out


def member_guesses(view: View, public: PublicInfo) -> list[tuple[str, np.ndarray]]:
    """The prior-only guesses of another party's data, ``(whose, rows)``: one for a single
    observer (:func:`prior_points`); for a coalition, each member's own guess (its rows, or the
    public prior for a member without data), so that the scorer compares the coalition with its
    best member's prior-only attacker, not with a guess none of them would make alone."""
    if not view.colluders:
        guess = prior_points(view, public)
        return [] if guess is None else [("prior", guess)]
    out: dict[str, np.ndarray] = {}
    for m in (view.observer, *view.colluders):
        rows = view.own_data.get(m)
        if rows is not None and len(rows):
            out[f"own:{m}"] = np.asarray(rows)
        elif public.prior is not None:
            out["prior"] = np.asarray(public.prior)
    return list(out.items())


def prior_points(view: View, public: PublicInfo) -> np.ndarray | None:
    """The prior-only guess of another party's data.

    A curious party guesses "the others look like me" (its own rows); an observer without data
    (the server, an eavesdropper) uses the public prior sample ``public.prior``.
    """
    own = [np.asarray(v) for v in view.own_data.values()]
    if own:
        return np.vstack(own)
    if public.prior is not None:
        return np.asarray(public.prior)
    return None


def validate_outputs(outputs: Any, public: PublicInfo, kinds: Sequence[str] = OUTPUT_KINDS):
    """Check a list of :class:`AttackOutput` against the schema; raise AttackOutputError."""
    if not isinstance(outputs, list):
        raise AttackOutputError(f"run must return a list of AttackOutput, got {type(outputs)}")
    for i, o in enumerate(outputs):
        where = f"output[{i}]"
        if not isinstance(o, AttackOutput):
            raise AttackOutputError(f"{where}: not an AttackOutput ({type(o).__name__})")
        if o.kind not in kinds:
            raise AttackOutputError(f"{where}.kind: {o.kind!r} not in {list(kinds)}")
        if public.parties and o.target not in public.parties:
            raise AttackOutputError(f"{where}.target: {o.target!r} is not a party")
        if o.kind == "points":
            p = o.points
            if not isinstance(p, np.ndarray) or p.ndim != 2 or p.shape[0] == 0:
                raise AttackOutputError(f"{where}.points: need a non-empty 2-D array")
            if public.dim and p.shape[1] != public.dim:
                raise AttackOutputError(f"{where}.points: dimension {p.shape[1]} != {public.dim}")
            n = (public.extra.get("sizes") or {}).get(o.target)
            if n is not None and p.shape[0] > max(POINTS_PER_ROW * int(n), POINTS_FLOOR):
                raise AttackOutputError(
                    f"{where}.points: {p.shape[0]} rows for {o.target!r}'s {n}; a reconstruction "
                    f"may have {POINTS_PER_ROW} per row of its target, and {POINTS_FLOOR} in any "
                    "case"
                )
            if not np.all(np.isfinite(p)):
                raise AttackOutputError(f"{where}.points: not finite")
            if o.weights is not None:
                w = np.asarray(o.weights, dtype=float)
                if w.shape != (p.shape[0],) or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
                    raise AttackOutputError(
                        f"{where}.weights: need {p.shape[0]} weights >= 0 summing to 1"
                    )
        elif o.kind == "scores":
            s = o.scores
            if not isinstance(s, np.ndarray) or s.ndim != 1 or not np.all(np.isfinite(s)):
                raise AttackOutputError(f"{where}.scores: need a finite 1-D array")
            cand = public.extra.get("candidates")
            if isinstance(cand, Mapping):  # the testbed's pool: target -> candidate rows
                cand = cand.get(o.target)
            if cand is not None and len(s) != len(cand):
                raise AttackOutputError(f"{where}.scores: {len(s)} scores, {len(cand)} candidates")
        elif o.kind == "words":
            if not isinstance(o.words, tuple) or not all(isinstance(w, str) for w in o.words):
                raise AttackOutputError(f"{where}.words: need a tuple of str")
            ranked = o.meta.get("ranked")
            if ranked is not None and len(ranked) != len(o.words):
                raise AttackOutputError(f"{where}.meta.ranked: one list per word expected")
        elif o.kind == "histogram":
            h = o.histogram
            if (
                not isinstance(h, np.ndarray)
                or h.ndim != 1
                or np.any(h < 0)
                or not np.isfinite(h).all()
                or h.sum() <= 0
            ):
                raise AttackOutputError(
                    f"{where}.histogram: need a nonnegative 1-D array with mass"
                )
    return outputs
