"""The HTML writer: a :class:`~testbed.report.doc.Doc`'s parts as one self-contained page, plotly's
JavaScript inlined once (no network request), wide tables scrolling inside their own box."""

from __future__ import annotations

import base64
import html
import re
from typing import Any

__all__ = ["CSS", "render_html", "selector_html", "table_html"]

#: the page's style sheet (inline: the file asks no server)
CSS = (
    "body{font-family:sans-serif;max-width:1340px;margin:0.6em auto;padding:0 1em;"
    "color:#222}h1{font-size:1.35em;margin:0.2em 0}.runinfo{font-size:0.8em;color:#555;"
    "margin:0.2em 0 0.5em}.headline{display:flex;gap:1em;align-items:flex-start}"
    ".headline>.headline-text{flex:0 0 50%;max-width:50%}.headline>.plot{flex:1 1 0;"
    "min-width:0}.headline table{font-size:0.76em;margin:0.3em 0;width:100%;"
    "table-layout:fixed}.headline td{overflow-wrap:normal;word-break:normal;hyphens:none}"
    # a setting name with no punctuation to wrap after breaks anywhere rather than spill over
    # the next column of the headline's fixed-layout table
    ".setting{display:inline}.headline td .setting{overflow-wrap:anywhere}"
    ".nowrap{white-space:nowrap}"
    ".headline td,.headline th{vertical-align:top}.headline small{color:#555}"
    "td.none{color:#999}.hit{background:#c8f0c8;font-weight:bold;padding:0 3px}"
    ".miss{color:#777;padding:0 3px}details summary{cursor:pointer}"
    "table.coverage td{vertical-align:top;max-width:300px}"
    "table.coverage pre{white-space:pre-wrap;font-size:0.75em;max-width:600px}"
    ".verdict{font-size:0.88em;margin:0.25em 0}.verdict b{color:#8b1a1a}"
    ".population{font-size:0.82em;margin:0.25em 0;color:#333}"
    ".headline h2{font-size:1.05em;margin:0.2em 0}"
    "table{border-collapse:collapse;margin:0.6em 0 1.2em;font-size:0.85em}"
    "td,th{border:1px solid #ccc;padding:3px 7px;text-align:left}th{background:#f2f2f2}"
    "pre{background:#f7f7f7;padding:0.8em;overflow-x:auto;font-size:0.8em}"
    "figure{margin:1em 0}figcaption{font-size:0.8em;color:#555}img{max-width:100%}"
    ".wide{max-width:100%;overflow-x:auto}.plot{max-width:100%}"
    # two figures or tables to a row (Doc.grid): the page half as tall at 1400 px
    ".grid2{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:0 1em;"
    "align-items:start}.grid2>*{min-width:0}.grid2 figure{margin:0.4em 0}"
    ".selector select{max-width:100%}table.records td{vertical-align:middle}"
)


_HEAD_BREAK = re.compile(r"([._\[])")


def table_html(header: list[Any], rows: list[list[Any]]) -> str:
    """A table; column names may wrap after ``.``, ``_`` and ``[`` (long metric names); a table
    still too wide scrolls inside its own box, never the page."""
    e = html.escape
    th = "".join("<th>" + _HEAD_BREAK.sub(r"\1<wbr>", e(str(h))) + "</th>" for h in header)
    trs = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return (
        f'<div class="wide"><table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table></div>'
    )


#: the drop-down's script: show the block whose index is picked, hide the others
_PICK = (
    "for(const d of this.closest('.selector').querySelectorAll(':scope>.sel-item'))"
    "d.hidden=d.dataset.i!==this.value"
)


def selector_html(label: str, options: list[tuple[str, str, list, list[list[Any]]]]) -> str:
    """One block at a time of near-identical ones (``(name, sentence, header, rows)``), picked
    in a drop-down: the page is as tall as one of them."""
    e = html.escape
    opts = "".join(f'<option value="{i}">{e(o[0])}</option>' for i, o in enumerate(options))
    items = "".join(
        f'<div class="sel-item" data-i="{i}"{" hidden" if i else ""}>'
        + (f"<p>{e(text)}</p>" if text else "")
        + (table_html(header, rows) if rows else "")
        + "</div>"
        for i, (_, text, header, rows) in enumerate(options)
    )
    return (
        f'<div class="selector"><label>{e(label)} <select onchange="{e(_PICK)}">{opts}'
        f"</select></label> <small>({len(options)} in all)</small>{items}</div>"
    )


#: characters of a figure title per line at half the page's width
_HALF_TITLE = 62


def _wrap_title(fig) -> None:
    """Break a figure's title into lines that fit half the page (plotly never wraps one: it
    was cut at the figure's edge), with room above the plot for them."""
    title = fig.layout.title.text
    if not title or "<br>" in title or len(title) <= _HALF_TITLE:
        return
    lines, line = [], ""
    for word in title.split(" "):
        if line and len(line) + 1 + len(word) > _HALF_TITLE:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    top = (fig.layout.margin.t if fig.layout.margin.t is not None else 80) + 14 * (len(lines) - 1)
    fig.update_layout(title_text="<br>".join(lines), margin_t=top)


def render_html(parts: list[tuple[str, Any]], title: str) -> str:
    """The parts of a :class:`~testbed.report.doc.Doc` as one self-contained HTML page."""
    e = html.escape
    body = []
    half = False  # inside a grid: figures at half the width, their titles wrapped
    for kind, v in parts:
        if kind == "grid":
            half = v
            body.append('<div class="grid2">' if v else "</div>")
        elif kind == "h":
            lvl, text = v
            body.append(f"<h{lvl}>{e(text)}</h{lvl}>")
        elif kind == "p":
            body.append(f"<p>{e(v)}</p>")
        elif kind == "pre":
            body.append(f"<pre>{e(v)}</pre>")
        elif kind == "raw":
            body.append(v[0])
        elif kind == "plot":
            name, _png, fig, alt = v
            if half:
                _wrap_title(fig)
            div = fig.to_html(
                full_html=False,
                include_plotlyjs=False,
                div_id="plot-" + name,
                config={"displaylogo": False, "responsive": True},
            )
            body.append(f'<figure class="plot">{div}<figcaption>{e(alt)}</figcaption></figure>')
        elif kind == "img":
            name, png, alt = v
            b64 = base64.b64encode(png).decode()
            body.append(
                f'<figure><img alt="{e(alt)}" src="data:image/png;base64,{b64}">'
                f"<figcaption>{e(alt)}</figcaption></figure>"
            )
        elif kind == "table":
            body.append(table_html(*v))
        elif kind == "select":
            body.append(selector_html(*v))
        elif kind == "foldpre":
            body.append(f"<details><summary>{e(v[0])}</summary><pre>{e(v[1])}</pre></details>")
        elif kind == "fold":
            summary, header, rows = v
            body.append(
                f"<details><summary>{e(summary)}</summary>{table_html(header, rows)}</details>"
            )
    script = ""
    if any(kind == "plot" for kind, _ in parts):
        from plotly.offline import get_plotlyjs  # plotly: only when a figure is drawn

        # the library once per page, inline: the file works offline and asks no server
        script = f'<script type="text/javascript">{get_plotlyjs()}</script>'
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{e(title)}</title><style>{CSS}</style>{script}</head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
