"""Defense plugin contract.

A defense sees each outgoing envelope of the parties it protects and returns a *new* envelope
(``on_send``), named in its meta's ``defended_by`` (:meth:`Defense.marked`: what ``testbed
transcript`` and the scorecard show); it records what it did in the privacy ledger. Defenses that are protocol knobs
(random t, smaller support, ...) instead return ``protocol_overrides()`` applied to the
protocol's parameters before the run.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from testbed.data.datasets import PartyData
from testbed.errors import TestbedError
from testbed.exchange.bus import SERVER, Envelope, Payload
from testbed.exchange.envelope import defended_by
from testbed.exchange.ledger import PrivacyLedger
from testbed.registry import PROTOCOLS, Plugin, PluginConfig

__all__ = ["MEASURE_PROTOCOLS", "Defense", "DefenseConfig"]

#: the built-in protocols whose messages carry measures (``testbed.measure.Measure``): the
#: defenses that act on measures (noise, subsampling, masking) apply to these only
MEASURE_PROTOCOLS = (
    "fedwad",
    "fedwad_clustering",
    "fedwad_clustered_fl",
    "fedwad_coreset",
    "fedbary",
    "triangle_wad",
    "triangle_wad_marketplace",
)


def sends_measures(protocol: str) -> bool:
    """Whether a registered protocol plugin declares ``sends_measures = True`` (its messages
    carry :class:`~testbed.measure.Measure` payloads, which the measure defenses act on)."""
    try:
        return PROTOCOLS.get(protocol).sends_measures is True
    except TestbedError:  # an unknown protocol: the scenario's own error names it
        return False


class DefenseConfig(PluginConfig):
    """Base of defense parameters: which senders and message kinds it acts on. Subclass it per
    defense."""

    senders: list[str] | None = Field(
        None, description="parties whose messages are defended (default: every non-server party)"
    )
    kinds: list[str] = Field(
        default_factory=lambda: ["*"], description="message kinds (globs) to defend"
    )


class Defense(Plugin):
    """Base class of defense plugins."""

    Config = DefenseConfig
    #: False for knob defenses, which change protocol parameters and never a message
    changes_messages: ClassVar[bool] = True
    #: protocols this defense acts on ("*" = any); ``testbed validate`` refuses it on another
    #: protocol, where it would run and change nothing (the first named one is its contract
    #: fixture's protocol)
    protocols: ClassVar[tuple[str, ...]] = ("*",)
    #: scenario the contract kit runs it on (as :attr:`protocols.Protocol.contract_scenario`);
    #: None: a fixture of the first protocol it names
    contract_scenario: ClassVar[str | None] = None

    @classmethod
    def applies_to_protocol(cls, protocol: str) -> bool:
        """Whether this defense acts on ``protocol`` (its messages or its parameters): one it
        names, or, for a defense that acts on measures (its ``protocols`` hold every one of
        :data:`MEASURE_PROTOCOLS`), a protocol plugin that declares ``sends_measures = True``."""
        if "*" in cls.protocols or protocol in cls.protocols:
            return True
        return cls.acts_on_measures() and sends_measures(protocol)

    @classmethod
    def acts_on_measures(cls) -> bool:
        """Whether this defense acts on the measures the built-in measure protocols send."""
        return set(MEASURE_PROTOCOLS) <= set(cls.protocols)

    def protects(self, party: str) -> bool:
        """Whether this defense acts on what ``party`` sends (its ``senders``, else every
        party but the server)."""
        senders = getattr(self.config, "senders", None)
        return party != SERVER if senders is None else party in senders

    def prepare_party(self, data: PartyData) -> PartyData:
        """The protected party's own rows as the protocol may use them: where a defense's claim
        assumes something of the rows (e.g. a norm bound), it *enforces* it here rather than
        hoping it holds. The testbed calls it at the party, for every party :meth:`protects`
        names, before the protocol starts (and the mechanism audit on the neighbouring datasets
        it builds). Default: unchanged."""
        return data

    def prepare_rows(self, data: PartyData) -> PartyData:
        """What :meth:`prepare_party` does to rows, without refusing any: the testbed applies it
        to the rows a protected party is scored against (its population rows, the held-out rows),
        so that scoring compares like with like. Default: :meth:`prepare_party`."""
        return self.prepare_party(data)

    def applies_to(self, env: Envelope) -> bool:
        """Whether :meth:`on_send` acts on ``env`` (default: a protected sender and a kind that
        matches the config's ``kinds``)."""
        kinds = getattr(self.config, "kinds", ["*"])
        return self.protects(env.sender) and any(fnmatch.fnmatchcase(env.kind, k) for k in kinds)

    def on_send(
        self, env: Envelope, rng: np.random.Generator, ledger: PrivacyLedger | None
    ) -> Envelope:
        """Return a new envelope (default: an unchanged copy, not marked: a defense that acts
        returns :meth:`marked`). Must never mutate ``env``."""
        return env.with_payload(env.payload)

    def bounded(self, env: Envelope) -> Payload:
        """The payload as this defense releases it *before* its noise: where its claim rests on
        a clip it applies to what it sends (an atom's norm, a distance's range), that clip
        applied. The mechanism audit measures the noise against it. Default: the payload."""
        return env.payload

    def marked(self, env: Envelope, payload: Payload, **meta) -> Envelope:
        """A new envelope with ``payload`` (and ``meta`` merged), whose meta's ``defended_by``
        names this defense after those that acted before it. ``testbed transcript`` and the
        scorecard show which defenses acted on a message from it; the meta is hashed with the
        envelope, so the record is evidence like the payload."""
        return env.with_payload(payload, defended_by=(*defended_by(env.meta), self.name), **meta)

    def protocol_overrides(self, protocol_name: str) -> dict[str, Any]:
        """Protocol parameters this defense sets (knob defenses); empty for message defenses."""
        return {}

    def check_releases(
        self,
        protocol_name: str,
        protocol_params: PluginConfig | Mapping[str, Any],
        parties: Sequence[str],
    ) -> str | None:
        """A problem with this defense's release budget on the scenario's protocol, known before
        the run (``testbed validate`` refuses it at the defense's line), or ``None`` (default:
        nothing to check). ``protocol_params``: the protocol's config as it will run (the
        scenario's, validated once; a mapping of params when called outside a scenario)."""
        return None

    def assumptions(
        self,
        parties: Mapping[str, PartyData],
        protocol_name: str,
        protocol_params: PluginConfig | Mapping[str, Any],
    ) -> list[dict] | None:
        """The defense's stated assumptions checked against the run's data (a testbed diagnostic
        on the scoring side, never sent): ``[{"party", "assumption", "holds", "detail"}, ...]``
        (``holds`` a bool; ``name`` may stand for ``assumption``; the testbed adds ``defense``;
        results schema: ``Assumption``). ``None`` (default): it states none. ``protocol_params``: the protocol's config as it ran (a
        frozen model: read its fields as attributes)."""
        return None

    def bind_protocol(
        self,
        protocol_name: str,
        params: PluginConfig | Mapping[str, Any],
        sizes: Mapping[str, int],
    ) -> None:
        """Told, once the world is built, the protocol, its config (overrides included: the
        one it runs with) and each party's row count, before any message is sent: a defense whose calibration
        depends on the protocol's structure reads it here. Default: nothing."""
