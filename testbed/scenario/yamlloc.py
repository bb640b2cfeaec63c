"""Where in a scenario file a field is: YAML line numbers and dotted field names for errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

__all__ = ["fmt_loc", "line_of", "where"]


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
