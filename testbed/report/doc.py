"""A report as a list of parts (headings, paragraphs, tables, plots, pre-rendered blocks), collected
once by the sections and rendered by the HTML and Markdown writers."""

from __future__ import annotations

from typing import Any

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

    def img(self, name: str, png: bytes, alt: str):
        self.parts.append(("img", (name, png, alt)))

    def pre(self, text: str):
        self.parts.append(("pre", text))

    def static(self, name: str, png: bytes):
        """A PNG written to plots/ only (its HTML and Markdown come with another part)."""
        self.parts.append(("static", (name, png)))

    def plot(self, name: str, png: bytes, fig, alt: str):
        """An interactive plotly figure in the HTML, the static PNG in the Markdown and plots/."""
        self.parts.append(("plot", (name, png, fig, alt)))

    def raw(self, html_text: str, markdown: str):
        """Pre-rendered HTML (already escaped) with its Markdown counterpart."""
        self.parts.append(("raw", (html_text, markdown)))

    def html(self, title: str) -> str:
        return render_html(self.parts, title)

    def markdown(self) -> str:
        return render_markdown(self.parts)

    def files(self) -> dict[str, bytes]:
        """plots/ file name -> bytes of every static figure the parts carry."""
        return {v[0]: v[1] for kind, v in self.parts if kind in ("img", "plot", "static") and v[1]}
