"""The report's tables: results per protocol, claimed vs audited epsilon and the assumptions
behind the claims, what the observer saw, protocol modes and deviations, provenance. One
function per section, each reading :class:`~testbed.report.model.ReportData` only."""

from __future__ import annotations

import math
from typing import Any

from testbed.report.doc import Doc
from testbed.report.fmt import fmt, fmt_bytes, value_ci
from testbed.report.model import (
    ANY_ATTACK,
    GROUP_PARTIES,
    HEADLINE,
    SECONDARY_ERROR,
    ReportData,
    cell_dir_of,
    claimed_eps,
    eps_groups,
    error_label,
    error_words,
    front_membership,
    missing_cell,
    natural,
    num,
    parties_label,
    point_id,
    point_of,
    series_of,
    settings_in_order,
    utility_columns,
)
from testbed.report.points import setting_label
from testbed.scoring.names import Metric
from testbed.scoring.results_schema import read_audit_rows
from testbed.scoring.vocabulary import NOT_APPLICABLE, NOT_AUDITED, claim_status

#: the status of a party's row without a claim (ε = ∞)
NO_CLAIM = f"{NOT_APPLICABLE} (no claim)"

__all__ = [
    "deviations_section",
    "epsilon_section",
    "observer_section",
    "protocol_tables",
    "provenance_section",
]


#: folded rather than in the main table: the scorer's transform-aware variants (the raw metric
#: is the column) and the unnormalised W2 figures (``leakage`` is their normalised form)
_VARIANTS = ("_similarity", "_affine", "_population", ".leakage_raw", ".w2_ratio")
#: columns per folded table: each fits a 1400 px screen (long names wrap after ``.`` and ``_``)
_FOLD_COLUMNS = 9


def protocol_tables(doc: Doc, data: ReportData) -> None:
    """Per protocol one row per setting: error, task utility (FedBary's contribution Spearman,
    detection AUC, ...), the worst leak over every attack per metric
    (transform-aware variants folded), claimed epsilon, the fronts it is on; each attack's own
    columns and the transcript sizes folded below, a few columns per table, so every table fits
    a 1400 px screen."""
    doc.h(2, "Results per protocol")
    agg, err_key, metric_keys = data.agg, data.err_key, data.metric_keys
    on_front = front_membership(data)
    main = [k for k in metric_keys if k.startswith(ANY_ATTACK + ".")] or metric_keys
    main = [k for k in main if not k.endswith(_VARIANTS)] or main
    rest = [k for k in metric_keys if k not in main]
    for s in data.protocols:
        doc.h(3, s)
        keys = [k for k in settings_in_order(agg) if k[0] == s]
        own = [r for r in data.rows if series_of(r) == s]
        sec = [SECONDARY_ERROR] if any(SECONDARY_ERROR in agg[k] for k in keys) else []
        cols = ([err_key] if err_key else []) + sec + utility_columns(agg, keys) + main
        eps = eps_groups(agg, keys)
        # this protocol's own quantity (the figures' axis names every protocol's)
        label = error_label(own, data.err_q)
        names = {err_key: error_words(label or str(err_key))}
        if sec:
            names[SECONDARY_ERROR] = error_words(_secondary_label(own) or SECONDARY_ERROR)
        shown = [names.get(c, c) for c in cols]
        doc.table(
            ["#", "setting", "seeds", *shown, *(h for h, _ in eps), _front_head(main)],
            [
                [point_id(agg, k), k[1], agg[k]["n"]]
                + [
                    value_ci(c, agg[k][c]) if c in agg[k] else missing_cell(agg[k], c)
                    for c in cols + [c for _, c in eps]
                ]
                + [", ".join(_short(m) for m in on_front.get(k, []) if m in main) or "–"]
                for k in keys
            ],
        )
        extra = [c for c in rest if any(c in agg[k] for k in keys)]
        parts = [extra[i : i + _FOLD_COLUMNS] for i in range(0, len(extra), _FOLD_COLUMNS)]
        for i, part in enumerate(parts, 1):
            of = f" {i}/{len(parts)}" if len(parts) > 1 else ""
            doc.fold(
                f"{s}: each attack's own columns{of} ({len(part)} of {len(extra)})",
                ["#", *part],
                [
                    [point_id(agg, k)]
                    + [
                        value_ci(c, agg[k][c]) if c in agg[k] else missing_cell(agg[k], c)
                        for c in part
                    ]
                    for k in keys
                ],
            )
        doc.fold(
            f"{s}: transcript sizes and every front",
            ["#", "messages", "bytes", "Pareto-optimal for"],
            [
                [point_id(agg, k)]
                + [fmt(agg[k].get(c, (math.nan,))[0]) for c in ("messages", "bytes")]
                + [", ".join(on_front.get(k, [])) or "–"]
                for k in keys
            ],
        )


def _short(column: str) -> str:
    """A worst-over-attacks column without its ``any_attack.`` prefix (the header says it)."""
    return column.removeprefix(ANY_ATTACK + ".")


def _front_head(main: list[str]) -> str:
    """The fronts column's header: it names the worst over attacks when its entries do."""
    worst = any(m.startswith(ANY_ATTACK + ".") for m in main)
    return f"Pareto-optimal for ({ANY_ATTACK}.)" if worst else "Pareto-optimal for"


def _secondary_label(rows: list[dict]) -> str | None:
    """What a ranking headline's secondary error is the relative error of (FedBary:
    ``distance_* (3 values)``), None when no row has one."""
    for r in rows:
        sec = (r["results"].get(HEADLINE) or {}).get("secondary") or {}
        if sec:
            n = len(sec.get("keys") or ())
            return str(sec.get("quantity", "?")) + (f" ({n} values)" if n > 1 else "")
    return None


def _audit_label(row: dict, seed: bool) -> str:
    """The setting ``testbed audit SWEEP`` writes into each row of a sweep's audit.json: the
    swept protocol, the setting, and the seed when the scenario lists seeds."""
    labels = row.get("labels") or {}
    parts = (
        [str((row["results"].get("protocol") or {}).get("name"))] if "protocol" in labels else []
    )
    label = setting_label(row)
    parts += [label] if label != "base" else []
    parts += [f"seed {row.get('seed')}"] if seed else []
    return ", ".join(parts) or "base"


def audit_rows(data: ReportData, row: dict) -> list[dict]:
    """The ε-audit rows (``testbed audit --out DIR``: audit.json, reconstruction checks left
    out) about one cell: those of the cell's own directory, and of a sweep's audit.json the
    rows naming that cell's setting; a single run's audit.json is its own."""
    out = []
    for path in dict.fromkeys(
        [cell_dir_of(data.run_dir, row) / "audit.json", data.run_dir / "audit.json"]
    ):
        if not path.is_file():
            continue
        found = [a for a in read_audit_rows(path) if not a.get("reconstruction")]
        if any("setting" in a for a in found):
            names = {_audit_label(row, True), _audit_label(row, False)}
            found = [a for a in found if a.get("setting") in names]
        out += found
    return out


def _epsilon_by_party(
    data: ReportData,
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(series, setting, party) -> the claim over seeds (seed-independent for a fixed mechanism;
    the largest one if not), the largest audited lower bound (an attack's ``eps_lower`` or the
    run's audit files, :func:`audit_rows`) with the audits' verdicts, delta and assumption
    checks."""
    eps_acc: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in data.rows:
        res = r["results"]
        claims = claimed_eps(res)
        audited: dict[str, float] = {}
        said: dict[str, list[str]] = {}
        for a in res.get("attacks") or []:
            if Metric.EPS_LOWER in a:
                t = a.get("target")
                audited[t] = max(audited.get(t, -math.inf), num(a[Metric.EPS_LOWER]))
        for a in audit_rows(data, r):
            t = a.get("party")
            # testbed audit's own word, when it writes one, on the claim over all rounds (a
            # per-round row judges that round's claim)
            if a.get("verdict") is not None and a.get("rounds", "all") == "all":
                said.setdefault(t, []).append(str(a["verdict"]))
            if a.get("verdict") != NOT_AUDITED and math.isfinite(num(a.get(Metric.EPS_LOWER))):
                audited[t] = max(audited.get(t, -math.inf), num(a[Metric.EPS_LOWER]))
        assum = res.get("privacy_assumptions") or []
        for p in sorted(set(claims) | set(audited) | set(said)):
            e = eps_acc.setdefault(
                (series_of(r), point_of(r), p),
                {
                    "claim": -math.inf,
                    "aud": math.nan,
                    "delta": "–",
                    "holds": [],
                    "seeds": 0,
                    "verdicts": [],
                },
            )
            e["claim"] = max(e["claim"], claims.get(p, math.inf))
            e["verdicts"] += said.get(p, [])
            if p in audited:
                e["aud"] = audited[p] if math.isnan(e["aud"]) else max(e["aud"], audited[p])
            e["delta"] = (res.get("privacy") or {}).get(p, {}).get("delta", e["delta"])
            e["holds"] += [x["holds"] for x in assum if x.get("party") in (p, "*")]
            e["seeds"] += 1
    return eps_acc


def _group_parties(entries, least: int = GROUP_PARTIES) -> list[tuple]:
    """``(series, setting, party, figures)`` entries, in order, except that ``least`` (four) or
    more parties of a setting with the same ``figures`` share one entry, where the first of them
    is, its party cell naming them (:func:`~testbed.report.model.parties_label`). ``"*"`` (an
    entry about every party) is neither folded nor counted as a party."""
    groups: dict[tuple, list] = {}
    named: dict[tuple, set] = {}  # the parties of each setting
    for series, point, p, figures in entries:
        groups.setdefault((series, point, figures), []).append(p)
        if p != "*":
            named.setdefault((series, point), set()).add(p)
    out, listed = [], set()
    for series, point, p, figures in entries:
        same = groups[(series, point, figures)]
        if len(same) >= least and all(isinstance(q, str) and q != "*" for q in same):
            if (series, point, figures) in listed:
                continue
            listed.add((series, point, figures))
            p = parties_label(same, every=len(same) == len(named[(series, point)]))
        out.append((series, point, p, figures))
    return out


def _assumption_rows(rows: list[dict]) -> list[list[Any]]:
    """Each distinct (setting, party, assumption, verdict, detail) once; four or more parties
    with the same assumption, verdict and detail in a setting share one row, where the first of
    them is (``all 100 parties (client_0 … client_99)``)."""
    # (series, setting, party, (assumption, holds, detail)), each once, in the order first seen
    entries: dict[tuple, None] = {}
    for r in rows:
        for x in r["results"].get("privacy_assumptions") or []:
            what = (x.get("assumption"), "yes" if x.get("holds") else "NO", x.get("detail", ""))
            entries.setdefault((series_of(r), point_of(r), x.get("party"), what))
    return [[series, point, p, *what] for series, point, p, what in _group_parties(entries)]


def epsilon_section(doc: Doc, data: ReportData) -> None:
    """Claimed epsilon (the ledger) beside the audited lower bound (attacks' eps_lower)."""
    doc.h(2, "Claimed vs audited ε")
    doc.p(
        "Claimed ε: the privacy ledger (defenses' Gaussian-mechanism events composed by opacus's "
        "RDP accountant) per protected party, valid only under the stated assumptions below. "
        "Audited ε: the largest empirical lower bound (eps_lower) reported by an attack on that "
        "party or by testbed audit (the run's audit.json); an audited bound above the claim "
        "means the claim is wrong or its assumption fails. Status: not valid when an assumption "
        "behind the claim fails (whatever the audit says), else the audit's verdict, or not "
        "audited."
    )
    # parties with the same figures in a setting share a row; settings with neither a claim
    # nor an audit are named on one line below the table, not given a row each
    by_party = _epsilon_by_party(data)
    entries = []  # (series, setting, party, figures) in the order the table lists them
    silent: dict[str, list[str]] = {}  # series -> settings with no claim and no audit
    for series, point, p in sorted(by_party, key=lambda k: (k[0], k[1], natural(k[2]))):
        e = by_party[(series, point, p)]
        status = claim_status(e["claim"], e["aud"], e["holds"], e["verdicts"])
        holds = "–" if not e["holds"] else ("yes" if all(e["holds"]) else "NO")
        figures = (fmt(e["claim"]), e["delta"], fmt(e["aud"]), holds, status)
        entries.append((series, point, p, (e["seeds"], *figures)))
    # (seeds, claim, delta, audited, holds, status): no claim, no audit, nothing failing
    loud = {(se, pt) for se, pt, _, f in entries if f[3] != fmt(math.nan) or f[5] != NO_CLAIM}
    quiet = {(se, pt) for se, pt, _, _ in entries} - loud
    for series, point in sorted(quiet, key=lambda k: (k[0], natural(k[1]))):
        silent.setdefault(series, []).append(point)
    eps_rows = [
        [series, point, figures[0], p, *figures[1:]]
        for series, point, p, figures in _group_parties(entries, least=2)
        if (series, point) not in quiet
    ]
    if eps_rows:
        doc.table(
            [
                "protocol",
                "setting",
                "seeds",
                "party",
                "claimed ε",
                "δ",
                "audited ε ≥ (max over seeds)",
                "assumptions hold",
                "status",
            ],
            eps_rows,
        )
    if silent:
        n = sum(map(len, silent.values()))
        doc.p(
            f"No claim (ε = ∞) and no audit, for any party, in {n} setting(s): "
            + "; ".join(f"{series}: {', '.join(points)}" for series, points in silent.items())
            + "."
        )
    assumption_rows = _assumption_rows(data.rows)
    if assumption_rows:
        failing = sum(r[4] == "NO" for r in assumption_rows)
        doc.fold(
            f"Assumptions behind the claims: {len(assumption_rows)} row(s), {failing} failing",
            ["protocol", "setting", "party", "assumption", "holds", "detail"],
            assumption_rows,
        )


def observer_section(doc: Doc, data: ReportData) -> None:
    """Per setting what share of the transcript the observer saw, by message kind: one block
    per setting, picked in a drop-down (the settings' blocks differ only in their numbers)."""
    doc.h(2, "What the observer saw")
    options = []
    for k in settings_in_order(data.agg):
        r = next(x for x in data.rows if (series_of(x), point_of(x)) == k)
        res = r["results"]
        ov = res.get("observer_view") or {}
        tr = res.get("transcript") or {}
        by = ov.get("by_kind") or tr.get("by_kind") or {}
        options.append(
            (
                f"{k[0]} — {k[1]}",
                f"Observer {ov.get('observer', '?')} saw {ov.get('messages', '?')} of "
                f"{tr.get('messages', '?')} messages ({_size(ov.get('bytes'))} of "
                f"{_size(tr.get('bytes'))}) over {tr.get('rounds', '?')} rounds (seed "
                f"{r.get('seed')}; transcript digest {str(tr.get('digest', ''))[:16]}).",
                ["message kind", "messages", "size"],
                [[kind, v.get("messages"), _size(v.get("bytes"))] for kind, v in by.items()],
            )
        )
    if options:
        doc.selector("setting", options)


def _size(n) -> str:
    """A byte count as the command line writes it (``520.7 MiB``; exact below 1 KiB)."""
    return fmt_bytes(n) if isinstance(n, (int, float)) else "?"


def deviations_section(doc: Doc, data: ReportData) -> None:
    """Each protocol's mode and its named deviations from the paper."""
    doc.h(2, "Protocol modes and deviations")
    dev_rows, seen = [], set()
    for r in data.rows:
        pr = r["results"].get("protocol") or {}
        key = (pr.get("name"), pr.get("mode"), tuple(pr.get("deviations") or ()))
        if key not in seen:
            seen.add(key)
            dev_rows.append([key[0], key[1], "; ".join(key[2]) or "none"])
    doc.table(["protocol", "mode", "deviations from the paper / public code"], dev_rows)


def provenance_section(doc: Doc, data: ReportData) -> None:
    """Scenario, config hash, versions, the scenario text and the sweep's cells."""
    doc.h(2, "Scenario and provenance")
    info = data.info
    versions = info.get("versions") or {}
    doc.table(
        ["item", "value"],
        [
            ["scenario", data.first.get("scenario", "")],
            ["config hash", data.config_hash],
            ["run kind", info.get("kind", "")],
            ["seeds", ", ".join(map(str, data.seeds))],
        ],
    )
    doc.fold(
        f"python {info.get('python', '?')} and {len(versions)} package versions",
        ["package", "version"],
        [["python", info.get("python", "")]]
        + [[k, v or "not installed"] for k, v in versions.items()],
    )
    if info.get("scenario_text"):
        doc.fold_pre("the scenario as run", info["scenario_text"])
    if info.get("sweep"):
        cells = info["sweep"]["cells"]
        doc.fold(
            f"the sweep's {len(cells)} cells: config hash, seed, setting",
            ["#", "config hash", "seed", "setting"],
            [[c["index"], c["cell"][:12], c["seed"], c["label"]] for c in cells],
        )
