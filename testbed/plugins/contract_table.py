"""The plugin contract as a table, generated from the base classes (docs/guide/plugins.md, "The
contract"): every member a plugin of each kind may define, with its default and what it is
for — the declarations :mod:`testbed.contract` checks plugin classes against."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap

import testbed.api as api
from testbed.contract import declared_hooks
from testbed.registry import ATTACKS, DATASETS, DEFENSES, PARTITIONERS, PROTOCOLS, TRANSFORMS

__all__ = ["api_reference", "contract_table", "first_para", "members"]

#: names of every base that are the testbed's machinery, not something a plugin defines
_NOT_HOOKS = {"from_params", "describe", "marked", "config"}


def _comments(cls: type) -> dict[str, str]:
    """Attribute name -> its ``#:`` comment in the class body where ``cls`` is defined."""
    try:
        src = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = src.splitlines()
    out = {}
    for node in ast.parse(src).body[0].body:
        target = None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target = node.target.id
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
        if target is None:
            continue
        above, i = [], node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#:"):
            above.insert(0, lines[i].strip()[2:].strip())
            i -= 1
        out[target] = " ".join(above)
    return out


#: what the members every plugin has are for (attributes of :class:`testbed.registry.Plugin`)
_PLUGIN_DOCS = {
    "Config": "the pydantic model of its ``params`` (a :class:`~testbed.api.PluginConfig`)",
    "name": "its name in scenarios (set from the entry point's name when it registers)",
}


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    m = re.search(r"\.\s+(?=[A-Z`])", text)
    return text if m is None else text[: m.start() + 1]


def members(base: type) -> list[dict[str, str]]:
    """Every hook of ``base``: name, what it is (attribute, method, classmethod), default, what
    for."""
    comments: dict[str, str] = {}
    for klass in reversed(base.__mro__):
        comments.update(_comments(klass))
    out = []
    for name in sorted(declared_hooks(base) - _NOT_HOOKS):
        raw = inspect.getattr_static(base, name)
        if isinstance(raw, classmethod):
            what, doc, default = "classmethod", raw.__func__.__doc__, ""
        elif callable(raw) and not isinstance(raw, type):
            abstract = getattr(raw, "__isabstractmethod__", False)
            what, doc, default = "method", raw.__doc__, "required" if abstract else ""
        else:
            doc = comments.get(name) or _PLUGIN_DOCS.get(name, "")
            what, default = "attribute", repr(raw)
            if isinstance(raw, type):
                default = raw.__name__
        out.append(
            {"name": name, "what": what, "default": default, "doc": _first_sentence(doc or "")}
        )
    return out


def contract_table() -> str:
    """One table per plugin kind: the members its base class declares."""
    parts = []
    for reg in (PROTOCOLS, ATTACKS, DEFENSES, DATASETS, PARTITIONERS, TRANSFORMS):
        base = reg.base()
        parts.append(f"**{reg.kind}** (`{base.__module__.split('._')[0]}.{base.__qualname__}`)\n")
        parts.append("| member | kind | default | what it is for |")
        parts.append("|---|---|---|---|")
        for m in members(base):
            default = (
                f"`{m['default']}`" if m["default"] and m["default"] != "required" else m["default"]
            )
            doc = m["doc"].replace("|", "\\|")
            parts.append(f"| `{m['name']}` | {m['what']} | {default} | {doc} |")
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def _signature(obj) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""
    return sig.replace("'", "")


def _api_members(cls: type) -> list[str]:
    """Rows for the public methods and properties ``cls`` defines beyond ``object``, its
    dataclass fields included."""
    rows = []
    fields = getattr(cls, "__dataclass_fields__", {})
    for name in fields:
        if not name.startswith("_"):
            rows.append(f"  - `{name}` (field)")
    for name, raw in sorted(vars(cls).items()):
        if name.startswith("_") or name in fields:
            continue
        if isinstance(raw, property):
            doc = _first_sentence(inspect.cleandoc(raw.__doc__ or ""))
            rows.append(f"  - `{name}` (property){': ' + doc if doc else ''}")
        elif isinstance(raw, (classmethod, staticmethod)) or inspect.isfunction(raw):
            fn = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
            doc = _first_sentence(inspect.cleandoc(fn.__doc__ or ""))
            rows.append(f"  - `{name}{_signature(fn)}`{': ' + doc if doc else ''}")
    return rows


def api_reference() -> str:
    """docs/reference/api.md's body: every name of :mod:`testbed.api`, what it is, its signature and the
    first paragraph of its docstring; for the classes a plugin receives (not the base classes,
    which docs/guide/plugins.md's contract table lists), their fields and methods."""
    bases = {reg.base() for reg in (PROTOCOLS, ATTACKS, DEFENSES, DATASETS, PARTITIONERS)}
    out = []
    for name in api.__all__:
        obj = getattr(api, name)
        home = getattr(obj, "__module__", None) or api._EXPORTS[name]
        if isinstance(obj, type):
            what = "base class" if obj in bases else "class"
            head = f"### `{name}` ({what}, from `{home}`)"
            doc = first_para(obj.__doc__)
            out += [head, "", doc, ""] if doc else [head, ""]
            if obj not in bases:
                rows = _api_members(obj)
                if rows:
                    out += [*rows, ""]
        elif callable(obj):
            out += [f"### `{name}{_signature(obj)}` (function, from `{home}`)", ""]
            doc = first_para(obj.__doc__)
            out += [doc, ""] if doc else []
        else:
            out += [f"### `{name}` (constant, from `{api._EXPORTS[name]}`)", "", f"`{obj!r}`", ""]
    return "\n".join(out).rstrip() + "\n"


def first_para(doc: str | None) -> str:
    text = inspect.cleandoc(doc or "")
    return " ".join(text.split("\n\n", 1)[0].split())
