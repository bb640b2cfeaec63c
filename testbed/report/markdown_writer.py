"""The Markdown writer: a :class:`~testbed.report.doc.Doc`'s parts as ``report.md``, every value
escaped so that no cell can open a block, a link or raw HTML; plots link to ``plots/*.png``."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

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
    return quote(name)


def table_md(header: list[Any], rows: list[list[Any]]) -> str:
    """A Markdown table, every cell escaped."""
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows])


def _fenced(text: str) -> str:
    """Preformatted text in a fence longer than any backtick run in it: no way out."""
    fence = "`" * max(3, 1 + max(map(len, re.findall("`+", text)), default=0))
    return f"{fence}\n{text.rstrip()}\n{fence}"


def _options_md(label: str, options: list) -> str:
    """A drop-down's options in Markdown: each option's sentence, then one table of all their
    rows with the option's name first (one table per option when their columns differ)."""
    lines = [f"- {md_escape(name)}: {md_escape(text)}" for name, text, _, _ in options if text]
    headers = {tuple(h) for _, _, h, rows in options if rows}
    if len(headers) == 1:
        (header,) = headers
        rows = [[name, *r] for name, _, _, rs in options for r in rs]
        tables = [table_md([label, *header], rows)]
    else:
        tables = [f"{md_escape(n)}:\n\n{table_md(h, rs)}" for n, _, h, rs in options if rs]
    return "\n\n".join(["\n".join(lines), *tables] if lines else tables)


def render_markdown(parts: list[tuple[str, Any]]) -> str:
    """The parts of a :class:`~testbed.report.doc.Doc` as Markdown (plots as links to plots/)."""
    out = []
    for kind, v in parts:
        if kind == "h":
            out.append("#" * v[0] + " " + md_escape(v[1]))
        elif kind == "p":
            out.append(md_escape(v))
        elif kind == "pre":
            out.append(_fenced(v))
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
        elif kind == "foldpre":
            out.append(md_escape(v[0]) + ":\n\n" + _fenced(v[1]))
        elif kind == "select":
            out.append(_options_md(*v))
    return "\n\n".join(out) + "\n"
