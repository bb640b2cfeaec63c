"""Imports sit at the top of a module (issue 49, Build 5): an import inside a function says why
on its own line, as ``# <what>: <why>`` (``# torch: DP-SGD only``), so a module's dependencies
are read at its top and each exception is visible where it is. docs/development.md has the rule:
an optional dependency, or a heavy one in a module that a light command (``--version``,
``validate``, ``plugins``, a refused bad input) reaches."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("testbed", "attacks", "defenses", "protocols")
#: a same-line comment "what: why" (not a linter's noqa / type: / pragma: directive)
REASON = re.compile(r"#\s*(?!noqa\b|type:|pragma\b)\w[\w.\- ]*:\s*\S")


def function_level_imports(source: str) -> list[tuple[int, int, str]]:
    """(first line, last line, module) of every import nested in a function body."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                if isinstance(child, ast.ImportFrom):
                    name = "." * child.level + (child.module or "")
                else:
                    name = child.names[0].name
                found.append((child.lineno, child.end_lineno or child.lineno, name))
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            visit(child, inner)

    visit(ast.parse(source), False)
    return found


def unexplained(source: str) -> list[tuple[int, str]]:
    """The function-level imports whose lines carry no ``# what: why`` comment."""
    lines = source.splitlines()
    return [
        (first, name)
        for first, last, name in function_level_imports(source)
        if not any(REASON.search(line) for line in lines[first - 1 : last])
    ]


def test_every_import_inside_a_function_says_why():
    missing = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for pkg in PACKAGES
        for path in sorted((ROOT / pkg).rglob("*.py"))
        for line, name in unexplained(path.read_text())
    ]
    assert not missing, (
        "imports inside functions without a '# what: why' comment on their line (move them to "
        "the top, or say why they stay, docs/development.md):\n" + "\n".join(missing)
    )


def test_the_check_reads_nested_imports_and_their_comments():
    source = (
        "import os\n"
        "def f():\n"
        "    import json\n"
        "    if os:\n"
        "        from torch import nn  # torch: DP-SGD only\n"
        "    from ot import (\n"
        "        emd,  # ot: validate reads this module\n"
        "    )\n"
        "    import yaml  # noqa: F401\n"
        "class C:\n"
        "    def m(self):\n"
        "        from . import sibling  # type: ignore\n"
    )
    assert [n for _, n in unexplained(source)] == ["json", "yaml", "."]
