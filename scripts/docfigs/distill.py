"""docs/reference/protocols.md, Sinkhorn distillation: the ordinal-task and privacy tables."""

from __future__ import annotations

import numpy as np

from .common import ROOT


def _distill_summary():
    """``scripts/distill_summary.py`` as a module (the summary the docs' tables come from)."""
    import importlib.util

    path = ROOT / "scripts" / "distill_summary.py"
    spec = importlib.util.spec_from_file_location("distill_summary", path)
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    return summary


DISTILL_METRICS = ("macro_f1", "accuracy", "semantic_distance")


def distill_figures(rows: list[dict], order: list[str]) -> dict[str, float]:
    """Summarise a distillation sweep's ``results.jsonl`` rows as ``scripts/distill_summary.py``
    does. The setting is ``<loss>.<weighting>`` for the loss x weighting sweeps, else its index in
    ``order`` (the sweep's labels). Keys: ``<setting>.<metric>.{mean,lo,hi}`` (95 % interval over
    seeds and, for attacks on several targets, targets), ``<setting>.<metric>.seed<s>`` (each
    seed's value, the mean over targets), and the paired per-seed
    differences (same seed = same split and teachers) ``sinkhorn-entropy.<w>.<metric>.*``,
    ``E-A.<loss>.<metric>.*``, or for other sweeps ``<i>-0.<metric>.*`` (setting i minus the
    first)."""
    import re

    from testbed.scoring.metrics import mean_ci

    summary = _distill_summary()

    def key_of(lab: str) -> str:
        m = re.fullmatch(r"protocol\.params\.loss=(\w+), protocol\.params\.weighting=(\w)", lab)
        return f"{m.group(1)}.{m.group(2)}" if m else str(order.index(lab))

    out: dict[str, float] = {}

    def put(key: str, vals: list[float]) -> None:
        finite = [v for v in vals if np.isfinite(v)]
        if finite:
            out[f"{key}.mean"], out[f"{key}.lo"], out[f"{key}.hi"] = mean_ci(finite)

    points, _ = summary.summarise(rows)
    for lab, metrics in points.items():
        for metric, vals in metrics.items():
            put(f"{key_of(lab)}.{metric}", vals)
    per_seed: dict[tuple, float] = {}  # (setting, seed, metric) -> value, every metric
    for r in rows:
        k = key_of(r["label"])
        for metric, vals in summary.summarise([r])[0][r["label"]].items():
            v = float(np.mean(vals))  # one value per attacked target (label TV: every client)
            per_seed[(k, r["seed"], metric)] = v
            out[f"{k}.{metric}.seed{r['seed']}"] = v
    keys = list(dict.fromkeys(key_of(lab) for lab in order))
    pairs = []
    for w in "ADUE":
        pairs.append((f"sinkhorn-entropy.{w}", f"sinkhorn.{w}", f"entropy.{w}"))
    for loss in ("sinkhorn", "entropy"):
        pairs.append((f"E-A.{loss}", f"{loss}.E", f"{loss}.A"))
    pairs += [(f"{k}-{keys[0]}", k, keys[0]) for k in keys[1:] if k.isdigit()]
    for name, a, b in pairs:
        if a in keys and b in keys:
            for metric in DISTILL_METRICS:
                put(f"{name}.{metric}", summary.paired_values(per_seed, a, b, metric))
    return out


def _distill(name: str) -> dict[str, float]:
    """Run the ``scenarios/<name>.yaml`` sweep (all seeds, 2 jobs) in a temporary directory and
    summarise it (``distill_figures``)."""
    import tempfile
    from pathlib import Path

    from testbed.run.sweep import expand_cells, run_sweep
    from testbed.scenario.loading import load_scenario

    root = ROOT
    sc = load_scenario(root / "scenarios" / f"{name}.yaml")
    order = list(dict.fromkeys(c.label for c in expand_cells(sc)))
    with tempfile.TemporaryDirectory(prefix="docs-distill-") as tmp:
        run_sweep(sc, tmp, jobs=2)
        rows = _distill_summary().load(Path(tmp))
    return distill_figures(rows, order)


def distill_diabetes() -> dict[str, float]:
    """docs/reference/protocols.md, ordinal task 1 table and central reference (5 seeds x 8 settings)."""
    return _distill("distill_diabetes")


def _logreg_cv(name: str) -> dict[str, float]:
    """How hard the task is: macro-F1 of a logistic regression (scikit-learn defaults,
    ``max_iter=2000``) in stratified 5-fold CV (shuffled, random_state 0) on all of the scenario's
    rows in dataset order, per seed (each seed trains its own Word2Vec); mean and 95 % interval."""

    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    from testbed.run.roster import build_world
    from testbed.scenario.loading import load_scenario
    from testbed.scoring.metrics import mean_ci

    sc = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
    scores = []
    for seed in sc.seeds:
        parties = list(build_world(sc.model_copy(update={"seed": seed})).parties.values())
        order = np.argsort(np.concatenate([p.source_index for p in parties]))
        X = np.vstack([p.X for p in parties])[order]
        y = np.concatenate([p.y for p in parties])[order]
        cv = StratifiedKFold(5, shuffle=True, random_state=0)
        lr = LogisticRegression(max_iter=2000)
        scores.append(float(cross_val_score(lr, X, y, cv=cv, scoring="f1_macro").mean()))
    out = {f"logreg_cv_macro_f1.seed{s}": v for s, v in zip(sc.seeds, scores)}
    m, lo, hi = mean_ci(scores)
    out["logreg_cv_macro_f1.mean"], out["logreg_cv_macro_f1.lo"] = m, lo
    out["logreg_cv_macro_f1.hi"] = hi
    return out


def distill_sentiment() -> dict[str, float]:
    """docs/reference/protocols.md, ordinal task 2 table and central reference (5 seeds x 8 settings), and
    the logistic-regression baseline that shows how hard the task is."""
    return _distill("distill_sentiment") | _logreg_cv("distill_sentiment")


def distill_privacy() -> dict[str, float]:
    """docs/reference/protocols.md, privacy table (claimed and audited epsilon, accuracy, SD, membership AUC
    and TPR, label TV and its baseline) and the figures of the text below it."""
    return _distill("distill_privacy")
