"""What a user waits for, with every safety on (issue 23): one section of ``testbed bench``.

- ``fedbary``: ``testbed run scenarios/fedbary_100_clients.yaml`` (100 clients x 500 points,
  d = 64, K = 10) with default settings, in a fresh process as a user runs it: the guard on, then
  the same scenario with ``guard: off``. Wall time of the command and the protocol's own time
  (``run_info.json``); the guard's share is what turning it off saves of the protocol's time.
- ``cli``: ``testbed --version``, ``testbed plugins`` and ``testbed validate`` against a bare
  ``python -c "import numpy, yaml, pydantic"`` in the same interpreter, interleaved, fastest
  of ``repeats`` each (machine load cancels in the ratio).
- ``pairs``: FedWAD paper mode / the public algorithm and TriangleWad / one ``ot.emd`` at
  n = 2000, d = 64 (rows of ``bench.main.bench_pairs`` at that one size).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["cli_rows", "fedbary_rows", "pair_summary", "to_markdown", "waits"]

ROOT = Path(__file__).resolve().parents[1]
FEDBARY_SCENARIO = ROOT / "scenarios" / "fedbary_100_clients.yaml"
VALIDATE_SCENARIO = ROOT / "scenarios" / "fedwad_digits.yaml"
BARE = [sys.executable, "-c", "import numpy, yaml, pydantic"]


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": path}


def _wall(cmd: Sequence[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(list(cmd), capture_output=True, text=True, env=_env(), cwd=ROOT)
    return time.perf_counter() - t0, proc


def cli_rows(repeats: int = 3) -> list[dict[str, Any]]:
    """Each command's fastest wall time over ``repeats`` interleaved rounds, and its ratio to the
    bare import's fastest."""
    testbed = [sys.executable, "-m", "testbed"]
    cmds = {
        "bare import (numpy, yaml, pydantic)": BARE,
        "testbed --version": [*testbed, "--version"],
        "testbed plugins": [*testbed, "plugins"],
        f"testbed validate {VALIDATE_SCENARIO.relative_to(ROOT)}": [
            *testbed,
            "validate",
            str(VALIDATE_SCENARIO),
        ],
    }
    best: dict[str, float] = {}
    codes: dict[str, int] = {}
    for _ in range(repeats):
        for name, cmd in cmds.items():
            sec, proc = _wall(cmd)
            best[name] = min(best.get(name, sec), sec)
            codes[name] = proc.returncode
    bare = best[next(iter(cmds))]
    return [
        {"command": k, "seconds": v, "ratio": v / bare, "returncode": codes[k], "repeats": repeats}
        for k, v in best.items()
    ]


def _run_scenario(path: Path, extra: str = "") -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-waits-") as tmp:
        scenario = path
        if extra:
            scenario = Path(tmp) / path.name
            scenario.write_text(path.read_text() + extra)
        out = Path(tmp) / "run"
        load = os.getloadavg()[0]
        sec, proc = _wall(
            [sys.executable, "-m", "testbed", "run", str(scenario), "--out", str(out), "-q"]
        )
        info = json.loads((out / "run_info.json").read_text()) if proc.returncode == 0 else {}
        res = json.loads((out / "results.json").read_text()) if proc.returncode == 0 else {}
    return {
        "seconds": sec,
        "protocol_seconds": info.get("seconds"),
        "returncode": proc.returncode,
        "stderr_tail": proc.stderr.strip().splitlines()[-2:],
        "load_average_start": load,
        "digest": (res.get("transcript") or {}).get("digest"),
        "solvers": sorted(set(((res.get("outputs") or {}).get("solvers") or {}).values())),
    }


def fedbary_rows(log: Callable[[str], None] = lambda s: None, repeats: int = 2) -> dict[str, Any]:
    """``testbed run`` of the FedBary 100 x 500 scenario, guard on (default) and off,
    ``repeats`` times each, interleaved (on, off, on, off): single runs on a shared machine
    scatter by 10-20 %, so each side reports its fastest run, with every run's time beside it."""
    runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    for i in range(repeats):
        log(f"waits: fedbary 100 x 500, guard on (testbed run), {i + 1} of {repeats}")
        runs["on"].append(_run_scenario(FEDBARY_SCENARIO))
        log(f"waits: fedbary 100 x 500, guard off, {i + 1} of {repeats}")
        runs["off"].append(_run_scenario(FEDBARY_SCENARIO, "guard: off\n"))
    on, off = (_fastest(runs[k]) for k in ("on", "off"))
    share = None
    if on["protocol_seconds"] and off["protocol_seconds"]:
        share = 1.0 - off["protocol_seconds"] / on["protocol_seconds"]
    digests = {r["digest"] for r in runs["on"] + runs["off"]}
    return {
        "scenario": str(FEDBARY_SCENARIO.relative_to(ROOT)),
        "guard_on": on,
        "guard_off": off,
        "guard_share": share,
        "same_transcript": None not in digests and len(digests) == 1,
        "limit_seconds": 60.0,
        "repeats": repeats,
    }


def _fastest(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The fastest finished run (any run when none finished), with every run's seconds."""
    done = [r for r in runs if r["returncode"] == 0] or list(runs)
    best = dict(min(done, key=lambda r: r["seconds"]))
    best["all_seconds"] = [r["seconds"] for r in runs]
    return best


def pair_summary(rows: Sequence[dict[str, Any]], n: int = 2000, d: int = 64) -> dict[str, Any]:
    """FedWAD paper / public algorithm and TriangleWad / one ot.emd from ``bench_pairs`` rows
    measured at ``n``, ``d`` (:mod:`bench.main` measures them for this section)."""
    by = {r["case"]: r for r in rows if r["n"] == n and r["d"] == d}
    out: dict[str, Any] = {"n": n, "d": d, "rows": [dict(r) for r in by.values()]}
    if "fedwad_paper" in by and "fedwad_public" in by:
        out["fedwad_paper_over_public"] = by["fedwad_public"].get("paper_over_public") or (
            by["fedwad_paper"]["seconds"] / by["fedwad_public"]["seconds"]
        )  # the two timed against each other when the row has it
        out["fedwad_paper_over_public_cpu"] = by["fedwad_public"].get("paper_over_public_cpu")
    if "triangle_wad" in by:
        out["triangle_wad_over_emd"] = by["triangle_wad"]["ratio"]
    return out


def waits(
    pair_rows: Sequence[dict[str, Any]],
    log: Callable[[str], None] = lambda s: None,
    fedbary: bool = True,
) -> dict[str, Any]:
    """The whole section from the n = 2000 pair rows (``fedbary=False`` leaves out the two
    FedBary runs, ~2-5 min)."""
    log("waits: command line against a bare import")
    return {
        "cli": cli_rows(),
        "pairs": pair_summary(pair_rows),
        "fedbary": fedbary_rows(log) if fedbary else None,
    }


def _f(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _all(run: dict[str, Any]) -> str:
    return ", ".join(_f(x, 1) for x in run.get("all_seconds", [run["seconds"]]))


def to_markdown(w: dict[str, Any]) -> list[str]:
    """The section as markdown lines, everything side by side."""
    lines = ["## What a user waits for (every safety on)", ""]
    fb = w.get("fedbary")
    if fb:
        on, off = fb["guard_on"], fb["guard_off"]
        lines += [
            f"FedBary 100 clients x 500 points, d = 64, K = 10 (`testbed run {fb['scenario']}`, "
            f"default settings; solvers: {', '.join(on['solvers']) or '-'}):",
            "",
            "| guard | command s (fastest) | protocol s | load at start | every run s |",
            "|---|---|---|---|---|",
            f"| on (default) | {_f(on['seconds'], 1)} | {_f(on['protocol_seconds'], 1)} | "
            f"{_f(on['load_average_start'], 1)} | {_all(on)} |",
            f"| off | {_f(off['seconds'], 1)} | {_f(off['protocol_seconds'], 1)} | "
            f"{_f(off['load_average_start'], 1)} | {_all(off)} |",
            "",
            f"Runs interleaved (on, off, ...), {fb.get('repeats', 1)} of each; the protocol "
            "times are those of the fastest runs.",
            "",
            f"Guard share of the protocol's time: {_f(100 * fb['guard_share'] if fb['guard_share'] is not None else None, 1)} %; "
            f"same transcript with and without the guard: {fb['same_transcript']}; goal "
            f"<= {fb['limit_seconds']:.0f} s with the guard on.",
            "",
        ]
    lines += ["| command | seconds (fastest) | x bare import |", "|---|---|---|"]
    for r in w["cli"]:
        lines.append(f"| `{r['command']}` | {_f(r['seconds'], 3)} | {_f(r['ratio'])} |")
    p = w["pairs"]
    lines += [
        "",
        f"At n = {p['n']}, d = {p['d']}: FedWAD paper mode / the public algorithm "
        f"{_f(p.get('fedwad_paper_over_public'))}x in wall time, "
        f"{_f(p.get('fedwad_paper_over_public_cpu'))}x in CPU time (goal <= 0.5 at equal "
        f"error); TriangleWad / one `ot.emd` {_f(p.get('triangle_wad_over_emd'))}x (goal <= 4).",
        "",
    ]
    return lines
