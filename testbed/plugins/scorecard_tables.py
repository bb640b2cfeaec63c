"""The scorecard's "What leaks, to whom" section (:mod:`testbed.plugins.scorecard` writes the
rest): the leak sentence, the coalitions, the per-threat-model table and the copies in
disguise."""

from __future__ import annotations

from typing import Any

__all__ = ["defended_by", "leak_tables"]


def leak_tables(doc, card, fmt) -> None:
    """What leaks, to whom: the leak and inference lines, the per-threat-model table and the
    copies in disguise."""
    doc.h(2, "What leaks, to whom")
    inferred = card.inferences()
    doc.p(
        "Leaks of a party's data: "
        + card.leak_sentence()
        + " A reconstruction counts as a record leak only when it is closer to the party's rows "
        "than to population rows (rows of the same distribution that no party holds; permutation "
        "test at 5 %); a copy in disguise (scaled, noised, permuted, rotated, affinely mapped, or "
        "fixed by released moments) counts as sent rows."
    )
    if inferred:
        doc.p("Distributional inference only (no record leak): " + "; ".join(inferred) + ".")
    coalitions = [t for t in card.threats if t["colluders"] and "messages" in t]
    if coalitions:
        seen = "; ".join(
            f"{t['label']} sees {t['messages']} message(s)"
            + (f", the same as {', '.join(t['same_messages_as'])}" if t["same_messages_as"] else "")
            for t in coalitions
        )
        doc.p(
            f"Coalitions: {seen}. A coalition's rows are scored against the best prior-only "
            "baseline among its members, and it scores at least what each member scores alone; "
            "it scores above them only with a better reconstruction of its own (more messages, "
            "or one member's data combined with the messages another sees)."
        )
    doc.table(
        [
            "threat model",
            "copies of private rows (as sent / in disguise)",
            "most telling attack",
            "target",
            "verdict",
            "figure",
            "baseline",
        ],
        [
            [
                t,
                f"{w['near_copy_messages']} / {w['disguised_copies']} ({', '.join(w['rows_of'])})"
                if w["near_copy_messages"] or w["disguised_copies"]
                else "none",
                w["attack"] or "no output",
                w["target"] or "-",
                w["verdict"] or "-",
                "-" if w["value"] is None else f"{w['metric']} {fmt(w['value'])}",
                w["baseline"] or "-",
            ]
            for t, w in card.worst().items()
        ],
    )
    doc.h(3, "Private rows in disguise (transform undone, or moments inverted)")
    doc.table(
        ["threat model", "message", "whose rows", "how", "defended by"],
        [
            [t, f"#{f['seq']} {f['kind']}", f["party"], f["transform"], defended_by([f])]
            for t, fs in card.disguised.items()
            for f in fs
        ]
        or [["-", "none", "-", "-", "-"]],
    )


def defended_by(findings: list[dict[str, Any]]) -> str:
    """The defenses that acted on the findings' messages, in order of first appearance; "-"
    when none did."""
    names = dict.fromkeys(d for f in findings for d in f.get("defended_by", []))
    return ", ".join(names) or "-"
