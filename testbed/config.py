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
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    ValidationError,
    field_validator,
)

from testbed.errors import ScenarioError, TestbedError, UnknownPluginError
from testbed.filters import check_defense_filters
from testbed.registry import (
    ATTACKS,
    DATASETS,
    DEFENSES,
    PARTITIONERS,
    PROTOCOLS,
    TRANSFORMS,
    Registry,
)
from testbed.resources import LimitsSpec

__all__ = [
    "AttackSpec",
    "DataSpec",
    "DefenseSpec",
    "MembershipSpec",
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
        "protocol.params.support_size: [5, 10]; see testbed.sweep",
    )
    seeds: list[StrictInt] | None = Field(None, description="run every sweep cell with each seed")
    limits: LimitsSpec | None = Field(
        None, description="memory budget, wall-clock budget per cell, sweep size (resources.py)"
    )
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
                line = _line_of(root, sub_loc)
                where = f"{fname}:{line}" if line else fname
                raise ScenarioError(f"{where}: {_fmt_loc(sub_loc)}: {bad}")


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
        if a.get("label") is None:  # unset labels leave older configs' hashes unchanged
            a.pop("label", None)
    if out.get("membership") is None:
        out.pop("membership", None)
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
