"""Which records leak most: per protocol and threat, the worst attack's rows ranked from the
arrays the scorer saved (``leakage.npz``, :mod:`testbed.scoring.evidence`). A reconstruction: the
target's private rows nearest to a reconstructed point, their distance beside the coverage radius
r, and, for 8x8 digits, each row and its reconstruction as small inline pictures. A membership
attack: the candidates it scores highest and whether each is a member. Renders only."""

from __future__ import annotations

import html

import numpy as np

from testbed.report.doc import Doc
from testbed.report.fmt import fmt
from testbed.report.markdown_writer import md_escape, table_md
from testbed.report.model import ReportData, evidence_for, setting_name

__all__ = ["digit_svg", "records_section"]

#: the side in pixels of one inline 8x8 picture
PICTURE_PX = 32
#: the rows listed per attack (the scorer saves up to :data:`testbed.scoring.evidence.PAIRS`)
SHOWN = 5


def digit_svg(row, side: int) -> str:
    """A ``side`` x ``side`` image row as a small inline SVG (grey levels scaled to the row's own
    range, black = high, as sklearn's digits are drawn)."""
    v = np.asarray(row, dtype=float).reshape(side, side)
    lo, hi = float(v.min()), float(v.max())
    g = np.zeros_like(v) if hi <= lo else (v - lo) / (hi - lo)
    cells = "".join(
        f'<rect x="{x}" y="{y}" width="1" height="1" fill="rgb({c},{c},{c})"/>'
        for y in range(side)
        for x in range(side)
        if (c := int(round(255 * (1 - g[y, x])))) < 255
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {side} {side}" '
        f'width="{PICTURE_PX}" height="{PICTURE_PX}" shape-rendering="crispEdges" '
        f'style="background:#fff;border:1px solid #ccc">{cells}</svg>'
    )


def _table_html(header: list[str], rows: list[list[str]]) -> str:
    """A table whose cells are already HTML (escaped text or an inline SVG)."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    trs = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<div class="wide"><table class="records"><thead><tr>{th}</tr></thead>' + (
        f"<tbody>{trs}</tbody></table></div>"
    )


def _points_rows(ev: dict, radius: float) -> tuple[list[str], list[list], list[list]]:
    """(header, HTML rows, Markdown rows) of a reconstruction's best-recovered rows."""
    side = int(ev["image_side"]) if "image_side" in ev else 0
    header = ["rank", "row", "distance to nearest reconstruction", "distance / r", "within r"]
    header += ["private row", "reconstruction"] if side else []
    out_html, out_md = [], []
    rows = ev.get("row", np.full(len(ev["dist"]), -1))
    for i, (d, idx) in enumerate(zip(ev["dist"][:SHOWN], rows), 1):
        ratio = float(d) / radius if radius > 0 else float("nan")
        cells = [
            str(i),
            "?" if int(idx) < 0 else str(int(idx)),
            fmt(float(d)),
            fmt(ratio),
            "yes" if ratio <= 1 else "no",
        ]
        out_md.append(cells)
        pics = (
            [digit_svg(ev["orig"][i - 1], side), digit_svg(ev["recon"][i - 1], side)]
            if side
            else []
        )
        out_html.append([html.escape(c) for c in cells] + pics)
    return header, out_html, out_md


def _scores_rows(ev: dict) -> tuple[list[str], list[list], list[list]]:
    """(header, HTML rows, Markdown rows) of a membership attack's surest candidates."""
    header = ["rank", "candidate", "membership score", "member"]
    rows = [
        [str(i), str(int(c)), fmt(float(s)), "yes" if bool(m) else "no"]
        for i, (c, s, m) in enumerate(zip(ev["top_index"], ev["top_score"], ev["top_member"]), 1)
    ]
    return header, [[html.escape(c) for c in r] for r in rows], rows


def records_section(doc: Doc, data: ReportData) -> None:
    """Per protocol and threat of the worst leaks: its attack's rows that leak most."""
    blocks = []
    for (s, threat), b in sorted(data.best.items()):
        if b["kind"] not in ("points", "scores"):
            continue
        ev = evidence_for(data.run_dir, data.rows, b)
        if not ev:
            continue
        if b["kind"] == "points" and "dist" in ev:
            radius = data.agg[b["key"]].get(f"{b['attack']}[{b['target']}].coverage_r")
            r = float(radius[0]) if radius else float("nan")
            header, rows_html, rows_md = _points_rows(ev, r)
            how = f"distance to the nearest reconstructed point; r = {fmt(r)} (coverage radius)"
        elif b["kind"] == "scores" and "top_index" in ev:
            header, rows_html, rows_md = _scores_rows(ev)
            how = "the candidates the attack scores highest, and whether each is a member"
        else:
            continue
        who = (
            f"{s}, {threat}: {b['attack']}, {b['observer']} → {b['target']}, "
            f"{setting_name(b['key'][1])}, seed {ev['seed']}; {how}"
        )
        blocks.append((who, header, rows_html, rows_md))
    if not blocks:
        return
    doc.h(2, "Records that leak most")
    with doc.grid():  # two attacks' tables to a row
        for who, header, rows_html, rows_md in blocks:
            doc.raw(
                f'<div><p class="runinfo">{html.escape(who)}</p>'
                + _table_html(header, rows_html)
                + "</div>",
                md_escape(who) + "\n\n" + table_md(header[: len(rows_md[0])], rows_md),
            )
