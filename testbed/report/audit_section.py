"""The "Privacy audit" section: what ``testbed audit RUN_SCENARIO --out RUN_DIR`` wrote to
``RUN_DIR/audit.json`` — per party one figure of the audited ε lower bound for each observer,
per round and cumulative, beside the ledger's claimed ε for the same releases; and the
reconstruction bound Φ(Φ⁻¹(κ) + μ) beside each reconstruction attack's measured success. Renders
only: every number comes from the file."""

from __future__ import annotations

import math

from testbed.report.doc import Doc
from testbed.report.fmt import fmt, plotly_text
from testbed.report.model import ReportData
from testbed.report.static_figures import render
from testbed.scoring.names import Metric
from testbed.scoring.results_schema import read_audit_rows
from testbed.scoring.vocabulary import VIOLATION

__all__ = ["audit_section"]


def _order(scope: str) -> tuple[float, int]:
    """Rounds on the x axis: round k, then "<=k" beside it, "all" last."""
    if scope == "all":
        return (math.inf, 0)
    if scope.startswith("<="):
        return (float(scope[2:]), 1)
    return (float(scope), 0)


def _epsilon_figures(party: str, rows: list[dict]):
    """(plotly figure, png bytes) of ε̂ per observer and rounds, with the claim dashed."""
    import matplotlib  # matplotlib: only when a figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when a figure is drawn
    import plotly.graph_objects as go  # plotly: only when a figure is drawn

    scopes = sorted({r["rounds"] for r in rows}, key=_order)
    fig = go.Figure()
    mfig, ax = plt.subplots(figsize=(6.4, 3.8))
    for obs in sorted({r["observer"] for r in rows}):
        by = {r["rounds"]: r for r in rows if r["observer"] == obs}
        xs = [s for s in scopes if s in by]
        ys = [float(by[s][Metric.EPS_LOWER]) for s in xs]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=plotly_text(obs)))
        ax.plot(xs, ys, marker="o", label=obs)
    claim = {r["rounds"]: float(r[Metric.EPSILON_CLAIMED]) for r in rows}
    xs = [s for s in scopes if math.isfinite(claim.get(s, math.inf))]
    if xs:
        ys = [claim[s] for s in xs]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="claimed ε", line={"dash": "dash"}))
        ax.plot(xs, ys, "k--", label="claimed ε")
        ax.set_yscale("log" if max(ys) > 100 else "linear")
    title = f"audited ε ≥ per observer and round vs claimed ε ({party})"
    fig.update_layout(
        title={"text": plotly_text(title), "font": {"size": 14}},
        xaxis={"title": "rounds (k: that round only, <=k: up to it, all)", "type": "category"},
        yaxis={"title": "ε"},
        template="plotly_white",
        height=360,
    )
    ax.set_xlabel("rounds (k: that round only, <=k: up to it, all)")
    ax.set_ylabel("ε")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return fig, render(mfig)


def _reconstruction_figures(rows: list[dict]):
    import matplotlib  # matplotlib: only when a figure is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib: only when a figure is drawn
    import plotly.graph_objects as go  # plotly: only when a figure is drawn

    labels = [
        f"{r['attack']} → {r['target']}" + (f" ({r['setting']})" if "setting" in r else "")
        for r in rows
    ]
    succ = [float(r["success_lower"]) for r in rows]
    bound = [float(r["bound"]) for r in rows]
    fig = go.Figure(
        [
            go.Bar(x=[plotly_text(x) for x in labels], y=succ, name="success ≥ (95 %)"),
            go.Bar(x=[plotly_text(x) for x in labels], y=bound, name="bound Φ(Φ⁻¹(κ)+μ)"),
        ]
    )
    title = "reconstruction within the coverage radius vs the μ-GDP bound"
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        barmode="group",
        yaxis={"title": "probability", "range": [0, 1.05]},
        template="plotly_white",
        height=340,
    )
    mfig, ax = plt.subplots(figsize=(6.4, 3.4))
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], succ, 0.4, label="success ≥ (95 %)")
    ax.bar([x + 0.2 for x in xs], bound, 0.4, label="bound Φ(Φ⁻¹(κ)+μ)")
    ax.set_xticks(list(xs), labels, fontsize=7, rotation=20)
    ax.set_ylim(0, 1.05)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return fig, render(mfig)


def _num(v) -> str:
    return "–" if v is None else fmt(float(v))


def audit_status(row: dict) -> str:
    """An audit row's verdict: its own ``verdict`` (holds, VIOLATION, inconclusive, not
    audited) when ``testbed audit`` writes one, else VIOLATION or "consistent" from
    ``violated``."""
    if row.get("verdict"):
        return str(row["verdict"])
    return VIOLATION if row.get("violated") else "consistent"


def audit_section(doc: Doc, data: ReportData) -> None:
    """Rendered when the run directory holds an ``audit.json`` (``testbed audit --out``)."""
    path = data.run_dir / "audit.json"
    if not path.is_file():
        return
    rows = read_audit_rows(path)  # parsed once: a misspelt field names the file and the field
    mech = [r for r in rows if r.get("scope") == "mechanism"]
    audits = [r for r in rows if not r.get("reconstruction") and r.get("scope") != "mechanism"]
    recon = [r for r in rows if r.get("reconstruction")]
    doc.h(2, "Privacy audit")
    doc.p(
        "From testbed audit (audit.json): audited ε lower bounds per observer, for each round's "
        "messages, the rounds up to it, and all of them, beside the claimed ε the ledger "
        "composes over the same releases; above the claim = VIOLATION."
    )
    # an audit of a sweep (``testbed audit SWEEP``) names each row's cell: one figure per cell
    sweep = any("setting" in r for r in rows)
    keys = sorted({(r.get("setting", ""), r["party"]) for r in audits})
    for i, (setting, party) in enumerate(keys):
        mine = [
            r
            for r in audits
            if (r.get("setting", ""), r["party"]) == (setting, party)
            and r.get("method") == "one-run"
        ]
        who = f"{party}, {setting}" if setting else party
        if mine:
            fig, png = _epsilon_figures(who, mine)
            doc.plot(f"audit_eps_{i}", png, fig, f"audited ε per observer and round, {who}")
    setting_col = ["setting"] if sweep else []
    # the audit's ceiling (the largest ε̂ its canaries could certify), when it writes one
    ceiling = any("ceiling_epsilon" in r for r in audits)
    doc.table(
        [
            *setting_col,
            "party",
            "audit",
            *(["scope"] if any("scope" in r for r in audits) else []),
            "observer",
            "rounds",
            "claimed ε",
            "ε̂ ≥",
            "μ̂ ≥",
            *(["ceiling ε"] if ceiling else []),
            "status",
        ],
        [
            [
                *([r.get("setting", "")] if sweep else []),
                r["party"],
                r.get("method", ""),
                *([r.get("scope", "")] if any("scope" in x for x in audits) else []),
                r.get("observer", ""),
                r.get("rounds", ""),
                _num(r.get(Metric.EPSILON_CLAIMED)),
                _num(r.get(Metric.EPS_LOWER)),
                _num(r.get("mu_lower")),
                *([_num(r.get("ceiling_epsilon"))] if ceiling else []),
                audit_status(r),
            ]
            for r in audits
        ],
    )
    if mech:  # the mechanism audit (docs/guide/audits.md): one verdict per party
        doc.p(
            "Mechanism audit: the testbed drove each party's defenses itself on neighbouring "
            "datasets it chose and read every field before and after the noise (docs/guide/audits.md)."
        )
        doc.table(
            [*setting_col, "party", "claimed ε", "ε̂ ≥", "ceiling", "verdict", "failed checks"],
            [
                [
                    *([r.get("setting", "")] if sweep else []),
                    r["party"],
                    fmt(float(r[Metric.EPSILON_CLAIMED])),
                    fmt(float(r[Metric.EPS_LOWER])),
                    fmt(float(r["ceiling_epsilon"])),
                    r["verdict"],
                    r.get("failed_checks") or "—",
                ]
                for r in mech
            ],
        )
    if recon:
        fig, png = _reconstruction_figures(recon)
        doc.plot("audit_reconstruction", png, fig, "reconstruction vs the μ-GDP bound")
        doc.table(
            [*setting_col, "attack", "target", "success ≥", "κ ≤", "μ", "bound", "status"],
            [
                [
                    *([r.get("setting", "")] if sweep else []),
                    r["attack"],
                    r["target"],
                    fmt(float(r["success_lower"])),
                    fmt(float(r["kappa_upper"])),
                    fmt(float(r["mu"])),
                    fmt(float(r["bound"])),
                    audit_status(r),
                ]
                for r in recon
            ],
        )
