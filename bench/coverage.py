"""Protocol × threat coverage matrix: the best attack's figure in every cell, measured, or
"not applicable" with the reason (issue 13). Written as data for the report to render.

``python -m bench.coverage [--out docs/findings/coverage.json]`` runs every measured cell on a shipped
scenario (seed 0, the server observing unless stated) and writes ``{protocol: {threat: cell}}``;
a cell is ``{"attack", "scenario", "metric", "value", "baseline", "note"}`` or
``{"not_applicable": reason}``. Figures: reconstruction — coverage@r of the private rows (share
within the median leave-one-out nearest-neighbour distance; baseline = the public prior's);
membership — ROC-AUC of ``reconstruction_membership`` (or the protocol's own membership attack)
on candidates = the target's rows and as many held-out rows of the same dataset (rows no party
holds); attribute/label — total-variation distance of the inferred label histogram; text — the
matching rate of ``word2vec_retrieval``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

__all__ = ["SPECS", "THREATS", "coverage_matrix", "main"]

ROOT = Path(__file__).resolve().parents[1]
THREATS = ("reconstruction", "membership", "attribute_label", "text_retrieval")

_NO_LABELS = (
    "messages carry feature measures only, no labels (labels enter only as OTDD-augmented features)"
)
_NO_TEXT = (
    "not run on text in the testbed: the Word2Vec retrieval attack needs word-vector supports"
)

#: protocol -> threat -> ("measure", scenario, protocol override, attack spec, extra) or reason
SPECS: dict[str, dict[str, Any]] = {
    "fedwad": {
        "reconstruction": ("fedwad_digits.yaml", None, {"name": "fedwad_distributional"}),
        "membership": (
            "triangle_wad_digits.yaml",
            {
                "name": "fedwad",
                "params": {"support_size": 10, "iterations": 10, "t": 0.5, "init_scale": 5.0},
            },
            {
                "name": "reconstruction_membership",
                "params": {"reconstruction": "fedwad_distributional"},
            },
        ),
        "attribute_label": _NO_LABELS,
        "text_retrieval": ("fedwad_lee_words.yaml", None, {"name": "word2vec_retrieval"}),
    },
    "triangle_wad": {
        "reconstruction": ("triangle_wad_digits.yaml", None, {"name": "measure_inversion"}),
        "membership": (
            "triangle_wad_digits.yaml",
            None,
            {
                "name": "reconstruction_membership",
                "params": {"reconstruction": "measure_inversion"},
            },
        ),
        "attribute_label": _NO_LABELS,
        "text_retrieval": (
            "fedwad_lee_words.yaml",
            {"name": "triangle_wad", "params": {"support_size": 5, "t": 0.5}},
            {"name": "word2vec_retrieval"},
        ),
    },
    "triangle_wad_marketplace": {
        "reconstruction": (
            "triangle_wad_marketplace.yaml",
            None,
            {"name": "marketplace_trilateration"},
            "buyer",
        ),
        "membership": "the buyer reconstructs every seller row exactly (reconstruction cell); membership is implied (AUC 1 for any candidate set)",
        "attribute_label": _NO_LABELS,
        "text_retrieval": _NO_TEXT,
    },
    "fedbary": {
        "reconstruction": ("fedbary_no_validation.yaml", None, {"name": "fedbary_inversion"}),
        "membership": (
            "fedbary_no_validation.yaml",
            None,
            {
                "name": "reconstruction_membership",
                "params": {"reconstruction": "fedbary_inversion"},
            },
        ),
        "attribute_label": _NO_LABELS,
        "text_retrieval": (
            "fedwad_lee_words.yaml",
            {
                "name": "fedbary",
                "params": {"iterations": 3, "support_size": 20, "t": 0.5, "gamma_init": "shared"},
            },
            {"name": "word2vec_retrieval"},
        ),
    },
    "fedwad_clustering": {
        "reconstruction": (
            "contract_tiny_fedwad_clustering.yaml",
            None,
            {"name": "clustering_inversion"},
        ),
        "membership": "its clients hold whole label classes in the shipped scenarios (no held-out rows of the same distribution to draw non-members from); see the fedwad membership cell for the same messages",
        "attribute_label": "the server learns which clients share label sets: that is the protocol's output (the clustering), not a leak beyond it",
        "text_retrieval": _NO_TEXT,
    },
    "fedwad_coreset": {
        "reconstruction": ("fedwad_coreset_digits.yaml", None, {"name": "coreset_inversion"}),
        "membership": "every digits row is held by a client or the test party in the shipped scenario (no rows outside the parties to draw non-members from); docs/findings/fedwad_applications.md measures membership with the test party's rows as non-members",
        "attribute_label": (
            "fedwad_coreset_digits.yaml",
            None,
            {"name": "coreset_label_inference"},
        ),
        "text_retrieval": _NO_TEXT,
    },
    "fedwad_clustered_fl": {
        "reconstruction": "its FedWAD messages are fedwad_clustering's on OTDD-augmented rows (see that row); the model updates are not inverted here (no gradient-inversion attack in the testbed)",
        "membership": "every digits row is held by a client in the shipped scenario (no rows outside the parties to draw non-members from)",
        "attribute_label": (
            "fedwad_clustered_fl.yaml",
            None,
            {"name": "clustered_fl_label_inference"},
        ),
        "text_retrieval": _NO_TEXT,
    },
    "sinkhorn_distillation": {
        "reconstruction": "only soft labels on the public transfer set cross the bus; no feature vector of a private row is sent",
        "membership": (
            "distill_mia_tiny.yaml",
            None,
            {"name": "soft_label_membership", "target": "client_0"},
        ),
        "attribute_label": (
            "distill_mia_tiny.yaml",
            None,
            {"name": "label_distribution_inference", "params": {"method": "ratio"}},
        ),
        "text_retrieval": "the transfer set is public; no private word vector is sent",
    },
    "dp_sliced_wasserstein": {
        "reconstruction": (
            "triangle_wad_digits.yaml",
            {
                "name": "dp_sliced_wasserstein",
                "params": {"clip_norm": 100.0, "target_epsilon": 10.0},
            },
            {"name": "projection_inversion"},
        ),
        "membership": (
            "triangle_wad_digits.yaml",
            {
                "name": "dp_sliced_wasserstein",
                "params": {"clip_norm": 100.0, "target_epsilon": 10.0},
            },
            {
                "name": "reconstruction_membership",
                "params": {"reconstruction": "projection_inversion"},
            },
        ),
        "attribute_label": _NO_LABELS,
        "text_retrieval": _NO_TEXT,
    },
    "dp_jl_ot": {
        "reconstruction": (
            "triangle_wad_digits.yaml",
            {"name": "dp_jl_ot", "params": {"clip_norm": 100.0, "target_epsilon": 10.0}},
            {"name": "projection_inversion"},
        ),
        "membership": (
            "triangle_wad_digits.yaml",
            {"name": "dp_jl_ot", "params": {"clip_norm": 100.0, "target_epsilon": 10.0}},
            {
                "name": "reconstruction_membership",
                "params": {"reconstruction": "projection_inversion"},
            },
        ),
        "attribute_label": _NO_LABELS,
        "text_retrieval": _NO_TEXT,
    },
    "dp_gaussian_moments": {
        "reconstruction": (
            "triangle_wad_digits.yaml",
            {
                "name": "dp_gaussian_moments",
                "params": {"clip_norm": 100.0, "target_epsilon": 10.0, "covariance": "diagonal"},
            },
            {"name": "moments_sampling"},
        ),
        "membership": (
            "triangle_wad_digits.yaml",
            {
                "name": "dp_gaussian_moments",
                "params": {"clip_norm": 100.0, "target_epsilon": 10.0, "covariance": "diagonal"},
            },
            {"name": "reconstruction_membership", "params": {"reconstruction": "moments_sampling"}},
        ),
        "attribute_label": _NO_LABELS,
        "text_retrieval": _NO_TEXT,
    },
}


def _scenario(name: str, protocol, attack, observer: str) -> Any:
    from testbed.scenario.loading import load_scenario

    sc = yaml.safe_load((ROOT / "scenarios" / name).read_text())
    if protocol is not None:
        sc["protocol"] = protocol
    sc["attacks"] = [attack] if attack["name"] != "reconstruction_membership" else []
    sc["threat_model"] = {"observer": observer}
    sc["defenses"] = []
    sc.pop("seeds", None)
    sc.pop("sweep", None)
    sc["output"] = {"save_transcript": False}
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(sc, f)
    return load_scenario(f.name)


def _heldout(world) -> np.ndarray:
    """Rows of the dataset that no party holds, transformed like the parties' rows."""
    from testbed.data.datasets import PartyData
    from testbed.registry import DATASETS, TRANSFORMS
    from testbed.seeding import component_rng

    sc = world.scenario
    cfg = world.rs.configs
    ds = DATASETS.get(sc.data.dataset.name)(cfg.dataset).load(component_rng(sc.seed, "data"))
    used = np.concatenate(
        [p.source_index for p in world.parties.values() if p.source_index is not None]
    )
    rest = np.setdiff1d(np.arange(ds.X.shape[0]), used)
    X = np.asarray(ds.X[rest], dtype=np.float64)
    if sc.data.transform is not None:
        t = TRANSFORMS.get(sc.data.transform.name)(cfg.transform)
        X = t.apply(PartyData("heldout", X)).X
    return X


def _measure(protocol: str, threat: str, spec) -> dict:
    from attacks import ReconstructionMembership
    from testbed.run import execute
    from testbed.run.execute import attack_and_score
    from testbed.scoring.metrics import membership_metrics

    scenario, proto, attack = spec[:3]
    observer = spec[3] if len(spec) > 3 else "server"
    run = execute(_scenario(scenario, proto, attack, observer), until="results", write=False)
    world, results, tr = run.world, run.results, run.transcript
    base = {"attack": attack["name"], "scenario": f"scenarios/{scenario}", "observer": observer}
    if proto is not None:
        base["protocol_params"] = proto.get("params", {})
    if attack["name"] == "reconstruction_membership":
        rng = np.random.default_rng(0)
        held = _heldout(world)
        aucs = {}
        for target, d in world.parties.items():
            k = min(50, d.n, held.shape[0])
            if k < 5:
                continue
            mem = d.X[rng.choice(d.n, k, replace=False)]
            non = held[rng.choice(held.shape[0], k, replace=False)]
            cand = np.vstack([mem, non])
            public = replace(
                world.public,
                extra={
                    **world.public.extra,
                    "candidates": {target: cand},
                    "released": results["estimates"],
                },
            )
            own = {p: v.X for p, v in world.parties.items()}
            view = tr.view(observer, own_data=own, public=public)
            att = ReconstructionMembership(ReconstructionMembership.Config(**attack["params"]))
            for out in att.run(view, public, np.random.default_rng(1)):
                if out.target == target:
                    m = membership_metrics(out.scores, np.r_[np.ones(k, bool), np.zeros(k, bool)])
                    aucs[target] = m["auc"]
        if not aucs:
            return {
                **base,
                "not_applicable": "no target with held-out rows to draw non-members from",
            }
        best = max(aucs, key=aucs.get)
        return {
            **base,
            "metric": "roc_auc",
            "value": aucs[best],
            "baseline": 0.5,
            "target": best,
            "note": f"{len(aucs)} targets, 50 members + 50 held-out rows each",
        }
    rows = attack_and_score(world, tr, released=results["estimates"])
    failed = [r for r in rows if "failed" in r]
    rows = [r for r in rows if "failed" not in r]
    if failed and not rows:
        reason = f"the attack failed in {failed[0]['failed']}: {failed[0]['reason']}"
        return {**base, "not_applicable": reason}
    if not rows:
        return {**base, "not_applicable": "the attack produced no output on this scenario"}
    kind = rows[0].get("kind")
    # kind -> (figure key, its baseline key, metric name, sign: +1 higher = more leakage)
    key, base_key, metric, sign = _FIGURES.get(kind, _FIGURES["words"])
    best = max(rows, key=lambda r: sign * (r.get(key) if r.get(key) is not None else -sign))
    cell = {
        **base,
        "metric": metric,
        "value": best.get(key),
        "baseline": best.get(base_key),
        "target": best["target"],
    }
    if kind == "points":
        cell.update(leakage=best.get("leakage"), exact_recovery=best.get("exact_recovery"))
    return cell


_FIGURES = {
    "points": ("coverage", "coverage_baseline", "coverage@r", 1),
    "scores": ("auc", "baseline_auc", "roc_auc", 1),
    "histogram": ("tv", "tv_baseline", "tv_distance (lower = more leakage)", -1),
    "words": ("matching_rate", "matching_rate_baseline", "matching_rate", 1),
}


def coverage_matrix(progress: bool = False) -> dict:
    """Run every measured cell; ``{protocol: {threat: cell}}``."""
    out: dict[str, dict] = {}
    items = [(p, t, SPECS[p][t]) for p in SPECS for t in THREATS]
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc="coverage", unit="cell")
    for p, t, spec in items:
        if isinstance(spec, str):
            out.setdefault(p, {})[t] = {"not_applicable": spec}
        else:
            out.setdefault(p, {})[t] = _measure(p, t, spec)
    return out


def main(argv: list[str] | None = None) -> int:
    from testbed.exchange.bus import atomic_write_bytes
    from testbed.run.results import jsonable

    ap = argparse.ArgumentParser(prog="python -m bench.coverage", description=__doc__)
    ap.add_argument("--out", default="docs/findings/coverage.json")
    a = ap.parse_args(argv)
    m = coverage_matrix(progress=True)
    atomic_write_bytes(
        Path(a.out), (json.dumps(jsonable(m), indent=2, sort_keys=True) + "\n").encode()
    )
    for p, cells in m.items():
        for t, c in cells.items():
            v = c.get("not_applicable")
            fig = (
                f"n/a: {v}"
                if v
                else f"{c['attack']}: {c['metric']} {c['value']:.3f} (baseline {c.get('baseline')})"
            )
            print(f"{p:26s} {t:16s} {fig}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
