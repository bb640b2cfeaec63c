"""Attack plugin contract.

An attack receives only a read-only :class:`~testbed.bus.View` (what its observer saw) and the
public information; it returns an :class:`AttackOutput`. Ground truth never reaches an attack: the
scorer (:mod:`testbed.metrics`) compares outputs with it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from testbed.bus import PublicInfo, View
from testbed.registry import Plugin

__all__ = ["Attack", "AttackOutput"]

OutputKind = Literal["points", "scores", "words", "histogram"]


@dataclass(frozen=True)
class AttackOutput:
    """What an attack produced about one target party.

    kind="points": ``points`` (n x d) [+ ``weights``], a reconstruction of the target's data.
    kind="scores": ``scores`` (one per candidate row in ``public.extra['candidates']``), higher
    means "more likely a member / noisy".
    kind="words": ``words`` (retrieved tokens, one per shared support point).
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


class Attack(Plugin):
    """Base class of attack plugins. ``__init__`` stores the config and nothing else."""

    #: protocols this attack applies to ("*" for any)
    protocols: ClassVar[tuple[str, ...]] = ("*",)

    @abstractmethod
    def run(self, view: View, public: PublicInfo, rng: np.random.Generator) -> list[AttackOutput]:
        """Attack what ``view`` holds. Must not mutate the view."""

    def baseline(
        self, view: View, public: PublicInfo, rng: np.random.Generator
    ) -> list[AttackOutput]:
        """Prior-only attacker: uses public information only (default: none)."""
        return []
