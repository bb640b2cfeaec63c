"""Scenario schema: the pydantic v2 models of a scenario file (``extra="forbid"``, frozen).

Reading a file is ``testbed.scenario.loading`` (``load_scenario``, ``parse_scenario``); checking
every plugin's ``params`` is ``params.py``; the resolved form and its hash ``resolve.py``; a
sweep's cells ``cells.py``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from testbed.scenario.limits import LimitsSpec

__all__ = [
    "AttackSpec",
    "DataSpec",
    "DefenseSpec",
    "MembershipSpec",
    "OutputSpec",
    "PluginSpec",
    "Scenario",
    "ThreatModel",
]

_STRICT = ConfigDict(extra="forbid", frozen=True)


class PluginSpec(BaseModel):
    model_config = _STRICT
    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class AttackSpec(PluginSpec):
    target: str | None = Field(
        None, description="party to attack (default: every party the attack can target)"
    )
    if_not_applicable: Literal["error", "skip"] = Field(
        "error",
        description="an attack that does not apply to the protocol (of a sweep cell) is an "
        "error at validate and run; `skip` lists it as skipped instead",
    )
    label: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
        description="column label of this attack configuration in results.csv and the report "
        "(default: the name, plus a short digest of its params when another entry of the same "
        "attack has different params)",
    )
    input: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
        description="label of another attack of this scenario whose outputs this one runs on "
        "(attack chaining: it runs after that attack and finds its outputs in view.upstream, "
        "its baseline the upstream baseline's); unknown labels and cycles are refused",
    )


class MembershipSpec(BaseModel):
    """A membership-candidate pool (issue 11): ``nonmembers`` rows drawn (seeded) from the
    dataset and held out from every party, plus ``members`` rows of each target party. Attacks
    see the candidates in ``public.extra["candidates"][target]``; which are members only the
    scorer knows."""

    model_config = _STRICT
    members: int = Field(50, ge=1, le=100_000, description="member candidates per target party")
    nonmembers: int = Field(
        50, ge=1, le=100_000, description="held-out rows (no party holds them), shared by targets"
    )
    targets: list[str] | None = Field(None, description="parties to draw members of (default: all)")


class DefenseSpec(PluginSpec):
    pass


class ThreatModel(BaseModel):
    model_config = _STRICT
    observer: str = Field("server", description="'server', a party name, or 'eavesdropper'")
    colluders: list[str] = Field(default_factory=list)


class DataSpec(BaseModel):
    model_config = _STRICT
    dataset: PluginSpec
    partition: PluginSpec = Field(default_factory=lambda: PluginSpec(name="iid"))
    parties: list[str] | int = Field(
        2, description="party names, or a count (names client_0, client_1, ...)"
    )
    noise: list[dict[str, Any]] = Field(default_factory=list)
    transform: PluginSpec | None = Field(
        None, description="optional feature transform (e.g. otdd_augment)"
    )
    public: list[str] = Field(
        default_factory=list,
        description="parties whose rows are public (e.g. a public validation set): the privacy "
        "guard does not protect them, nor any other party's rows equal to them (a partitioner "
        "may add its own, e.g. distill_split's transfer set)",
    )

    @field_validator("parties", mode="before")
    @classmethod
    def _parties_no_bool(cls, v):
        if isinstance(v, bool):  # `parties: true` is not one party
            raise ValueError(f"expected a list of names or a count, got {v!r}")
        return v

    @field_validator("parties")
    @classmethod
    def _parties(cls, v):
        if isinstance(v, int):
            if v < 1:
                raise ValueError("parties must be at least 1")
            if v > 100_000:
                raise ValueError(f"parties: {v} is above the limit 100000")
            return v
        if not v:
            raise ValueError("parties must not be empty")
        if len(set(v)) != len(v):
            raise ValueError("party names must be unique")
        for p in v:
            if p in ("server", "eavesdropper") or not p.replace("_", "").isalnum():
                raise ValueError(f"invalid party name {p!r}")
        return v

    def party_names(self) -> list[str]:
        if isinstance(self.parties, int):
            return [f"client_{i}" for i in range(self.parties)]
        return list(self.parties)

    @model_validator(mode="after")
    def _public_are_parties(self):
        names = self.party_names()
        unknown = [p for p in self.public if p not in names]
        if unknown:
            raise ValueError(f"public: unknown party {unknown[0]!r}; parties: {', '.join(names)}")
        return self


class OutputSpec(BaseModel):
    model_config = _STRICT
    dir: str | None = Field(None, description="run directory (default: runs/<name>-<hash8>)")
    save_transcript: StrictBool = True  # not "no" or 0 read as false


class Scenario(BaseModel):
    """A whole experiment: data, protocol, defenses, threat model, attacks, output."""

    model_config = _STRICT
    # the run directory is named <name>-<hash8>: at most 100 characters keep it, its temporary
    # twin and a sweep's cell paths within a file system's 255-byte names
    name: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", max_length=100)
    description: str = ""
    seed: int = Field(0, ge=0, strict=True)  # `seed: true` or "7" is an error, not 1 or 7
    data: DataSpec
    protocol: PluginSpec
    defenses: list[DefenseSpec] = Field(default_factory=list)
    threat_model: ThreatModel = Field(default_factory=ThreatModel)
    attacks: list[AttackSpec] = Field(default_factory=list)
    membership: MembershipSpec | None = Field(
        None, description="membership-candidate pool for membership attacks (members + held-out)"
    )
    output: OutputSpec = Field(default_factory=OutputSpec)
    guard: Literal["stop", "record", "off"] | StrictBool = Field(  # `guard: "no"` is an error
        "stop",
        description="privacy guard on every message: 'stop' ends the run at the first private "
        "row or near-copy, 'record' keeps it as a finding and goes on, 'off' (true = stop, "
        "false = off)",
    )
    guard_rel_tol: float = Field(
        1e-6,
        gt=0,
        le=1,
        strict=True,  # not true (1.0) or the string '1e-6'
        allow_inf_nan=False,
        description="near-copy threshold relative to the median private row norm",
    )

    @property
    def guard_mode(self) -> str:
        if isinstance(self.guard, bool):
            return "stop" if self.guard else "off"
        return self.guard

    engine: Literal["inprocess", "ray"] = Field(
        "inprocess", description="where parties compute: in this process, or as Ray actors"
    )
    engine_params: dict[str, Any] = Field(
        default_factory=dict,
        description="engine options (ray: actors, num_cpus, temp_root; inprocess: workers)",
    )
    sweep: dict[str, list[Any]] | list[dict[str, list[Any]]] | None = Field(
        None,
        description="dotted path -> values (a grid; a list of grids is their union), e.g. "
        "protocol.params.support_size: [5, 10]; see testbed.run.sweep",
    )
    seeds: list[StrictInt] | None = Field(None, description="run every sweep cell with each seed")
    limits: LimitsSpec | None = Field(
        None, description="memory budget, wall-clock budget per cell, sweep size (resources.py)"
    )
    _base_dir: str = PrivateAttr(".")
    _raw: dict | None = PrivateAttr(None)
    _yaml_root: Any = PrivateAttr(None)
    _fname: str = PrivateAttr("<scenario>")
    _cells: list | None = PrivateAttr(None)  # a sweep's cells, expanded once at load time
    # its ResolvedScenario (testbed.scenario.resolve), built once with its plugins' configs
    _resolved: Any = PrivateAttr(None)

    @field_validator("sweep")
    @classmethod
    def _sweep(cls, v):
        grids = [v] if isinstance(v, dict) else (v or [])
        if isinstance(v, list) and not v:
            raise ValueError("sweep must not be an empty list")
        for g in grids:
            if not g:
                raise ValueError("a sweep grid must name at least one path")
            for path, values in g.items():
                if not values:
                    raise ValueError(f"sweep path {path!r} has no values")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v):
        if v is not None:
            if not v:
                raise ValueError("seeds must not be empty")
            if any(s < 0 for s in v):
                raise ValueError("seeds must be >= 0")
            if len(set(v)) != len(v):
                raise ValueError("seeds must be unique")
        return v

    @property
    def is_sweep(self) -> bool:
        return self.sweep is not None or self.seeds is not None
