"""Where in a scenario file a field is: YAML line numbers and dotted field names for errors,
the one-line error of a pydantic validation error, and the composed YAML tree's navigation
(a sweep cell's tree points its swept values at the lines they were written on)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import ValidationError

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


def first_error(exc: ValidationError, prefix: Sequence[Any], root, fname: str) -> ScenarioError:
    """The first of ``exc``'s errors as ``file:line: field: message (+N more errors)``."""
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
