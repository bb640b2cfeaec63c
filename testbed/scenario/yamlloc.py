"""Where in a scenario file a field is: YAML line numbers and dotted field names for errors,
the one-line error of a pydantic validation error, and the composed YAML tree's navigation
(a sweep cell's tree points its swept values at the lines they were written on)."""

from __future__ import annotations

import copy
import difflib
import types
import typing
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from testbed.errors import ScenarioError

__all__ = ["first_error", "fmt_loc", "line_of", "node_at", "node_set", "quoted", "where"]


def line_of(node, loc: Sequence[Any]) -> int | None:
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


def fmt_loc(loc: Sequence[Any]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def where(fname: str, root, loc: Sequence[Any]) -> str:
    """``file:line: field`` of ``loc`` in the composed YAML tree ``root`` (``file: field`` when
    no line is known): the prefix of every one-line scenario error."""
    line = line_of(root, loc)
    return f"{fname}:{line}: {fmt_loc(loc)}" if line else f"{fname}: {fmt_loc(loc)}"


_TAGS = ("int", "str", "float", "bool", "dict", "list")


def _models(annotation) -> list[type]:
    """The pydantic models an annotation admits (through ``X | None``, unions, ``Annotated``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return [m for a in typing.get_args(annotation) for m in _models(a)]
    return []


def _step(annotations: list, part) -> list:
    """The annotations one step of an error location leads to from ``annotations``."""
    out = []
    for ann in annotations:
        for m in _models(ann):
            if isinstance(part, str) and part in m.model_fields:
                out.append(m.model_fields[part].annotation)
            elif part == m.__name__:  # pydantic names the union member it tried
                out.append(m)
        args = typing.get_args(ann)
        for a in args if typing.get_origin(ann) in (typing.Union, types.UnionType) else [ann]:
            origin, inner = typing.get_origin(a), typing.get_args(a)
            if isinstance(part, int) and origin in (list, tuple) and inner:
                out.append(inner[0])
            elif isinstance(part, str) and origin is dict and len(inner) == 2:
                out.append(inner[1])
    return out


def known_keys(model, loc: Sequence[Any]) -> list[str]:
    """The keys a mapping at ``loc`` (a location inside ``model``) may hold: the fields of the
    model(s) found there, with their aliases; empty when the location leads to none."""
    annotations: list = [model]
    for part in loc:
        if isinstance(part, str) and part.startswith("function-"):
            continue  # a validator's name, not a field
        nxt = _step(annotations, part)
        if not nxt and isinstance(part, str) and ("[" in part or part in _TAGS):
            continue  # the union branch pydantic tried (``list[str]``), not a field
        annotations = nxt
    keys: dict[str, None] = {}
    for ann in annotations:
        for m in _models(ann):
            for name, f in m.model_fields.items():
                keys[f.alias or name] = None
    return sorted(keys)


def suggestion(key: str, known: Sequence[str]) -> str:
    """``did you mean 'iterations'?`` for a key close to a known one, else the known keys (the
    registry's rule for plugin names, :meth:`testbed.registry.Registry._unknown`)."""
    # close ones first (as the registry's, 0.75); else the single nearest (``dd`` -> ``d``)
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.75)
    close = close or difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}?"
    return f"known keys here: {', '.join(known)}" if known else ""


def first_error(
    exc: ValidationError, prefix: Sequence[Any], root, fname: str, model=None
) -> ScenarioError:
    """The first of ``exc``'s errors as ``file:line: field: message (+N more errors)``. With
    ``model`` (the pydantic model that was validated), an unknown key names the closest known
    key, or the known keys."""
    errors = exc.errors()
    err = errors[0]
    if err["type"] == "missing":  # a misspelt required key: its unknown twin says more
        err = next(
            (
                e
                for e in errors
                if e["type"] == "extra_forbidden" and tuple(e["loc"][:-1]) == tuple(err["loc"][:-1])
            ),
            err,
        )
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
        key, at = str(err["loc"][-1]), err["loc"][:-1]
        hint = suggestion(key, known_keys(model, at)) if model is not None else ""
        msg += f"; {hint}" if hint else ""
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
    return ScenarioError(f"{where(fname, root, loc)}: {msg}{tail}")


def quoted(root, loc) -> bool:
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


def child(node, tok):
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if k.value == str(tok):
                return v
    elif isinstance(node, yaml.SequenceNode) and isinstance(tok, int) and tok < len(node.value):
        return node.value[tok]
    return None


def node_at(node, tokens):
    for tok in tokens:
        if node is None:
            return None
        node = child(node, tok)
    return node


def node_set(node, tokens, value_node):
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
                new.value[i] = (k, node_set(v, rest, value_node))
                return new
        key = yaml.ScalarNode("tag:yaml.org,2002:str", str(tok), value_node.start_mark)
        filler = yaml.MappingNode("tag:yaml.org,2002:map", [], value_node.start_mark)
        new.value.append((key, node_set(filler, rest, value_node) if rest else value_node))
        return new
    if isinstance(node, yaml.SequenceNode) and isinstance(tok, int) and tok < len(node.value):
        new.value = list(node.value)
        new.value[tok] = node_set(node.value[tok], rest, value_node)
        return new
    return node
