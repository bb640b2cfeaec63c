"""Scenario schema (pydantic v2, ``extra="forbid"``, frozen) and its loader.

``load_scenario(path)`` reads the file with ``yaml.safe_load`` semantics (a ``!!python/...`` tag
is refused, never executed), validates the structure, then validates every plugin's ``params``
against that plugin's own Config model. Every error is a :class:`ScenarioError` whose message names
the file, the YAML line and the field: ``scenario.yaml:12: protocol.params.S: ...``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from testbed.errors import ScenarioError, TestbedError, UnknownPluginError
from testbed.registry import (
    ATTACKS,
    DATASETS,
    DEFENSES,
    PARTITIONERS,
    PROTOCOLS,
    TRANSFORMS,
    Registry,
)

__all__ = [
    "AttackSpec",
    "DataSpec",
    "DefenseSpec",
    "OutputSpec",
    "PluginSpec",
    "Scenario",
    "ThreatModel",
    "config_hash",
    "load_scenario",
    "resolve",
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

    @field_validator("parties")
    @classmethod
    def _parties(cls, v):
        if isinstance(v, int):
            if v < 1:
                raise ValueError("parties must be at least 1")
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


class OutputSpec(BaseModel):
    model_config = _STRICT
    dir: str | None = Field(None, description="run directory (default: runs/<name>-<hash8>)")
    save_transcript: bool = True


class Scenario(BaseModel):
    """A whole experiment: data, protocol, defenses, threat model, attacks, output."""

    model_config = _STRICT
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    seed: int = Field(0, ge=0)
    data: DataSpec
    protocol: PluginSpec
    defenses: list[DefenseSpec] = Field(default_factory=list)
    threat_model: ThreatModel = Field(default_factory=ThreatModel)
    attacks: list[AttackSpec] = Field(default_factory=list)
    output: OutputSpec = Field(default_factory=OutputSpec)
    guard: Literal["stop", "record", "off"] | bool = Field(
        "stop",
        description="privacy guard on every message: 'stop' ends the run at the first private "
        "row or near-copy, 'record' keeps it as a finding and goes on, 'off' (true = stop, "
        "false = off)",
    )
    guard_rel_tol: float = Field(
        1e-6,
        gt=0,
        le=1,
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
        "protocol.params.support_size: [5, 10]; see testbed.sweep",
    )
    seeds: list[int] | None = Field(None, description="run every sweep cell with each seed")
    _base_dir: str = PrivateAttr(".")
    _raw: dict | None = PrivateAttr(None)
    _yaml_root: Any = PrivateAttr(None)
    _fname: str = PrivateAttr("<scenario>")

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


# ----------------------------------------------------------------------------- YAML with lines
class _LineLoader(yaml.SafeLoader):
    """SafeLoader that records the line of every mapping key and sequence item."""


def _compose_lines(text: str, fname: str):
    try:
        node = yaml.compose(text, Loader=_LineLoader)
    except yaml.YAMLError as exc:
        raise ScenarioError(_yaml_msg(exc, fname)) from None
    return node


def _yaml_msg(exc: yaml.YAMLError, fname: str) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = f"{mark.line + 1}" if mark is not None else "?"
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if "python/" in str(exc) or "could not determine a constructor" in str(exc):
        tag = (
            str(exc).split("tag '", 1)[-1].split("'", 1)[0]
            if "tag '" in str(exc)
            else "unknown tag"
        )
        return f"{fname}:{line}: YAML tag {tag} is not allowed (only plain data is accepted)"
    return f"{fname}:{line}: YAML syntax error: {problem}"


def _line_of(node, loc: Sequence[Any]) -> int | None:
    """Best line for a pydantic error location in the composed YAML tree."""
    line = node.start_mark.line + 1 if node is not None else None
    cur = node
    for part in loc:
        if isinstance(cur, yaml.MappingNode):
            nxt = None
            for k, v in cur.value:
                if k.value == str(part):
                    nxt = (k, v)
                    break
            if nxt is None:
                break
            line = nxt[0].start_mark.line + 1
            cur = nxt[1]
        elif isinstance(cur, yaml.SequenceNode) and isinstance(part, int) and part < len(cur.value):
            cur = cur.value[part]
            line = cur.start_mark.line + 1
        else:
            break
    return line


def _fmt_loc(loc: Sequence[Any]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _first_error(exc: ValidationError, prefix: Sequence[Any], root, fname: str) -> ScenarioError:
    err = exc.errors()[0]
    loc = [
        *prefix,
        *[p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))],
    ]
    # pydantic unions add the branch name to the loc (e.g. 'list[str]'); drop such parts
    loc = [
        p
        for p in loc
        if not (isinstance(p, str) and ("[" in p or p in ("int", "str", "float", "bool")))
    ]
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif (
        "input" in err
        and err["type"] not in ("value_error",)
        and not isinstance(err["input"], (dict, list))
    ):
        msg = f"{msg} (got {err['input']!r})"
    msg = msg.removeprefix("Value error, ")
    line = _line_of(root, loc)
    where = f"{fname}:{line}" if line else fname
    more = len(exc.errors()) - 1
    tail = f" (+{more} more error{'s' if more > 1 else ''})" if more else ""
    return ScenarioError(f"{where}: {_fmt_loc(loc)}: {msg}{tail}")


def _validate_plugin(reg: Registry, spec: PluginSpec, loc, root, fname, context):
    try:
        cls = reg.get(spec.name)
    except UnknownPluginError as exc:
        line = _line_of(root, [*loc, "name"])
        raise ScenarioError(f"{fname}:{line}: {_fmt_loc([*loc, 'name'])}: {exc}") from None
    try:
        cfg = cls.Config.model_validate(spec.params, context=context)
    except ValidationError as exc:
        raise _first_error(exc, [*loc, "params"], root, fname) from None
    return cls, cfg


def validate_plugins(
    sc: Scenario, root=None, fname: str = "<scenario>", base_dir: str = "."
) -> dict:
    """Validate every plugin's params; returns the resolved params (defaults filled in)."""
    ctx = {"base_dir": base_dir}
    resolved: dict[str, Any] = {}
    _, cfg = _validate_plugin(DATASETS, sc.data.dataset, ["data", "dataset"], root, fname, ctx)
    resolved["dataset"] = cfg.model_dump(mode="json")
    _, cfg = _validate_plugin(
        PARTITIONERS, sc.data.partition, ["data", "partition"], root, fname, ctx
    )
    resolved["partition"] = cfg.model_dump(mode="json")
    from testbed.data import NoiseSpec

    names = sc.data.party_names()
    for i, n in enumerate(sc.data.noise):
        try:
            spec = NoiseSpec.model_validate(n)
        except ValidationError as exc:
            raise _first_error(exc, ["data", "noise", i], root, fname) from None
        if spec.party not in names:
            line = _line_of(root, ["data", "noise", i, "party"])
            raise ScenarioError(
                f"{fname}:{line}: data.noise[{i}].party: unknown party {spec.party!r}; parties: {', '.join(names)}"
            )
    if sc.data.transform is not None:
        _, cfg = _validate_plugin(
            TRANSFORMS, sc.data.transform, ["data", "transform"], root, fname, ctx
        )
        resolved["transform"] = cfg.model_dump(mode="json")
    _, cfg = _validate_plugin(PROTOCOLS, sc.protocol, ["protocol"], root, fname, ctx)
    resolved["protocol"] = cfg.model_dump(mode="json")
    resolved["defenses"] = []
    proto_params = dict(resolved["protocol"])
    for i, d in enumerate(sc.defenses):
        dcls, cfg = _validate_plugin(DEFENSES, d, ["defenses", i], root, fname, ctx)
        resolved["defenses"].append(cfg.model_dump(mode="json"))
        # knob defenses set protocol parameters: a knob the protocol lacks is an error here
        try:
            proto_params.update(dcls(cfg).protocol_overrides(sc.protocol.name))
        except TestbedError as exc:
            line = _line_of(root, ["defenses", i, "name"])
            raise ScenarioError(f"{fname}:{line}: defenses[{i}].name: {exc}") from None
    if proto_params != resolved["protocol"]:
        try:
            PROTOCOLS.get(sc.protocol.name).Config.model_validate(proto_params, context=ctx)
        except ValidationError as exc:
            line = _line_of(root, ["defenses"])
            err = exc.errors()[0]
            raise ScenarioError(
                f"{fname}:{line}: defenses: protocol parameters set by the defenses are invalid: "
                f"{_fmt_loc(err['loc'])}: {err['msg']}"
            ) from None
    resolved["attacks"] = []
    for i, a in enumerate(sc.attacks):
        _, cfg = _validate_plugin(ATTACKS, a, ["attacks", i], root, fname, ctx)
        resolved["attacks"].append(cfg.model_dump(mode="json"))
    if sc.engine == "ray":  # engine options are checked at load time too (no ray import)
        from testbed.engines.ray_bus import RayEngineConfig

        try:
            RayEngineConfig.model_validate(sc.engine_params)
        except ValidationError as exc:
            raise _first_error(exc, ["engine_params"], root, fname) from None
    else:
        from testbed.engines.pool import InProcessEngineConfig

        try:
            InProcessEngineConfig.model_validate(sc.engine_params)
        except ValidationError as exc:
            raise _first_error(exc, ["engine_params"], root, fname) from None
    tm = sc.threat_model
    allowed = {"server", "eavesdropper", *names}
    for field, who in [("observer", [tm.observer]), ("colluders", tm.colluders)]:
        for w in who:
            if w not in allowed:
                line = _line_of(root, ["threat_model", field])
                raise ScenarioError(
                    f"{fname}:{line}: threat_model.{field}: unknown party {w!r}; choose from {', '.join(sorted(allowed))}"
                )
    return resolved


def parse_scenario(text: str, fname: str = "<scenario>", base_dir: str = ".") -> Scenario:
    root = _compose_lines(text, fname)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(_yaml_msg(exc, fname)) from None
    if not isinstance(raw, dict):
        raise ScenarioError(
            f"{fname}:1: the scenario must be a YAML mapping (got {type(raw).__name__})"
        )
    try:
        sc = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise _first_error(exc, [], root, fname) from None
    validate_plugins(sc, root, fname, base_dir)
    sc._base_dir = base_dir  # where relative data paths are resolved
    sc._raw, sc._yaml_root, sc._fname = raw, root, fname
    if sc.is_sweep:
        from testbed.sweep import expand_cells

        expand_cells(sc)  # every cell is validated now, with the same line-numbered errors
    return sc


def load_scenario(path: str | Path) -> Scenario:
    """Read, parse and fully validate a scenario file."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(f"{p}: scenario file not found")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{p}: cannot read scenario ({exc})") from None
    return parse_scenario(text, str(p), str(p.parent.resolve()))


def resolve(sc: Scenario) -> dict[str, Any]:
    """The scenario with every default and every plugin's params filled in (JSON-able)."""
    base_dir = getattr(sc, "_base_dir", ".")
    resolved_params = validate_plugins(sc, None, sc.name, base_dir)
    out = sc.model_dump(mode="json")
    out["data"]["dataset"]["params"] = resolved_params["dataset"]
    out["data"]["partition"]["params"] = resolved_params["partition"]
    out["data"]["parties"] = sc.data.party_names()
    if "transform" in resolved_params:
        out["data"]["transform"]["params"] = resolved_params["transform"]
    out["protocol"]["params"] = resolved_params["protocol"]
    for d, p in zip(out["defenses"], resolved_params["defenses"]):
        d["params"] = p
    for a, p in zip(out["attacks"], resolved_params["attacks"]):
        a["params"] = p
    out.pop("output", None)  # where results go does not change what they are
    for k in ("engine", "engine_params"):  # nor does where parties compute (same results)
        out.pop(k, None)
    for k in ("sweep", "seeds"):  # a single run's hash does not depend on these when unset
        if out.get(k) is None:
            out.pop(k, None)
    return out


def config_hash(resolved: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a resolved scenario."""
    blob = json.dumps(resolved, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
