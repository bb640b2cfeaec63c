"""A benchmark run written out: ``bench.json`` (everything), ``bench.md`` (the tables) and
``bench.png`` (cost against n and N, log-log)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.timing import fit_exponent

__all__ = ["plot", "to_markdown", "write_outputs"]


def _fmt(x, digits=3):
    if x is None:
        return "-"
    if isinstance(x, float):
        if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
            return f"{x:.2e}"
        return f"{x:.{digits}g}"
    return str(x)


def _md_table(rows: list[dict], cols: list[tuple[str, str]]) -> list[str]:
    if not rows:
        return ["(none)", ""]
    out = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(_fmt(r.get(k)) for k, _ in cols) + " |")
    out.append("")
    return out


PAIR_COLUMNS = [
    ("case", "case"),
    ("n", "n"),
    ("d", "d"),
    ("seconds", "seconds"),
    ("emd_seconds", "ot.emd s"),
    ("ratio", "time / ot.emd"),
    ("peak_mib", "peak MiB"),
    ("mem_ratio", "memory / ot.emd"),
    ("estimate", "estimate"),
]
CLIENT_COLUMNS = [
    ("case", "case"),
    ("engine", "engine"),
    ("clients", "N"),
    ("points_per_client", "points/client"),
    ("d", "d"),
    ("seconds", "seconds"),
    ("ship_seconds", "actors + data s"),
    ("same_transcript", "same transcript as in process"),
    ("ratio", "time / ot.emd"),
    ("peak_mib", "peak MiB"),
]
OVERHEAD_COLUMNS = [
    ("case", "case"),
    ("n", "n"),
    ("d", "d"),
    ("run_seconds", "run s"),
    ("transcript_overhead", "transcript overhead"),
    ("guard_overhead", "transcript + guard overhead"),
    ("bare_seconds", "bare bus s"),
    ("transcript_seconds", "normal bus s"),
    ("ab_overhead", "A/B overhead"),
]
ISOLATION_COLUMNS = [
    ("scenario", "scenario"),
    ("attack", "attack"),
    ("in_process_s", "in process s"),
    ("isolated_s", "isolated s"),
    ("unconfined_s", "without sandbox s"),
    ("overhead_ms", "overhead ms"),
    ("sandbox_ms", "sandbox ms"),
    ("overhead_ratio", "isolated / in process"),
]
EXPONENT_COLUMNS = [
    ("case", "case"),
    ("against", "x"),
    ("d", "d"),
    ("engine", "engine"),
    ("exponent", "e"),
    ("emd_exponent", "e of ot.emd"),
]


def _header_lines(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    return [
        "# Benchmarks",
        "",
        f"Made by: `{res['command']}`" if res["command"] else "",
        "",
        f"Started {res['started_utc']}, took {res['seconds']:.0f} s on {m['cpus']} CPUs "
        f"({m['platform']}, Python {m['python']}, NumPy {m['numpy']}, POT {m['POT']}, "
        f"BLAS threads {m.get('blas_threads')}); "
        f"load average at start {_fmt_load(m['load_average'])}, at end "
        f"{_fmt_load(res['load_average_end'])}.",
        "",
        f"Baseline (denominator of every ratio): {res['baseline']}. Times are minima over "
        "interleaved repeats; peak memory is the tracemalloc peak (Python + NumPy).",
        "",
    ]


def _target_lines(targets: list[dict]) -> list[str]:
    if not targets:
        return []
    lines = ["## Targets", ""]
    for t in targets:
        verdict = "met" if t["met"] else f"**missed** by {t['factor']:.2f}x"
        lines.append(
            f"- {t['text']}: measured {_fmt(t['measured'])} {t['unit']} — {verdict}"
            + (f" ({t['detail']})" if t["detail"] else "")
        )
        if t["profile"]:
            lines += ["", "  Where the time goes (cProfile, own time):", ""]
            for p in t["profile"][:8]:
                lines.append(
                    f"  - `{p['function']}`: {p['own_s']:.3f} s own "
                    f"({100 * p['own_share']:.0f} %), {p['calls']} calls"
                )
    return lines + [""]


def to_markdown(res: dict[str, Any]) -> str:
    from bench.pairwise import pairwise_lines
    from bench.targets import issue15_lines

    lines = _header_lines(res)
    if res.get("waits"):
        from bench.waits import to_markdown as waits_lines

        lines += waits_lines(res["waits"])
    elif res.get("waits_skipped"):
        lines += [
            "## What a user waits for (every safety on)",
            "",
            f"Not run: {res['waits_skipped']}.",
            "",
        ]
    lines += issue15_lines(res) + _target_lines(res["targets"])
    lines += ["## Two parties: cost against n and d", ""]
    lines += _md_table(res["pairs"], PAIR_COLUMNS)
    lines += ["## Many clients: cost against N", ""]
    lines += _md_table(res["clients"], CLIENT_COLUMNS)
    lines += pairwise_lines(res.get("pairwise") or [])
    lines += [
        "## Transcript overhead",
        "",
        "Time inside `Bus.send` (read-only copies, sizes, BLAKE3 digests, transcript) divided by "
        "the rest of the same run, without and with the privacy guard; and, as a cross-check, "
        "separate runs on the normal bus against a bus that logs nothing (noisier under load).",
        "",
    ]
    lines += _md_table(res["overhead"], OVERHEAD_COLUMNS)
    if res.get("guard"):
        from bench.guard import guard_markdown

        g = res["guard"]
        lines += guard_markdown(g["rows"], g.get("fedbary"), _md_table, g.get("fedbary_skipped"))
    if res.get("isolation"):
        lines += [
            "## Attack isolation",
            "",
            "Each attack runs in a fresh, sandboxed process from a forkserver "
            "(testbed/sandbox/isolation.py). "
            "One attack (run + baseline) called in process against the same call isolated, on the "
            "same View; minimum over repeats.",
            "",
        ]
        lines += _md_table(res["isolation"], ISOLATION_COLUMNS)
    lines += ["## Fitted exponents (cost ~ x^e, least squares on log-log)", ""]
    lines += _md_table(res["exponents"], EXPONENT_COLUMNS)
    if res["notes"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in res["notes"]] + [""]
    return "\n".join(lines)


def _fmt_load(v):
    return "-" if not v else "/".join(f"{x:.2f}" for x in v)


def plot(res: dict[str, Any], path: Path) -> None:
    """Log-log plot: seconds against n (one line per case, at each d), and against N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = sorted({r["d"] for r in res["pairs"]}) or [None]
    fig, axes = plt.subplots(1, len(ds) + 1, figsize=(5.2 * (len(ds) + 1), 4.8), squeeze=False)
    axes = axes[0]
    exps = {(e["case"], e.get("d")): e["exponent"] for e in res["exponents"] if e["against"] == "n"}
    cases = sorted({r["case"] for r in res["pairs"]})
    colours = {c: f"C{i}" for i, c in enumerate(cases)}
    for ax, d in zip(axes, ds):
        rows = [r for r in res["pairs"] if r["d"] == d]
        for case in cases:
            rs = sorted((r for r in rows if r["case"] == case), key=lambda r: r["n"])
            if not rs:
                continue
            e = exps.get((case, d))
            ax.loglog(
                [r["n"] for r in rs],
                [r["seconds"] for r in rs],
                marker="o",
                color=colours[case],
                label=case + (f" (e={e:.2f})" if e is not None else ""),
            )
        rs = sorted({r["n"]: r for r in rows}.values(), key=lambda r: r["n"])
        if rs:
            eb = fit_exponent([r["n"] for r in rs], [r["emd_seconds"] for r in rs])
            ax.loglog(
                [r["n"] for r in rs],
                [r["emd_seconds"] for r in rs],
                "--",
                color="black",
                marker="x",
                label="one ot.emd" + (f" (e={eb:.2f})" if eb is not None else ""),
            )
            ax.legend(fontsize=7)
        ax.set_xlabel("n (points per party)")
        ax.set_ylabel("seconds")
        ax.set_title(f"two parties, d = {d}: cost against n")
    ax = axes[-1]
    expN = {
        (e["case"], e.get("engine")): e["exponent"] for e in res["exponents"] if e["against"] == "N"
    }
    for case, eng in sorted({(r["case"], r.get("engine")) for r in res["clients"]}):
        rs = sorted(
            (r for r in res["clients"] if r["case"] == case and r.get("engine") == eng),
            key=lambda r: r["clients"],
        )
        e = expN.get((case, eng))
        ax.loglog(
            [r["clients"] for r in rs],
            [r["seconds"] for r in rs],
            marker="o",
            label=f"{case} [{eng}]" + (f" (e={e:.2f})" if e is not None else ""),
        )
    ax.set_xlabel("N (clients)")
    ax.set_ylabel("seconds")
    ax.set_title("many clients: cost against N")
    if res["clients"]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no multi-client protocol measured", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(res: dict[str, Any], out_dir: str | Path, stem: str = "bench") -> list[Path]:
    """Write ``<stem>.json``, ``<stem>.md`` and ``<stem>.png`` into ``out_dir``."""
    from testbed.exchange.bus import atomic_write_bytes
    from testbed.run.results import jsonable

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pj, pm, pp = out / f"{stem}.json", out / f"{stem}.md", out / f"{stem}.png"
    atomic_write_bytes(pj, (json.dumps(jsonable(res), indent=2, sort_keys=True) + "\n").encode())
    atomic_write_bytes(pm, (to_markdown(res) + "\n").encode())
    plot(res, pp)
    return [pj, pm, pp]
