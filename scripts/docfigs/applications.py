"""docs/findings/fedwad_applications.md: personalised FL comparisons and what the new messages leak."""

from __future__ import annotations

import numpy as np

from .common import ROOT


def _personalized(scenarios: list[str]) -> dict[str, float]:
    import importlib.util

    root = ROOT
    spec = importlib.util.spec_from_file_location(
        "personalized_comparison", root / "scripts/personalized_comparison.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = {}
    for name in scenarios:
        for k, v in mod.compare(root / "scenarios" / f"{name}.yaml").items():
            out[f"{name}.{k}"] = v
    return out


def personalized_coreset() -> dict[str, float]:
    """docs/findings/fedwad_applications.md: coreset 1-NN vs FedAvg/FedPer/FedRep, with and without class
    structure (``scripts/personalized_comparison.py``)."""
    return _personalized(["fedwad_coreset_digits", "fedwad_coreset_digits_iid"])


def personalized_clustered() -> dict[str, float]:
    """docs/findings/fedwad_applications.md: vanilla vs per-cluster FedAvg/FedPer/FedRep, three partitions."""
    return _personalized(
        ["fedwad_clustered_fl", "fedwad_clustered_fl_random_pairs", "fedwad_clustered_fl_iid"]
    )


def fedwad_applications_attacks() -> dict[str, float]:
    """docs/findings/fedwad_applications.md, "What the new messages leak" (seed 0): the shipped
    scenarios' runs re-attacked by a curious client (``testbed attack RUN --observer c00`` on
    ``fedwad_coreset_digits``, ``--observer client_0`` on ``fedwad_clustered_fl``) and the
    membership figures of ``scripts/coreset_membership.py scenarios/fedwad_coreset_digits.yaml``.
    Per attack the mean over targets (``<attack>.<metric>``), and for the clustered-FL client
    its lowest per-target TV and the mean TV over the other targets."""
    import importlib.util
    import tempfile

    from testbed.run.execute import execute
    from testbed.run.rerun import rerun_attacks
    from testbed.scenario.loading import load_scenario

    root = ROOT
    out: dict[str, float] = {}
    for name, observer in (("fedwad_coreset_digits", "c00"), ("fedwad_clustered_fl", "client_0")):
        with tempfile.TemporaryDirectory(prefix="docs-apps-") as tmp:
            execute(load_scenario(root / "scenarios" / f"{name}.yaml"), tmp)
            rows, _ = rerun_attacks(tmp, observer=observer)
        by: dict[str, list[dict]] = {}
        for a in rows:
            by.setdefault(a["attack"], []).append(a)
        for attack, rs in by.items():
            for k in ("coverage", "coverage_baseline", "w2_ratio", "leakage", "tv", "tv_baseline"):
                vals = [float(a[k]) for a in rs if isinstance(a.get(k), (int, float))]
                if vals:
                    out[f"{name}.{attack}.{k}"] = float(np.mean(vals))
            tvs = sorted(float(a["tv"]) for a in rs if isinstance(a.get("tv"), (int, float)))
            if len(tvs) > 1:
                out[f"{name}.{attack}.tv_min"] = tvs[0]
                out[f"{name}.{attack}.tv_others"] = float(np.mean(tvs[1:]))
    spec = importlib.util.spec_from_file_location(
        "coreset_membership", root / "scripts/coreset_membership.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for k, v in mod.membership(root / "scenarios/fedwad_coreset_digits.yaml").items():
        out[f"membership.{k}"] = v
    return out
