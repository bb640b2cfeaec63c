"""Scenario schema (pydantic v2, ``extra="forbid"``, frozen) and its loader.

``load_scenario(path)`` reads the file with ``yaml.safe_load`` semantics (a ``!!python/...`` tag
is refused, never executed), validates the structure, then validates every plugin's ``params``
against that plugin's own Config model. Every error is a :class:`ScenarioError` whose message names
the file, the YAML line and the field: ``scenario.yaml:12: protocol.params.S: ...``.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

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
from testbed.scenario.filters import check_defense_filters
from testbed.scenario.limits import LimitsSpec, check_cell_count
from testbed.scenario.yamlloc import fmt_loc as _fmt_loc
from testbed.scenario.yamlloc import line_of as _line_of
from testbed.scenario.yamlloc import where as _where

__all__ = [
    "AttackSpec",
    "Cell",
    "DataSpec",
    "DefenseSpec",
    "MembershipSpec",
    "OutputSpec",
    "PluginSpec",
    "Scenario",
    "ThreatModel",
    "config_hash",
    "expand_cells",
    "load_scenario",
    "parse_path",
    "parse_scenario",
    "resolve",
    "sweep_hash",
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
    label: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="column label of this attack configuration in results.csv and the report "
        "(default: the name, plus a short digest of its params when another entry of the same "
        "attack has different params)",
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
    save_transcript: bool = True


class Scenario(BaseModel):
    """A whole experiment: data, protocol, defenses, threat model, attacks, output."""

    model_config = _STRICT
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
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


MAX_YAML_DEPTH = 64  # nesting levels; checked on the token stream before any tree is built
_PLAIN_TAGS = {
    "tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "map", "seq")
}


def _check_depth(text: str, fname: str) -> None:
    """Refuse YAML nested deeper than MAX_YAML_DEPTH before composing (no RecursionError)."""
    depth = 0
    try:
        for tok in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(
                tok,
                (
                    yaml.BlockMappingStartToken,
                    yaml.BlockSequenceStartToken,
                    yaml.FlowMappingStartToken,
                    yaml.FlowSequenceStartToken,
                ),
            ):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise ScenarioError(
                        f"{fname}:{tok.start_mark.line + 1}: YAML nested more than "
                        f"{MAX_YAML_DEPTH} levels deep"
                    )
            elif isinstance(
                tok, (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
            ):
                depth -= 1
    except yaml.YAMLError as exc:
        raise ScenarioError(_yaml_msg(exc, fname)) from None


def _check_tree(node, fname: str) -> None:
    """Plain data only: no duplicate keys (both lines named), no !!set / custom tags, finite floats."""
    stack = [node]
    while stack:
        n = stack.pop()
        line = n.start_mark.line + 1
        if n.tag not in _PLAIN_TAGS and not n.tag.startswith("tag:yaml.org,2002:merge"):
            raise ScenarioError(
                f"{fname}:{line}: YAML tag {n.tag.replace('tag:yaml.org,2002:', '!!')} is not "
                "allowed (only plain data is accepted)"
            )
        if isinstance(n, yaml.MappingNode):
            seen: dict[str, int] = {}
            for k, v in n.value:
                key = str(k.value)
                kl = k.start_mark.line + 1
                if key in seen:
                    raise ScenarioError(
                        f"{fname}:{kl}: duplicate key {key!r} (first at line {seen[key]})"
                    )
                seen[key] = kl
                stack.extend((k, v))
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
        elif n.tag.endswith(":float"):
            low = str(n.value).lower().lstrip("+-")
            if low in (".inf", ".nan"):
                raise ScenarioError(
                    f"{fname}:{line}: {n.value} is not allowed (only finite numbers)"
                )


def _compose_lines(text: str, fname: str):
    _check_depth(text, fname)
    try:
        node = yaml.compose(text, Loader=_LineLoader)
    except yaml.YAMLError as exc:
        raise ScenarioError(_yaml_msg(exc, fname)) from None
    if node is not None:
        _check_tree(node, fname)
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
    more = len(exc.errors()) - 1
    tail = f" (+{more} more error{'s' if more > 1 else ''})" if more else ""
    return ScenarioError(f"{_where(fname, root, loc)}: {msg}{tail}")


def _number_kinds(annotation) -> set[type]:
    """The numeric types (int/float) an annotation admits, looking inside Optional/Union."""
    import typing

    if annotation in (int, float):
        return {annotation}
    out: set[type] = set()
    for a in typing.get_args(annotation):
        if a in (int, float):
            out.add(a)
    return out


_SCI = __import__("re").compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
# any integer plugin parameter (sizes, iterations, dimensions); seeds excepted
MAX_COUNT = 10_000_000


def _submodels(annotation) -> list[type]:
    import typing

    cands = [annotation, *typing.get_args(annotation)]
    return [c for c in cands if isinstance(c, type) and issubclass(c, BaseModel)]


def _refuse_coerced_numbers(model, params, loc, root, fname) -> None:
    """No bool or str where a plugin field wants a number (pydantic's lax mode would turn
    ``true`` into 1 and ``'7'`` into 7), and no integer above MAX_COUNT (a size or iteration
    count that would allocate or run without end). Nested models are checked too."""
    if not isinstance(params, dict):
        return
    for name, field in getattr(model, "model_fields", {}).items():
        key = field.alias or name
        if key not in params:
            continue
        v = params[key]
        seq = typing_is_seq(field.annotation) and isinstance(v, list)
        vals = v if seq else [v]
        for i, x in enumerate(vals):
            sub_loc = [*loc, key, i] if seq else [*loc, key]
            for sub in _submodels(field.annotation):
                _refuse_coerced_numbers(sub, x, sub_loc, root, fname)
            kinds = _number_kinds(field.annotation)
            if not kinds:
                continue
            bad = None
            if isinstance(x, str) and float in kinds and _SCI.fullmatch(x):
                # 1e-8: YAML 1.1 reads exponent-only floats as strings; pydantic converts them.
                # Quoted ('1e-8') it is a string the user wrote: refused like '7'
                if _quoted(root, sub_loc):
                    bad = f"expected a number, got the quoted string {x!r} (remove the quotes)"
                elif not __import__("math").isfinite(float(x)):
                    bad = f"{x} is not allowed (only finite numbers)"
            elif isinstance(x, (bool, str)) and not _admits(field.annotation, type(x)):
                bad = f"expected a number, got {x!r}"
            elif isinstance(x, float) and float not in kinds:  # 4.0 where a count is wanted
                bad = f"expected a whole number, got {x!r}"
            elif (
                isinstance(x, int)
                and not isinstance(x, bool)
                and "seed" not in key
                and abs(x) > MAX_COUNT
            ):
                bad = f"{x} is above the limit {MAX_COUNT} for a size or count"
            if bad:
                raise ScenarioError(f"{_where(fname, root, sub_loc)}: {bad}")


def _quoted(root, loc) -> bool:
    """Whether the YAML scalar at ``loc`` was written in quotes (unknown tree: no)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if part < len(node.value) else None
        else:
            return False
    return isinstance(node, yaml.ScalarNode) and node.style in ("'", '"')


def typing_is_seq(annotation) -> bool:
    import typing

    return typing.get_origin(annotation) in (list, tuple)


def _admits(annotation, typ: type) -> bool:
    """Whether the annotation itself admits bool/str (e.g. ``int | str``, ``Literal['auto'] | int``)."""
    import typing

    if annotation is typ:
        return True
    for a in typing.get_args(annotation):
        if a is typ:
            return True
        if typing.get_origin(a) is typing.Literal and any(
            isinstance(x, typ) for x in typing.get_args(a)
        ):
            return True
        if typing.get_origin(annotation) in (list, tuple) and _admits(a, typ):
            return True
    return False


def _validate_plugin(reg: Registry, spec: PluginSpec, loc, root, fname, context):
    try:
        cls = reg.get(spec.name)
    except UnknownPluginError as exc:
        line = _line_of(root, [*loc, "name"])
        raise ScenarioError(f"{fname}:{line}: {_fmt_loc([*loc, 'name'])}: {exc}") from None
    _refuse_coerced_numbers(cls.Config, spec.params, [*loc, "params"], root, fname)
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
    from testbed.data.datasets import NoiseSpec

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
        check_defense_filters(cfg, sc, i, root, fname)  # a typo would disable the defense
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
        from testbed.exchange.engines.ray_bus import RayEngineConfig

        try:
            RayEngineConfig.model_validate(sc.engine_params)
        except ValidationError as exc:
            raise _first_error(exc, ["engine_params"], root, fname) from None
    else:
        from testbed.exchange.engines.pool import InProcessEngineConfig

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
        # every cell is validated now, with the same line-numbered errors; kept for the run
        sc._cells = expand_cells(sc)
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
        if a.get("label") is None:  # unset labels leave older configs' hashes unchanged
            a.pop("label", None)
    if out.get("membership") is None:
        out.pop("membership", None)
    if not out["data"].get("public"):  # unset: older configs' hashes unchanged
        out["data"].pop("public", None)
    out.pop("output", None)  # where results go does not change what they are
    out.pop("limits", None)  # nor do the resource limits a run is checked against
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


# ----------------------------------------------------------------------------- sweep cells
# A sweep expands into cells here, at load time (the scenario stage), so that every cell is
# validated with line-numbered errors before anything runs. testbed.run.sweep runs them.
_TOKEN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)")
_FORBIDDEN = {"sweep", "seeds", "seed", "name", "output"}


def parse_path(path: str) -> list[str | int]:
    """``"defenses[0].params.sigma"`` -> ``["defenses", 0, "params", "sigma"]``."""
    out: list[str | int] = []
    for part in path.split("."):
        m = _TOKEN.fullmatch(part)
        if m is None:
            raise ValueError(f"bad sweep path {path!r} (near {part!r})")
        out.append(m.group(1))
        out.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    if out[0] in _FORBIDDEN:
        raise ValueError(f"sweep path {path!r}: {out[0]!r} cannot be swept (use `seeds`)")
    return out


def _set(raw: Any, tokens: list[str | int], value: Any, path: str) -> None:
    cur = raw
    for i, tok in enumerate(tokens[:-1]):
        nxt = tokens[i + 1]
        if isinstance(tok, int):
            if not isinstance(cur, list) or tok >= len(cur):
                raise ValueError(f"sweep path {path!r}: no item [{tok}]")
            cur = cur[tok]
        else:
            if not isinstance(cur, dict):
                raise ValueError(f"sweep path {path!r}: {tok!r} is not inside a mapping")
            if tok not in cur or cur[tok] is None:
                cur[tok] = [] if isinstance(nxt, int) else {}
            cur = cur[tok]
    last = tokens[-1]
    if isinstance(last, int):
        if not isinstance(cur, list) or last >= len(cur):
            raise ValueError(f"sweep path {path!r}: no item [{last}]")
        cur[last] = copy.deepcopy(value)
    else:
        if not isinstance(cur, dict):
            raise ValueError(f"sweep path {path!r}: {last!r} is not inside a mapping")
        cur[last] = copy.deepcopy(value)


# ----------------------------------------------------------------------------- YAML nodes
def _child(node, tok):
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if k.value == str(tok):
                return v
    elif isinstance(node, yaml.SequenceNode) and isinstance(tok, int) and tok < len(node.value):
        return node.value[tok]
    return None


def _node_at(node, tokens):
    for tok in tokens:
        if node is None:
            return None
        node = _child(node, tok)
    return node


def _node_set(node, tokens, value_node):
    """A copy of ``node`` with the subtree at ``tokens`` replaced by ``value_node`` (so a cell's
    errors point at the sweep value's line); untouched subtrees are shared."""
    if node is None or value_node is None:
        return node
    if not tokens:
        return value_node
    tok, rest = tokens[0], tokens[1:]
    new = copy.copy(node)
    if isinstance(node, yaml.MappingNode):
        new.value = list(node.value)
        for i, (k, v) in enumerate(new.value):
            if k.value == str(tok):
                if not rest:  # errors are reported at the key's line: point it at the value
                    k = copy.copy(k)
                    k.start_mark = value_node.start_mark
                new.value[i] = (k, _node_set(v, rest, value_node))
                return new
        key = yaml.ScalarNode("tag:yaml.org,2002:str", str(tok), value_node.start_mark)
        filler = yaml.MappingNode("tag:yaml.org,2002:map", [], value_node.start_mark)
        new.value.append((key, _node_set(filler, rest, value_node) if rest else value_node))
        return new
    if isinstance(node, yaml.SequenceNode) and isinstance(tok, int) and tok < len(node.value):
        new.value = list(node.value)
        new.value[tok] = _node_set(node.value[tok], rest, value_node)
        return new
    return node


# ----------------------------------------------------------------------------- labels
def value_label(v: Any) -> str:
    """Short human label of a swept value (plugin specs as ``name(k=v)``, lists joined by +)."""
    if isinstance(v, dict) and "name" in v:
        params = v.get("params") or {}
        inner = ",".join(f"{k}={value_label(x)}" for k, x in sorted(params.items()))
        return f"{v['name']}({inner})" if inner else str(v["name"])
    if isinstance(v, list):
        return "+".join(value_label(x) for x in v) if v else "none"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}={value_label(x)}" for k, x in sorted(v.items())) + "}"
    return str(v)


def axis_labels(values: list[Any]) -> list[str]:
    """Labels for one axis's values; plugin specs show only the params that differ on the axis."""

    def is_spec(v):
        return isinstance(v, dict) and "name" in v

    def specs(v):
        return [v] if is_spec(v) else list(v)

    if len(values) == 1 and is_spec(values[0]):
        return [str(values[0]["name"])]  # a single protocol spec: the series is its name
    if all(is_spec(v) or (isinstance(v, list) and all(map(is_spec, v))) for v in values):
        by_name: dict[str, list[dict]] = {}
        for v in values:
            for sp in specs(v):
                by_name.setdefault(sp["name"], []).append(sp.get("params") or {})
        differ = {
            name: {
                k
                for k in {k for p in ps for k in p}
                # a spec that appears once shows all its params; repeated ones only what differs
                if len(ps) == 1 or len({json.dumps(p.get(k), sort_keys=True) for p in ps}) > 1
            }
            for name, ps in by_name.items()
        }

        def short(sp):
            p = sp.get("params") or {}
            return {
                "name": sp["name"],
                "params": {k: x for k, x in p.items() if k in differ[sp["name"]]},
            }

        return [
            value_label(short(v)) if is_spec(v) else value_label([short(x) for x in v])
            for v in values
        ]
    return [value_label(v) for v in values]


# ----------------------------------------------------------------------------- cells
@dataclass
class Cell:
    """One fully resolved scenario of a sweep."""

    index: int
    seed: int
    setting: dict[str, Any]  # dotted path -> value
    scenario: Scenario
    resolved: dict
    hash: str
    labels: dict[str, str] = dc_field(default_factory=dict)

    @property
    def label(self) -> str:
        return ", ".join(f"{p}={lab}" for p, lab in self.labels.items()) or "base"


def _grids(sc: Scenario) -> list[dict[str, list[Any]]]:
    if sc.sweep is None:
        return [{}]
    return [sc.sweep] if isinstance(sc.sweep, dict) else list(sc.sweep)


def expand_cells(sc: Scenario) -> list[Cell]:
    """Every cell of the sweep (grid(s) x seeds), each validated with line-numbered errors.
    A scenario loaded from YAML was expanded once at load time; that list is returned."""
    if sc._cells is not None:
        return list(sc._cells)
    fname, root = sc._fname, sc._yaml_root
    raw = sc._raw if sc._raw is not None else sc.model_dump(mode="json", exclude_none=True)
    raw = {k: v for k, v in raw.items() if k not in ("sweep", "seeds")}
    if root is not None:
        root = copy.copy(root)
        root.value = [(k, v) for k, v in root.value if k.value not in ("sweep", "seeds")]
    seeds = sc.seeds if sc.seeds is not None else [sc.seed]
    grid_list = _grids(sc)
    # refuse a sweep too large before any cell is built
    check_cell_count(sc, len(seeds) * sum(math.prod(map(len, g.values())) for g in grid_list))
    cells: list[Cell] = []
    for g, grid in enumerate(grid_list):
        gloc = ["sweep"] if isinstance(sc.sweep, dict) else ["sweep", g]
        paths = list(grid)
        labels = {p: axis_labels(grid[p]) for p in paths}
        tokens = {}
        for p in paths:
            try:
                tokens[p] = parse_path(p)
            except ValueError as exc:
                line = _line_of(sc._yaml_root, [*gloc, p])
                raise ScenarioError(f"{fname}:{line}: sweep: {exc}") from None
        for combo in itertools.product(*(range(len(grid[p])) for p in paths)):
            for s_i, seed in enumerate(seeds):
                cell_raw = copy.deepcopy(raw)
                cell_root = root
                setting = {}
                for p, j in zip(paths, combo):
                    value = grid[p][j]
                    try:
                        _set(cell_raw, tokens[p], value, p)
                    except ValueError as exc:
                        line = _line_of(sc._yaml_root, [*gloc, p, j])
                        raise ScenarioError(f"{fname}:{line}: sweep: {exc}") from None
                    vnode = _node_at(sc._yaml_root, [*gloc, p, j])
                    cell_root = _node_set(cell_root, tokens[p], vnode)
                    setting[p] = value
                cell_raw["seed"] = seed
                if sc.seeds is not None:
                    cell_root = _node_set(
                        cell_root, ["seed"], _node_at(sc._yaml_root, ["seeds", s_i])
                    )
                try:
                    cell = Scenario.model_validate(cell_raw)
                except ValidationError as exc:
                    raise _with_cell(_first_error(exc, [], cell_root, fname), setting) from None
                try:
                    validate_plugins(cell, cell_root, fname, sc._base_dir)
                except ScenarioError as exc:
                    raise _with_cell(exc, setting) from None
                cell._base_dir = sc._base_dir
                cell._raw, cell._yaml_root, cell._fname = cell_raw, cell_root, fname
                resolved = resolve(cell)
                cells.append(
                    Cell(
                        index=len(cells),
                        seed=seed,
                        setting=setting,
                        scenario=cell,
                        resolved=resolved,
                        hash=config_hash(resolved),
                        labels={p: labels[p][j] for p, j in zip(paths, combo)},
                    )
                )
    return cells


def _with_cell(exc: ScenarioError, setting: dict) -> ScenarioError:
    where = ", ".join(f"{p}={value_label(v)}" for p, v in setting.items())
    return ScenarioError(f"{exc} (in sweep cell {where})" if where else str(exc))


def sweep_hash(cells: list[Cell]) -> str:
    return hashlib.sha256("".join(c.hash for c in cells).encode()).hexdigest()
