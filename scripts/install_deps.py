"""``make install``'s first step: the project's dependencies (pyproject.toml's ``dependencies``
and the ``dev`` extra), one pip call per requirement with a line for each, so a first install
(minutes: torch, ray, scipy) says what it is doing instead of staying silent.

``python scripts/install_deps.py [--dry-run] [EXTRA ...]``: prints ``[i/n] requirement`` before
each pip call and its time after; ``--dry-run`` only prints the lines. pip's own output stays
quiet (``-qq``: errors only); a failed requirement stops with pip's error and its exit code.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def requirements(extras: list[str]) -> list[str]:
    """The project's requirements, then each named extra's, in pyproject.toml's order."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project.get("dependencies", []))
    for extra in extras:
        reqs += project.get("optional-dependencies", {}).get(extra, [])
    return list(dict.fromkeys(reqs))


def main(argv: list[str]) -> int:
    dry = "--dry-run" in argv
    reqs = requirements([a for a in argv if not a.startswith("-")] or ["dev"])
    start = time.monotonic()
    for i, req in enumerate(reqs, 1):
        print(f"[{i}/{len(reqs)}] {req}", end="" if not dry else "\n", flush=True)
        if dry:
            continue
        t = time.monotonic()
        cmd = [sys.executable, "-m", "pip", "install", "-qq", req]
        code = subprocess.call(cmd)
        print(f" ({time.monotonic() - t:.0f} s)", flush=True)
        if code:
            return code
    if not dry:
        print(f"dependencies installed in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
