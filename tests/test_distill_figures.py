"""scripts/docs_figures.py ``distill_figures``: the summary docs-check compares with the
distillation tables of docs/reference/protocols.md (fast: synthetic sweep rows, no training)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def figures():
    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "scripts/docs_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(label: str, seed: int, f1: float, auc: float | None = None, eps=None) -> dict:
    attacks = []
    if auc is not None:
        attacks = [
            {"attack": "soft_label_membership", "target": "c0", "auc": auc, "epsilon_lb": 0.0},
            {"attack": "soft_label_membership", "target": "c0", "auc": 1 - auc},
        ]
        tv = {"attack": "label_distribution_inference", "method": "ratio"}
        attacks += [{**tv, "target": "c0", "tv": 0.1}, {**tv, "target": "c1", "tv": 0.3}]
    return {
        "label": label,
        "seed": seed,
        "results": {
            "estimates": {"macro_f1": f1, "accuracy": f1 / 2, "semantic_distance": 1 - f1},
            "reference": {"macro_f1": 0.5},
            "attacks": attacks,
            "privacy": {} if eps is None else {"c0": {"epsilon": eps}},
        },
    }


LOSS = "protocol.params.loss={}, protocol.params.weighting={}"


def test_loss_weighting_sweep(figures):
    labels = [LOSS.format(loss, w) for loss in ("sinkhorn", "entropy") for w in "AE"]
    f1 = {  # (loss, weighting) -> per-seed macro-F1
        ("sinkhorn", "A"): [0.30, 0.40, 0.50],
        ("sinkhorn", "E"): [0.319, 0.420, 0.521],
        ("entropy", "A"): [0.20, 0.40, 0.60],
        ("entropy", "E"): [0.20, 0.40, 0.60],
    }
    rows = [_row(LOSS.format(loss, w), s, v[s]) for (loss, w), v in f1.items() for s in range(3)]
    fig = figures.distill_figures(rows, labels)
    assert fig["sinkhorn.A.macro_f1.mean"] == pytest.approx(0.4)
    assert fig["sinkhorn.E.macro_f1.seed2"] == pytest.approx(0.521)
    assert fig["entropy.A.reference_macro_f1.mean"] == pytest.approx(0.5)
    # paired per seed: E - A under Sinkhorn is +0.019, +0.020, +0.021 (resolved: the interval
    # excludes 0), though both settings' own intervals overlap widely
    assert fig["E-A.sinkhorn.macro_f1.mean"] == pytest.approx(0.02)
    assert 0 < fig["E-A.sinkhorn.macro_f1.lo"] < 0.02 < fig["E-A.sinkhorn.macro_f1.hi"] < 0.05
    assert fig["E-A.entropy.macro_f1.mean"] == pytest.approx(0.0)
    assert fig["sinkhorn-entropy.A.macro_f1.mean"] == pytest.approx(0.0)
    assert fig["sinkhorn-entropy.A.macro_f1.lo"] < -0.1  # -0.1, 0, +0.1 per seed
    assert fig["sinkhorn-entropy.A.semantic_distance.mean"] == pytest.approx(0.0)
    assert "sinkhorn-entropy.D.macro_f1.mean" not in fig  # D is not in this sweep


def test_indexed_sweep_with_attacks(figures):
    labels = ["defenses=none", "defenses=dp"]
    rows = [_row(labels[0], s, 0.6, auc=0.6 + 0.01 * s, eps=math.inf) for s in range(3)]
    rows += [_row(labels[1], s, 0.5 - 0.01 * s, auc=0.5, eps=2.0) for s in range(3)]
    fig = figures.distill_figures(rows, labels)
    assert fig["0.soft_label_membership#1.auc.seed1"] == pytest.approx(0.61)
    assert fig["0.soft_label_membership#2.auc.seed1"] == pytest.approx(0.39)  # second spec
    # one attack on two targets: pooled in the mean, averaged in each seed's value
    assert fig["1.label_distribution_inference[ratio]#1.tv.mean"] == pytest.approx(0.2)
    assert fig["1.label_distribution_inference[ratio]#1.tv.seed2"] == pytest.approx(0.2)
    assert math.isinf(fig["0.claimed_eps[c0].seed0"])
    assert "0.claimed_eps[c0].mean" not in fig  # no finite claim
    assert fig["1.claimed_eps[c0].mean"] == pytest.approx(2.0)
    # setting 1 minus setting 0, paired per seed: accuracy (0.5 - 0.01 s) / 2 - 0.3
    assert fig["1-0.accuracy.mean"] == pytest.approx(-0.055)
    assert fig["1-0.macro_f1.mean"] == pytest.approx(-0.11)
