"""The Markdown writer: a :class:`~testbed.report.doc.Doc`'s parts as ``report.md``, every value
escaped so that no cell can open a block, a link or raw HTML; plots link to ``plots/*.png``."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["md_escape", "md_path", "render_markdown", "table_md"]

_MD_SPECIAL = re.compile(r"([\\`*\[\]|#])")


def md_escape(x: Any) -> str:
    """Text for report.md: one line (a value cannot start a block), HTML characters as entities
    and Markdown punctuation backslash-escaped (no raw HTML, link, image or table break)."""
    text = " ".join(str(x).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_path(name: str) -> str:
    """A plot file name inside a Markdown link target."""
    from urllib.parse import quote

    return quote(name)


def table_md(header: list[Any], rows: list[list[Any]]) -> str:
    """A Markdown table, every cell escaped."""
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows])


def render_markdown(parts: list[tuple[str, Any]]) -> str:
    """The parts of a :class:`~testbed.report.doc.Doc` as Markdown (plots as links to plots/)."""
    out = []
    for kind, v in parts:
        if kind == "h":
            out.append("#" * v[0] + " " + md_escape(v[1]))
        elif kind == "p":
            out.append(md_escape(v))
        elif kind == "pre":  # a fence longer than any backtick run in the text: no way out
            fence = "`" * max(3, 1 + max(map(len, re.findall("`+", v)), default=0))
            out.append(f"{fence}\n{v.rstrip()}\n{fence}")
        elif kind == "img":
            out.append(f"![{md_escape(v[2])}](plots/{md_path(v[0])})")
        elif kind == "plot":
            out.append(
                f"![{md_escape(v[3])}](plots/{md_path(v[0] + '.png')})"
                if "png" in (v[1] or {})
                else f"*{md_escape(v[3])}* (interactive, in report.html)"
            )
        elif kind == "raw":
            out.append(v[1])
        elif kind == "table":
            out.append(table_md(*v))
        elif kind == "fold":
            out.append(f"{md_escape(v[0])}:\n\n{table_md(v[1], v[2])}")
    return "\n\n".join(out) + "\n"
