"""The plugin reference, read from the registries so that it cannot drift from the code.

:func:`describe` is what ``testbed plugins NAME`` prints (``--json``: the same record): a
plugin's kind, its description (the first paragraph of its class docstring), its parameters
(type, default, constraints and description, from the fields of its pydantic ``Config``) and
what it applies to (protocols, threat models, message kinds).

The plugin tables of docs/reference/attacks.md, docs/reference/protocols.md and docs/guide/scenarios.md (defenses), and
protocols.md's "what each
observer sees" tables (:mod:`testbed.plugins.observers`), are written by this module between
marker comments::

    <!-- generated: attacks -->
    ...
    <!-- end generated -->

``python -m testbed.plugins.reference`` rewrites them; ``--check`` exits 1 naming each stale
block, and tests/test_plugin_reference.py fails the same way, so a plugin added, renamed or
re-documented without regenerating fails the default test suite. Only built-in plugins
(:data:`testbed.registry.BUILTIN`) enter the docs: an installed third-party package never
changes them.
"""

from __future__ import annotations

import difflib
import inspect
import json
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic_core import to_jsonable_python

from testbed.errors import TestbedError, UnknownPluginError
from testbed.plugins.contract_table import api_reference, contract_table
from testbed.plugins.observers import observer_tables
from testbed.registry import (
    ATTACKS,
    BUILTIN,
    DATASETS,
    DEFENSES,
    PARTITIONERS,
    PROTOCOLS,
    TRANSFORMS,
    Registry,
)

__all__ = [
    "REGISTRIES",
    "THREAT_MODELS",
    "describe",
    "find",
    "first_paragraph",
    "generated_blocks",
    "params_of",
    "render_text",
    "stale_blocks",
    "update_docs",
]

#: kind -> registry, in the order ``testbed plugins`` lists them
REGISTRIES: dict[str, Registry] = {
    "protocol": PROTOCOLS,
    "attack": ATTACKS,
    "defense": DEFENSES,
    "dataset": DATASETS,
    "partitioner": PARTITIONERS,
    "transform": TRANSFORMS,
}

#: the observers an attack may run as (``threat_model.observer``), as the scorecard runs them
THREAT_MODELS = (
    "server",
    "each party",
    "eavesdropper (every message)",
    "coalitions (observer + colluders)",
)

_BEGIN = re.compile(r"<!-- generated: ([a-z_]+) -->\n")
_END = "<!-- end generated -->"


# ------------------------------------------------------------------ one plugin
def first_paragraph(doc: str | None) -> str:
    """The first paragraph of a docstring, its lines joined by single spaces."""
    text = inspect.cleandoc(doc or "")
    para = text.split("\n\n", 1)[0]
    return " ".join(para.split())


def _type_name(t: Any) -> str:
    """A readable name for a parameter's annotation: ``list[str] | None``, ``"a" | "b"``."""
    if t is type(None):
        return "None"
    origin, args = get_origin(t), get_args(t)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin is Union or origin is types.UnionType:
        return " | ".join(_type_name(a) for a in args)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", None) or repr(origin).replace("typing.", "")
        return f"{name}[{', '.join(_type_name(a) for a in args)}]" if args else name
    if isinstance(t, type):
        return t.__name__
    return repr(t).replace("typing.", "")


_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", "min length"))


def _constraints(field) -> list[str]:
    out = []
    for m in field.metadata:
        for attr, sign in _BOUNDS:
            v = getattr(m, attr, None)
            if v is not None:
                out.append(f"{sign} {v}")
    return out


def params_of(config: type) -> list[dict[str, Any]]:
    """One record per field of a plugin's ``Config``: ``name``, ``type``, ``required``,
    ``default`` (JSON; absent when required), ``constraints`` and ``description``."""
    out = []
    for name, f in config.model_fields.items():
        rec: dict[str, Any] = {"name": name, "type": _type_name(f.annotation)}
        rec["required"] = f.is_required()
        if not rec["required"]:
            rec["default"] = to_jsonable_python(f.get_default(call_default_factory=True))
        rec["constraints"] = _constraints(f)
        rec["description"] = " ".join((f.description or "").split())
        out.append(rec)
    return out


def find(name: str) -> list[tuple[str, type]]:
    """``(kind, class)`` of every registered plugin called ``name`` (built-in or installed);
    :class:`UnknownPluginError` with the closest names when there is none."""
    hits = [(kind, reg.get(name)) for kind, reg in REGISTRIES.items() if name in reg.names()]
    if hits:
        return hits
    known = sorted({n for reg in REGISTRIES.values() for n in reg.names()})
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = (
        f"did you mean {' or '.join(repr(c) for c in close)}?"
        if close
        else "`testbed plugins` lists every name"
    )
    raise UnknownPluginError(f"unknown plugin {name!r}; {hint}")


def _protocols_of(applies: Callable[[str], bool]) -> list[str]:
    return [p for p in sorted(BUILTIN["protocol"]) if applies(p)]


def _attack_applies(cls) -> Callable[[str], bool]:
    try:
        inst = cls(cls.Config())
    except Exception:  # a default config that does not build: the declared protocols say it
        return lambda p: "*" in cls.protocols or p in cls.protocols
    return inst.applies_to


def _applies(kind: str, cls) -> dict[str, Any]:
    """What a plugin applies to, by kind (empty for data plugins)."""
    if kind == "attack":
        return {
            "protocols": "any" if "*" in cls.protocols else list(cls.protocols),
            "built_in_protocols": _protocols_of(_attack_applies(cls)),
            "threat_models": list(THREAT_MODELS),
            "outputs": list(cls.output_kinds),
        }
    if kind == "defense":
        return {
            "protocols": "any" if "*" in cls.protocols else list(cls.protocols),
            "built_in_protocols": _protocols_of(cls.applies_to_protocol),
            "acts_on": "messages" if cls.changes_messages else "protocol parameters (a knob)",
        }
    if kind == "protocol":
        attacks = [
            a for a in sorted(BUILTIN["attack"]) if _attack_applies(ATTACKS.get(a))(cls.name)
        ]
        defenses = [
            d for d in sorted(BUILTIN["defense"]) if DEFENSES.get(d).applies_to_protocol(cls.name)
        ]
        return {
            "message_kinds": list(cls.message_kinds),
            "parties": {"min": cls.min_parties, "max": cls.max_parties},
            "observers": ["server", "each party", "eavesdropper"],
            "attacks": attacks,
            "defenses": defenses,
        }
    return {}


def describe(name: str) -> list[dict[str, Any]]:
    """The reference record of every plugin called ``name`` (usually one)."""
    out = []
    for kind, cls in find(name):
        out.append(
            {
                "name": name,
                "kind": kind,
                "class": f"{cls.__module__}.{cls.__qualname__}",
                "description": first_paragraph(cls.__doc__),
                "params": params_of(cls.Config),
                "applies_to": _applies(kind, cls),
            }
        )
    return out


def _default_text(p: dict[str, Any]) -> str:
    return "required" if p["required"] else json.dumps(p["default"], ensure_ascii=False)


def render_text(rec: dict[str, Any]) -> str:
    """``testbed plugins NAME``'s text for one record."""
    lines = [f"{rec['name']} ({rec['kind']}, {rec['class']})", f"  {rec['description']}"]
    lines.append("parameters:" if rec["params"] else "parameters: none")
    for p in rec["params"]:
        bounds = f", {', '.join(p['constraints'])}" if p["constraints"] else ""
        lines.append(f"  {p['name']}: {p['type']} = {_default_text(p)}{bounds}")
        if p["description"]:
            lines.append(f"      {p['description']}")
    for key, value in rec["applies_to"].items():
        if isinstance(value, list):
            value = ", ".join(value) or "(none)"
        elif isinstance(value, dict):
            value = ", ".join(f"{k} {'no limit' if v is None else v}" for k, v in value.items())
        lines.append(f"{key.replace('_', ' ')}: {value}")
    return "\n".join(lines)


# ------------------------------------------------------------------ the docs' tables
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _keys_cell(params: list[dict[str, Any]]) -> str:
    if not params:
        return "—"
    return "<br>".join(f"`{p['name']}` = `{_default_text(p)}`" for p in params)


def _attacks_table() -> str:
    rows = [
        "| attack | protocols | output | parameters (default) | what it does |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(BUILTIN["attack"]):
        (rec,) = describe_kind("attack", name)
        ap = rec["applies_to"]
        protos = "any" if ap["protocols"] == "any" else ", ".join(f"`{p}`" for p in ap["protocols"])
        rows.append(
            f"| `{name}` | {protos} | {', '.join(ap['outputs'])} | "
            f"{_cell(_keys_cell(rec['params']))} | {_cell(rec['description'])} |"
        )
    return "\n".join(rows)


def _defenses_table() -> str:
    rows = [
        "| defense | protocols | acts on | parameters (default) | what it does |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(BUILTIN["defense"]):
        (rec,) = describe_kind("defense", name)
        ap = rec["applies_to"]
        protos = "any" if ap["protocols"] == "any" else ", ".join(f"`{p}`" for p in ap["protocols"])
        rows.append(
            f"| `{name}` | {protos} | {ap['acts_on']} | {_cell(_keys_cell(rec['params']))} | "
            f"{_cell(rec['description'])} |"
        )
    return "\n".join(rows)


def _protocols_table() -> str:
    rows = [
        "| protocol | parties | message kinds | attacks that apply | what it does |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(BUILTIN["protocol"]):
        (rec,) = describe_kind("protocol", name)
        ap = rec["applies_to"]
        lo, hi = ap["parties"]["min"], ap["parties"]["max"]
        parties = f"{lo}+" if hi is None else (f"{lo}" if lo == hi else f"{lo}–{hi}")
        kinds = "<br>".join(f"`{k}`" for k in ap["message_kinds"]) or "—"
        attacks = ", ".join(f"`{a}`" for a in ap["attacks"]) or "—"
        rows.append(f"| `{name}` | {parties} | {kinds} | {attacks} | {_cell(rec['description'])} |")
    return "\n".join(rows)


def _protocol_params() -> str:
    """One line per protocol: its parameters with their defaults."""
    out = []
    for name in sorted(BUILTIN["protocol"]):
        (rec,) = describe_kind("protocol", name)
        keys = ", ".join(f"`{p['name']}` = `{_default_text(p)}`" for p in rec["params"])
        out.append(f"- `{name}`: {keys or 'no parameters'}")
    return "\n".join(out)


def describe_kind(kind: str, name: str) -> list[dict[str, Any]]:
    """:func:`describe` restricted to one kind (a name may exist in several)."""
    return [r for r in describe(name) if r["kind"] == kind]


def generated_blocks() -> dict[str, Callable[[], str]]:
    """Block name (the marker's) -> the function that renders it."""
    return {
        "attacks": _attacks_table,
        "defenses": _defenses_table,
        "protocols": _protocols_table,
        "protocol_params": _protocol_params,
        "observers": observer_tables,
        "contract": contract_table,
        "api": api_reference,
    }


#: the docs pages that hold generated blocks, relative to the checkout's root
DOC_PAGES = (
    "docs/reference/api.md",
    "docs/reference/attacks.md",
    "docs/guide/plugins.md",
    "docs/reference/protocols.md",
    "docs/guide/scenarios.md",
)


def _replace(text: str, where: str, render: dict[str, str]) -> str:
    out, pos = [], 0
    for m in _BEGIN.finditer(text):
        end = text.find(_END, m.end())
        if end < 0:
            raise TestbedError(f"{where}: '<!-- generated: {m.group(1)} -->' has no '{_END}'")
        if m.group(1) not in render:
            raise TestbedError(
                f"{where}: unknown generated block {m.group(1)!r}; known: {', '.join(render)}"
            )
        out += [text[pos : m.end()], render[m.group(1)], "\n"]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _rendered(root: Path) -> dict[str, tuple[str, str]]:
    """page -> (its text, its text with every block regenerated)."""
    names = set()
    texts = {}
    for page in DOC_PAGES:
        texts[page] = (root / page).read_text(encoding="utf-8")
        names |= {m.group(1) for m in _BEGIN.finditer(texts[page])}
    funcs = generated_blocks()
    render = {n: funcs[n]() for n in sorted(names) if n in funcs}
    return {p: (t, _replace(t, p, render)) for p, t in texts.items()}


def stale_blocks(root: Path) -> list[str]:
    """``page: block`` of every generated block whose committed text differs from what the
    registry gives now, and ``page: no generated blocks`` for a page without markers."""
    out = []
    for page, (old, new) in _rendered(root).items():
        if not _BEGIN.search(old):
            out.append(f"{page}: no generated blocks")
            continue
        if old != new:
            olds = dict(_blocks(old))
            for name, body in _blocks(new):
                if olds.get(name) != body:
                    out.append(f"{page}: {name}")
    return out


def _blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), text[m.end() : text.find(_END, m.end())]) for m in _BEGIN.finditer(text)]


def update_docs(root: Path) -> list[str]:
    """Rewrite every generated block of :data:`DOC_PAGES`; the pages that changed."""
    changed = []
    for page, (old, new) in _rendered(root).items():
        if old != new:
            (root / page).write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    rest = [a for a in args if a != "--check"]
    root = Path(rest[0]) if rest else Path.cwd()
    if check:
        stale = stale_blocks(root)
        for s in stale:
            print(f"stale: {s} (run `python -m testbed.plugins.reference`)")
        return 1 if stale else 0
    for page in update_docs(root):
        print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
