"""The typed rows of the results files, one pydantic model per row kind (frozen, unknown fields
refused): :class:`RunResults` (a run's ``results.json``) with its sections, :class:`AttackRow`
(an attack's row in it, and in ``testbed attack``'s ``attacks-*.json``), :class:`SweepRow` (a
line of a sweep's ``results.jsonl``) and :class:`AuditRow` (a row of ``audit.json``). The
numbers are named in :mod:`testbed.scoring.names`; :mod:`testbed.scoring.results_schema`
versions these models, publishes them as JSON Schema and reads files through them.

A row reads like the mapping it was written from (``row["leakage"]``, ``row.get("failed")``,
``"failed" in row``), so code written against the files' JSON keeps working, except that a
name the model does not declare is an error (:class:`~testbed.errors.TestbedError`), never a
silent ``None``. A field the file left out is absent (``in`` is False, ``get`` gives the
default), as it was in the JSON.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from testbed.errors import TestbedError
from testbed.scoring.names import ACCURACY, ATTACK, Metric, RowField

__all__ = [
    "AccuracyEntry",
    "AccuracyHeadline",
    "Assumption",
    "AttackRow",
    "AttackRowsFile",
    "AuditRow",
    "Digests",
    "GuardSummary",
    "ObserverView",
    "PartySize",
    "PluginUse",
    "PrivacyClaim",
    "ProtocolInfo",
    "RunResults",
    "SkippedAttack",
    "SweepRow",
    "Traffic",
    "TranscriptInfo",
    "TypedRow",
]

#: a number as results.json writes it: NaN as null, +-inf as the strings "inf" / "-inf"
Num = float | Literal["inf", "-inf"] | None


class TypedRow(BaseModel):
    """A frozen row that refuses unknown fields and reads like the JSON mapping it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def _declared(self, key: str) -> str:
        """The field ``key`` names (its JSON name: a field may be spelt otherwise in Python,
        e.g. ``keys_``, where the JSON name is a mapping method)."""
        fields = type(self).model_fields
        if key in fields and fields[key].alias is None:
            return key
        for name, f in fields.items():
            if f.alias == key:
                return name
        raise TestbedError(
            f"{type(self).__name__} has no field {key!r} (testbed/scoring/results_models.py)"
        )

    def __getitem__(self, key: str) -> Any:
        name = self._declared(key)
        if name not in self.model_fields_set:
            raise KeyError(key)
        return getattr(self, name)

    def get(self, key: str, default: Any = None) -> Any:
        name = self._declared(key)
        return getattr(self, name) if name in self.model_fields_set else default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._declared(key) in self.model_fields_set

    def keys(self) -> list[str]:
        """The JSON names of the fields the file holds, sorted: the order of the file (results
        files are written with sorted keys), so what iterates a row reads it as before."""
        fields = type(self).model_fields
        return sorted(fields[k].alias or k for k in self.model_fields_set)

    def items(self) -> list[tuple[str, Any]]:
        return [(k, self[k]) for k in self.keys()]

    def values(self) -> list[Any]:
        return [self[k] for k in self.keys()]

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]  # a mapping's keys
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.model_fields_set)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping) and not isinstance(other, BaseModel):
            return dict(self.items()) == dict(other)  # the same as the JSON it was read from
        return super().__eq__(other)

    __hash__ = BaseModel.__hash__


Mapping.register(TypedRow)


def _metric_field(typ: Any, meaning: str, higher: bool | None, required: bool = False):
    extra = None if higher is None else {"leakage": "higher" if higher else "lower"}
    default = ... if required else None
    return (typ, Field(default, description=meaning, json_schema_extra=extra))


#: the text fields every attack row has (a failure row's target may be None: every target)
_REQUIRED = (
    RowField.ATTACK,
    RowField.LABEL,
    RowField.TARGET,
    RowField.OBSERVER,
    RowField.ISOLATION,
)
_NOT_NONE = (RowField.ATTACK, RowField.LABEL, RowField.OBSERVER, RowField.ISOLATION)


def _row_field(f: RowField):
    return _metric_field(str if f in _NOT_NONE else str | None, f.meaning, None, f in _REQUIRED)


#: one attack row of results.json (``attacks``): identity, then the metrics of its output's
#: kind; a metric a kind does not have is absent from the row. ``leakage`` in a field's schema:
#: whether a higher or a lower value means more leakage (absent: context, not a leakage measure).
AttackRow = create_model(
    "AttackRow",
    __base__=TypedRow,
    **{f.value: _row_field(f) for f in RowField},
    **{m.value: _metric_field(Num, m.meaning, m.higher) for m in Metric if m.row == ATTACK},
)

#: the accuracy of one estimate against the central reference (``accuracy``: one per quantity;
#: an array's estimate and exact value are nested lists)
AccuracyEntry = create_model(
    "AccuracyEntry",
    __base__=TypedRow,
    **{
        m.value: _metric_field(
            Any if m.higher is None and m in (Metric.ESTIMATE, Metric.EXACT) else Num,
            m.meaning,
            None,
            True,
        )
        for m in Metric
        if m.row == ACCURACY
    },
)


class AccuracyHeadline(TypedRow):
    """The run's one error, the x-axis of leakage against accuracy: a quantity's relative error,
    or a ranking's 1 - Spearman (then ``secondary`` is the error headline, when there is one)."""

    quantity: str
    keys_: list[str] = Field(alias="keys")  # spelt so in Python: keys() is the mapping's
    relative_error: Num
    signed_relative_error: Num = None
    label: str | None = None
    spearman: Num = None
    top_k: int | None = None
    top_k_overlap: Num = None
    secondary: AccuracyHeadline | None = None


class ProtocolInfo(TypedRow):
    name: str
    mode: str | None = None
    deviations: list[str] = []
    roles: dict[str, str] = {}
    params: dict[str, Any]


class PluginUse(TypedRow):
    name: str
    params: dict[str, Any]


class PartySize(TypedRow):
    rows: int
    dim: int


class Traffic(TypedRow):
    messages: int
    bytes: int


class TranscriptInfo(TypedRow):
    messages: int
    bytes: int
    rounds: int
    digest: str | None
    guard: str
    by_kind: dict[str, Traffic]


class ObserverView(TypedRow):
    observer: str
    colluders: list[str]
    messages: int
    bytes: int
    by_kind: dict[str, Traffic]


class PrivacyClaim(TypedRow):
    """One party's claimed (epsilon, delta) from the privacy ledger."""

    epsilon: Num
    delta: Num
    events: int
    accountant: str
    noise_multipliers: list[Num]


class Assumption(TypedRow):
    """An assumption a defense's sensitivity rests on, and whether it held in the run
    (``Defense.assumptions``: the testbed adds the defense; built-ins name the party and the
    assumption, a plugin may give it as ``name``)."""

    defense: str | None = None
    party: str | None = None
    assumption: str | None = None
    name: str | None = None
    holds: bool | None
    detail: str | None = None


class GuardSummary(TypedRow):
    """What the testbed's guard checked and found (testbed.exchange.guard)."""

    mode: str
    rel_tol: Num = None
    rule: str | None = None
    private_from: str | None = None
    thresholds: dict[str, Num] = {}
    rows_indexed: int | None = None
    messages_checked: int | None = None
    rows_checked: int | None = None
    violations: int | None = None
    findings: list[dict[str, Any]] = []
    public_number_matches: dict[str, Any] | None = None


class Digests(TypedRow):
    """What ``testbed verify`` re-checks: digests of the results body, the estimates, each
    attack row, the transcript, its spilled part and leakage.npz."""

    format: str
    results: str
    estimates: str | None
    attacks: list[str]
    transcript: str | None = None
    spill: str | None = None
    leakage: str | None = None


class SkippedAttack(TypedRow):
    """An attack the scenario lists that does not apply to the protocol (``if_not_applicable:
    skip``)."""

    index: int
    attack: str
    protocol: str
    applies_to: list[str]


class RunResults(TypedRow):
    """One run's ``results.json``: only seed-determined values (the same seed gives the same
    bytes). ``estimates``, ``reference``, ``history``, ``outputs``, ``diagnostics``,
    ``detection``, ``utility`` and ``evaluation`` are keyed by the protocol's own quantity
    names; everything else is declared here."""

    schema_version: int | None = None
    scenario: str
    seed: int
    config_hash: str
    protocol: ProtocolInfo
    defenses: list[PluginUse]
    parties: dict[str, PartySize]
    estimates: dict[str, Any]
    reference: dict[str, Any]
    accuracy: dict[str, AccuracyEntry]
    accuracy_headline: AccuracyHeadline | None = None
    history: dict[str, list[Any]]
    outputs: dict[str, Any]
    diagnostics: dict[str, Any]
    detection: dict[str, Any]
    transcript: TranscriptInfo
    observer_view: ObserverView
    privacy: dict[str, PrivacyClaim]
    privacy_epsilon: Num = Field(description=Metric.PRIVACY_EPSILON.meaning)
    utility: dict[str, Num]
    privacy_assumptions: list[Assumption]
    evaluation: dict[str, Any] | None = None
    guard: GuardSummary | dict[str, Any]
    attacks: list[AttackRow] = []  # type: ignore[valid-type]
    skipped_attacks: list[SkippedAttack] | None = None
    attacks_without_output: list[str] | None = None
    digests: Digests | None = None


class SweepRow(TypedRow):
    """A line of a sweep's ``results.jsonl``: one cell (setting x seed) and its results."""

    cell: str
    index: int | None = None
    seed: int | None
    setting: dict[str, Any]
    labels: dict[str, Any]
    label: str
    results: RunResults


class AttackRowsFile(TypedRow):
    """``attacks-<tag>.json``: the rows of a ``testbed attack`` re-run on a saved transcript."""

    attacks: list[dict[str, Any]]
    threat_model: dict[str, Any]
    rows: list[AttackRow]  # type: ignore[valid-type]
    digests: dict[str, Any]


class AuditRow(TypedRow):
    """A row of ``audit.json`` (``testbed audit``): one audited claim, by ``method``
    (``many-runs``, ``one-run``, ``mechanism``) or a reconstruction check
    (``reconstruction``: the attack's success beside the bound its μ-GDP claim allows)."""

    setting: str | None = None
    party: str | None = None
    method: str | None = None
    observer: str | None = None
    rounds: str | None = None
    scope: str | None = None
    runs: int | None = None
    canaries: int | None = None
    trials: int | None = None
    confidence: float | None = None
    delta: float | None = None
    eps_lower: float | None = Field(None, description=Metric.EPS_LOWER.meaning)
    eps_lower_gdp: float | None = None
    mu_lower: float | None = None
    epsilon_claimed: float | None = Field(None, description=Metric.EPSILON_CLAIMED.meaning)
    mu_claimed: float | None = None
    ceiling_epsilon: float | None = None
    ceiling_mu: float | None = None
    guesses: int | None = None
    correct: int | None = None
    rule: str | None = None
    candidates: int | None = None
    null: bool | None = None
    violated: bool | None = None
    verdict: str | None = None
    threshold: str | None = None
    seconds: float | None = None
    failed_checks: str | None = None
    findings: str | None = None
    checks: str | None = None
    # a reconstruction check
    reconstruction: bool | None = None
    attack: str | None = None
    target: str | None = None
    radius: float | None = None
    rows: int | None = None
    success: float | None = None
    success_lower: float | None = None
    kappa: float | None = None
    kappa_upper: float | None = None
    kappa_population: float | None = None
    mu: float | None = None
    bound: float | None = None
