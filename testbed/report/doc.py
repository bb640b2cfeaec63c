"""A report as a list of parts (headings, paragraphs, tables, plots, pre-rendered blocks), collected
once by the sections and rendered by the HTML and Markdown writers."""

from __future__ import annotations

import contextlib
from typing import Any

from testbed.report.files import safe_stem
from testbed.report.html_writer import render_html
from testbed.report.markdown_writer import render_markdown

__all__ = ["Doc"]


class Doc:
    """Collects sections once and renders them to HTML and Markdown."""

    def __init__(self):
        self.parts: list[tuple[str, Any]] = []

    def h(self, level: int, text: str):
        self.parts.append(("h", (level, text)))

    def p(self, text: str):
        self.parts.append(("p", text))

    def table(self, header: list[str], rows: list[list[Any]]):
        self.parts.append(("table", (header, rows)))

    def fold(self, summary: str, header: list[str], rows: list[list[Any]]):
        """A table folded away in the HTML (opened by clicking ``summary``), plain in Markdown."""
        self.parts.append(("fold", (summary, header, rows)))

    def selector(self, label: str, options: list[tuple[str, str, list[str], list[list[Any]]]]):
        """Near-identical blocks as one: ``options`` are ``(name, sentence, header, rows)``; the
        HTML shows one at a time, picked in a drop-down named ``label``; the Markdown lists
        every sentence and one table of every option's rows, the option's name first."""
        self.parts.append(("select", (label, options)))

    def fold_pre(self, summary: str, text: str):
        """Preformatted text folded away in the HTML (opened by clicking ``summary``), plain in
        Markdown."""
        self.parts.append(("foldpre", (summary, text)))

    def img(self, name: str, png: bytes, alt: str):
        stem, dot, ext = name.rpartition(".")
        name = f"{safe_stem(stem)}.{ext}" if dot else safe_stem(name)
        self.parts.append(("img", (name, png, alt)))

    def pre(self, text: str):
        self.parts.append(("pre", text))

    def static(self, stem: str, files: dict[str, bytes]):
        """A static figure written to plots/ only (``files``: extension -> bytes, e.g. png, pdf,
        svg); its HTML and Markdown come with another part."""
        self.parts.append(("static", (safe_stem(stem), files)))

    def plot(self, stem: str, files: dict[str, bytes], fig, alt: str):
        """An interactive plotly figure in the HTML; its static twin (``files``: extension ->
        bytes) in plots/``stem``.*, the PNG shown in the Markdown."""
        self.parts.append(("plot", (safe_stem(stem), files, fig, alt)))

    def raw(self, html_text: str, markdown: str):
        """Pre-rendered HTML (already escaped) with its Markdown counterpart."""
        self.parts.append(("raw", (html_text, markdown)))

    @contextlib.contextmanager
    def grid(self):
        """The parts added inside sit two to a row in the HTML (figures and tables at half the
        width: the page half as tall); the Markdown is unchanged."""
        self.parts.append(("grid", True))
        yield
        self.parts.append(("grid", False))

    def html(self, title: str) -> str:
        return render_html(self.parts, title)

    def markdown(self) -> str:
        return render_markdown(self.parts)

    def files(self) -> dict[str, bytes]:
        """plots/ file name -> bytes of every static figure the parts carry."""
        out = {}
        for kind, v in self.parts:
            if kind == "img":
                out[v[0]] = v[1]
            elif kind in ("plot", "static"):
                out.update({f"{v[0]}.{ext}": data for ext, data in (v[1] or {}).items()})
        return out
