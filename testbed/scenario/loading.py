"""Reading a scenario file: ``load_scenario(path)`` reads it with ``yaml.safe_load`` semantics
(a ``!!python/...`` tag is refused, never executed), validates the structure, then every
plugin's ``params`` against that plugin's own Config model, then (a sweep) every cell. Every
error is a :class:`ScenarioError` whose message names the file, the YAML line and the field:
``scenario.yaml:12: protocol.params.S: ...``.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import yaml
from pydantic import ValidationError

from testbed.errors import ScenarioError
from testbed.scenario.cells import expand_cells
from testbed.scenario.params import validate_plugins
from testbed.scenario.resolve import ResolvedScenario
from testbed.scenario.schema import Scenario
from testbed.scenario.yamlloc import first_error, node_at, node_set

__all__ = ["MAX_YAML_DEPTH", "check_yaml", "load_scenario", "parse_scenario"]


class _ScenarioLoader(yaml.SafeLoader):
    """SafeLoader that reads YAML 1.2's floats with an exponent as numbers (below)."""


class _LineLoader(_ScenarioLoader):
    """The scenario's loader, used to compose the node tree that gives every value's line."""


# YAML 1.2's floats with an exponent, which PyYAML (YAML 1.1) reads as text unless they have a
# dot and a signed exponent: `1e-8`, `1e3`, `2.5E4` are numbers in a scenario, as a user writes
# them, so the fields that refuse text (limits:, guard_rel_tol) accept them too
_ScenarioLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"),
)


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


#: how many values a scenario may hold once its YAML aliases are expanded: far beyond any real
#: scenario, and far below what a "billion laughs" of nested aliases makes of a few lines
MAX_EXPANDED_NODES = 1_000_000


def _check_tree(node, fname: str) -> None:
    """Plain data only: no duplicate keys (both lines named), no !!set / custom tags, finite
    floats; each node checked once however many aliases name it, and the tree they expand to
    at most :data:`MAX_EXPANDED_NODES` values."""
    stack, seen_nodes = [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen_nodes:
            continue
        seen_nodes.add(id(n))
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
            if low in (".inf", ".nan") or _overflows(low):
                raise ScenarioError(
                    f"{fname}:{line}: {n.value} is not allowed (only finite numbers)"
                )


def _overflows(text: str) -> bool:
    """A float literal too large for a float (1e400 reads as inf)."""
    try:
        return not math.isfinite(float(text.replace("_", "")))
    except ValueError:
        return False  # a YAML 1.1 form float() does not read (60:30.5): PyYAML's to convert


def _compose_lines(text: str, fname: str):
    _check_depth(text, fname)
    try:
        node = yaml.compose(text, Loader=_LineLoader)
    except yaml.YAMLError as exc:
        raise ScenarioError(_yaml_msg(exc, fname)) from None
    if node is not None:
        _check_tree(node, fname)
        _check_expansion(node, fname)
    return node


def _check_expansion(root, fname: str) -> None:
    """Refuse aliases that expand the scenario beyond :data:`MAX_EXPANDED_NODES` values (each
    node's expanded size computed once, children first)."""
    size: dict[int, int] = {}
    stack = [(root, False)]
    while stack:
        n, ready = stack.pop()
        if id(n) in size:
            continue
        kids = (
            [x for kv in n.value for x in kv]
            if isinstance(n, yaml.MappingNode)
            else n.value
            if isinstance(n, yaml.SequenceNode)
            else []
        )
        if not ready:
            stack.append((n, True))
            stack.extend((k, False) for k in kids if id(k) not in size)
            continue
        size[id(n)] = 1 + sum(size[id(k)] for k in kids)
        if size[id(n)] > MAX_EXPANDED_NODES:
            raise ScenarioError(
                f"{fname}:{n.start_mark.line + 1}: its aliases expand the scenario to more than "
                f"{MAX_EXPANDED_NODES:,} values; write the values out"
            )


def check_yaml(text: str, fname: str) -> None:
    """The YAML checks of a scenario alone (syntax, depth, duplicate keys, tags, aliases), with
    the same one-line errors: for commands that read a scenario file only for its name."""
    _compose_lines(text, fname)


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


def parse_scenario(text: str, fname: str = "<scenario>", base_dir: str = ".") -> Scenario:
    root = _compose_lines(text, fname)
    try:
        raw = yaml.load(text, Loader=_ScenarioLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise ScenarioError(_yaml_msg(exc, fname)) from None
    if raw is None:
        raise ScenarioError(
            f"{fname}:1: the file holds no scenario (empty, or only comments); a scenario is a "
            "mapping with at least name:, data: and protocol: (see scenarios/ for examples)"
        )
    if not isinstance(raw, dict):
        got = {"list": "a list", "str": "a single string"}.get(type(raw).__name__)
        raise ScenarioError(
            f"{fname}:1: the scenario must be a YAML mapping (name: ..., data: ..., "
            f"protocol: ...), got {got or type(raw).__name__}"
        )
    raw, root = _swept_protocol(raw, root)
    try:
        sc = Scenario.model_validate(raw)
    except ValidationError as exc:
        err = first_error(exc, [], root, fname, Scenario)
        if "protocol: required field is missing" in str(err) and raw.get("sweep") is not None:
            err = ScenarioError(
                f"{err}; a sweep needs no top-level protocol: when every grid sets `protocol` "
                "(e.g. sweep: {protocol: [{name: fedwad}, {name: triangle_wad}]})"
            )
        raise err from None
    # every plugin's params validated once: the configs the run builds its plugins from
    ResolvedScenario.build(sc, validate_plugins(sc, root, fname, base_dir))
    sc._base_dir = base_dir  # where relative data paths are resolved
    sc._raw, sc._yaml_root, sc._fname = raw, root, fname
    if sc.is_sweep:
        # every cell is validated now, with the same line-numbered errors; kept for the run
        sc._cells = expand_cells(sc)
    return sc


def _swept_protocol(raw: dict, root):
    """A sweep whose every grid sets ``protocol`` whole needs no top-level ``protocol:``: the
    first swept protocol stands in for it (every cell replaces it), its YAML node pointing at
    that sweep value's line so that errors name it. Other scenarios are returned as they are."""
    sweep = raw.get("sweep")
    grids = [sweep] if isinstance(sweep, dict) else sweep if isinstance(sweep, list) else []
    if "protocol" in raw or not grids:
        return raw, root
    if not all(isinstance(g, dict) and isinstance(g.get("protocol"), list) for g in grids):
        return raw, root
    first = grids[0]["protocol"]
    if not first:
        return raw, root  # an empty axis: the sweep's own error says so
    gloc = ["sweep"] if isinstance(sweep, dict) else ["sweep", 0]
    node = node_at(root, [*gloc, "protocol", 0])
    return {**raw, "protocol": copy.deepcopy(first[0])}, node_set(root, ["protocol"], node)


#: the largest scenario file read: far beyond any scenario (the longest shipped is a few KiB, a
#: sweep of 10,000 seeds 60 KiB), far below what takes minutes to parse
MAX_SCENARIO_BYTES = 4 << 20


def load_scenario(path: str | Path) -> Scenario:
    """Read, parse and fully validate a scenario file."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(f"{p}: scenario file not found")
    size = p.stat().st_size
    if size > MAX_SCENARIO_BYTES:  # a 60 MB description took 90 s to validate
        raise ScenarioError(
            f"{p}: {size / 2**20:.1f} MiB; a scenario is at most {MAX_SCENARIO_BYTES >> 20} MiB "
            "(data belongs in a data file: dataset: {name: csv, params: {path: ...}})"
        )
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{p}: cannot read scenario ({exc})") from None
    return parse_scenario(text, str(p), str(p.parent.resolve()))
