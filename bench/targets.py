"""``testbed bench`` section: issue 15's five numbers side by side, from one bench run.

Kept apart from the measuring code (:mod:`bench.sections`): this module only reads what a
run measured (its targets, its transcript-overhead rows and the transcript section's rows when that
section is present) and says "not measured: <reason>" for anything the run did not measure; it
never fills a row with a value from elsewhere.
"""

from __future__ import annotations

from typing import Any

__all__ = ["issue15_lines", "issue15_rows"]


def _row(quantity: str, value: float | None, unit: str, detail: str) -> dict[str, Any]:
    return {"quantity": quantity, "value": value, "unit": unit, "detail": detail}


def _target_row(targets: dict, key: str, quantity: str, unit: str, how: str) -> dict[str, Any]:
    t = targets.get(key)
    if t is None or t.get("measured") is None:
        return _row(quantity, None, unit, f"not measured: {how}")
    return _row(quantity, float(t["measured"]), unit, t.get("detail", ""))


def _overhead_row(res: dict[str, Any]) -> dict[str, Any]:
    quantity = "transcript overhead (time logging / protocol time without logging)"
    logging = (res.get("transcript_hash") or {}).get("logging") or []
    if logging:
        worst = max(logging, key=lambda r: r["logging_share"])
        detail = "worst of " + ", ".join(
            f"{r['case']} (n={r['n']}, d={r['d']}): {r['logging_share']:.3f}" for r in logging
        )
        return _row(quantity, float(worst["logging_share"]), "ratio", detail)
    rows = res.get("overhead") or []
    if rows:
        worst = max(rows, key=lambda r: r["transcript_overhead"])
        detail = "time inside Bus.send / rest of the same run, worst of " + ", ".join(
            f"{r['case']} (n={r['n']}, d={r['d']}): {r['transcript_overhead']:.3f}" for r in rows
        )
        return _row(quantity, float(worst["transcript_overhead"]), "ratio", detail)
    return _row(quantity, None, "ratio", "not measured: this run had no transcript-overhead rows")


_PAIRWISE_DETAIL = (
    "engine",
    "pairs_run",
    "pairs_total",
    "window",
    "rows_per_client",
    "d",
    "support_size",
    "iterations",
    "spill_threshold_mib",
    "envelopes",
    "envelopes_on_disk",
    "spilled_mib",
    "header_file_mib",
    "seconds",
    "server_view_read_seconds",
    "load_average",
)


def _short(v):
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return "/".join(_short(x) for x in v)
    return v


def _pairwise_row(res: dict[str, Any]) -> dict[str, Any]:
    quantity = "pairwise FedWAD, N = 1000 clients: peak resident memory"
    got = res.get("pairwise_1000")
    if got and got.get("peak_rss_mib") is not None:
        keys = [k for k in _PAIRWISE_DETAIL if k in got] or sorted(set(got) - {"peak_rss_mib"})
        detail = ", ".join(f"{k}={_short(got[k])}" for k in keys)
        return _row(quantity, float(got["peak_rss_mib"]), "MiB", detail)
    return _row(
        quantity,
        None,
        "MiB",
        "not measured: run with --pairwise 1000 --pairwise-pairs all (every pair on the Ray "
        "engine, the transcript spilling to disk)",
    )


def issue15_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The five rows of issue 15's closing check, in its order."""
    targets = {t["target"]: t for t in res.get("targets") or []}
    need = "run with --targets (or --full)"
    return [
        _target_row(
            targets,
            "fedbary_100x500",
            "FedBary, 100 clients x 500 points, d = 64",
            "s",
            f"{need} and the fedbary case",
        ),
        _overhead_row(res),
        _target_row(
            targets,
            "fedwad_vs_public",
            "FedWAD time, ours / the public reference's algorithm (worst n, d)",
            "ratio",
            f"{need} with fedwad_paper and fedwad_public",
        ),
        _target_row(
            targets,
            "triangle_wad_vs_emd",
            "TriangleWad end to end / one exact ot.emd, n = 2000 (worst d)",
            "ratio",
            f"{need} with triangle_wad and n = 2000 in --n",
        ),
        _pairwise_row(res),
    ]


def issue15_lines(res: dict[str, Any]) -> list[str]:
    """Markdown table of :func:`issue15_rows` (empty when nothing of it was measured)."""
    rows = issue15_rows(res)
    if all(r["value"] is None for r in rows):
        return []
    lines = [
        "## Scale targets, side by side",
        "",
        "| quantity | measured | unit | how |",
        "|---|---|---|---|",
    ]
    for r in rows:
        value = "-" if r["value"] is None else f"{r['value']:.4g}"
        lines.append(f"| {r['quantity']} | {value} | {r['unit']} | {r['detail']} |")
    return [*lines, ""]
