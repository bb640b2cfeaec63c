"""Measure each protocol's relative error against its central POT reference on its contract
scenario, over seeds: the basis of the ``reference_tolerance`` each built-in protocol declares.

    python scripts/protocol_tolerances.py [--seeds 20] [PROTOCOL ...]

Prints, per protocol and compared key, the largest and median relative error over the seeds and
the declared tolerance (the kit checks the contract scenario's own seed).
"""

from __future__ import annotations

import argparse
import fnmatch
import statistics


def errors(name: str, seeds: int = 20) -> dict[str, list[float]]:
    """``{key: [relative error per seed]}`` of protocol ``name`` on its contract scenario, seeds
    0..seeds-1 (a seed whose scenario cannot be built is skipped with a line on stdout)."""
    import yaml

    from testbed.errors import TestbedError
    from testbed.registry import PROTOCOLS
    from testbed.scenario.loading import parse_scenario
    from testbed.testing.protocol_checks import _run, protocol_scenario

    base = protocol_scenario(PROTOCOLS.get(name))
    errs: dict[str, list[float]] = {}
    for seed in range(seeds):
        raw = {**base._raw, "seed": seed}
        try:
            run = _run(parse_scenario(yaml.safe_dump(raw), base._fname, base._base_dir))
        except TestbedError as exc:  # e.g. a seed whose partition cannot be drawn
            print(f"{name}: seed {seed} skipped: {exc}")
            continue
        for k, a in run.results["accuracy"].items():
            errs.setdefault(k, []).append(a["relative_error"])
    return errs


def main() -> None:
    from testbed.registry import PROTOCOLS

    ap = argparse.ArgumentParser()
    ap.add_argument("protocols", nargs="*")
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    for name in args.protocols or PROTOCOLS.names():
        errs = errors(name, args.seeds)
        tol = PROTOCOLS.get(name).reference_tolerance
        for k, v in errs.items():
            t = tol
            if isinstance(tol, dict):
                t = next((v for g, v in tol.items() if fnmatch.fnmatchcase(k, g)), "-")
            print(
                f"{name:26s} {k:28s} max {max(v):.4g}  median {statistics.median(v):.4g}  "
                f"declared {t}",
                flush=True,
            )


if __name__ == "__main__":
    main()
