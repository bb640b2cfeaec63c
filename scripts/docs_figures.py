"""Regenerate the figures that README.md and docs/ quote, so they are computed, not typed.

``python scripts/docs_figures.py [NAME ...]`` prints each figure (all when no name is given) as
``NAME value`` lines; ``make docs-check`` runs ``tests/test_docs_figures.py`` (slow), which
recomputes them and compares with the numbers written in the docs, within each figure's
tolerance (the rounding of the printed figure, or the 95 % interval over seeds).

The frontier sweeps take tens of minutes on 2 cores; ``DOCS_FIGURES_SWEEPS=DIR`` keeps their run
directories in ``DIR/<scenario>`` and resumes them, so a rerun after a docs edit recomputes only
cells that are not finished there (use a fresh DIR after a code change).

Every figure is deterministic for its seed: data are scikit-learn's digits (no download) and the
Lee corpus that ships with gensim, Word2Vec is trained with a fixed seed and one worker.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np


def _digits() -> np.ndarray:
    from sklearn.datasets import load_digits

    return load_digits().data.astype(np.float64)


def _eta(X: np.ndarray, k: int, t: float, scale: float = 1.0, mean: float = 0.0, seed: int = 0):
    from testbed import ot as tot
    from testbed.measure import Measure

    rng = np.random.default_rng(seed)
    gamma = Measure(mean + rng.normal(0.0, scale, size=(k, X.shape[1])))
    return tot.interpolate_barycentric(Measure(X), gamma, t, side="first"), gamma


def eta_words() -> dict[str, float]:
    """TriangleWad-style eta of Lee document 0 (gamma ~ N(0, 1), one atom per word): share of
    top-1 retrieved words in the document, raw eta at t = 0.9 and 0.5, and after inversion."""
    from attacks.measure_inversion import invert_barycentric_push
    from attacks.word2vec_retrieval import retrieve_words
    from testbed.data.text import document_words, lee_corpus, word2vec
    from testbed.scoring.metrics import matching_rate

    wv = word2vec({})
    doc = document_words(lee_corpus()[0], wv)
    X = np.stack([wv[w] for w in doc]).astype(np.float64)
    out = {}
    for t in (0.9, 0.5):
        eta, gamma = _eta(X, len(doc), t)
        raw, _ = retrieve_words(eta.support, wv)
        out[f"eta_words_t{t}"] = matching_rate(raw, doc)
        inv, _ = retrieve_words(invert_barycentric_push(eta, gamma, t), wv)
        out[f"eta_words_inverted_t{t}"] = matching_rate(inv, doc)
    return out


def eta_inversion() -> dict[str, float]:
    """Exact-recovery rate of inverting eta (t = 0.5, gamma ~ N(0, 1), k atoms) on digits: all
    1797 rows, and the first 901 rows of load_digits() (not a class subset); and with a hidden
    t = 0.3 (k = 10) estimated from the public prior's moments."""
    from attacks.measure_inversion import invert_barycentric_push
    from testbed.scoring.metrics import exact_recovery_rate

    X = _digits()
    out = {}
    for k in (1, 2, 5, 10, 20, 50, 100, 200, 450, 900, 1797):
        eta, gamma = _eta(X, k, 0.5)
        out[f"inversion_all_k{k}"] = exact_recovery_rate(
            invert_barycentric_push(eta, gamma, 0.5), X
        )
    head = X[:901]
    eta, gamma = _eta(head, 10, 0.5)
    out["inversion_first901_k10"] = exact_recovery_rate(
        invert_barycentric_push(eta, gamma, 0.5), head
    )
    # hidden t: estimated from the public prior's moments (the pooled digits' mean, covariance)
    from attacks.measure_inversion import estimate_t

    eta, gamma = _eta(X, 10, 0.3)
    t_hat = estimate_t(eta, gamma, X.mean(0), np.cov(X, rowvar=False))
    out["hidden_t_estimate"] = t_hat
    out["hidden_t_exact"] = exact_recovery_rate(invert_barycentric_push(eta, gamma, t_hat), X)
    return out


def triangle_bias() -> dict[str, float]:
    """TriangleWad's estimate / exact W2 on digits pixels (0..16): rows 0-299 against rows
    300-445 of load_digits(), t = 0.5, gamma ~ N(0, sigma^2) with k atoms (gamma seed 0)."""
    from testbed import ot as tot
    from testbed.measure import Measure

    X = _digits()
    mu, nu = Measure(X[:300]), Measure(X[300:446])
    exact = tot.wasserstein(mu, nu)
    out = {}
    for k, s in ((5, 1.0), (5, 5.0), (5, 20.0), (300, 20.0)):
        rng = np.random.default_rng(0)
        gamma = Measure(rng.normal(0.0, s, size=(k, X.shape[1])))
        a = tot.interpolate_barycentric(mu, gamma, 0.5, side="first")
        b = tot.interpolate_barycentric(nu, gamma, 0.5, side="first")
        out[f"bias_k{k}_s{s:g}"] = tot.wasserstein(a, b) / 0.5 / exact
    return out


def _results(name: str, seed: int | None = None) -> dict:
    """results of ``scenarios/<name>.yaml`` (protocol only, no run directory), at ``seed``."""
    from pathlib import Path

    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world
    from testbed.scenario.schema import load_scenario

    sc = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / f"{name}.yaml")
    if seed is not None:
        sc = sc.model_copy(update={"seed": seed})
    _out = run_and_evaluate(build_world(sc))
    results = _out.results
    return results


FEDBARY = (
    "fedbary_case1_same",
    "fedbary_case2_distributions",
    "fedbary_case3_sizes",
    "fedbary_case4_label_noise",
    "fedbary_valuation",
    "fedbary_no_validation",
)
CLIENTS = [f"client_{i}" for i in range(1, 6)]


def _contributions(r: dict) -> tuple[list[float], list[float]]:
    est = [r["estimates"][f"contribution_{c}"] for c in CLIENTS]
    ref = [r["reference"].get(f"contribution_{c}", float("nan")) for c in CLIENTS]
    return est, ref


def fedbary_tables() -> dict[str, float]:
    """docs/protocols.md FedBary table: seed-0 contributions (estimate and exact) per scenario."""
    out = {}
    for name in FEDBARY:
        r = _results(name)
        est, ref = _contributions(r)
        for i, c in enumerate(CLIENTS):
            out[f"{name}.est.{c}"] = est[i]
            out[f"{name}.exact.{c}"] = ref[i]
            d, dref = r["estimates"][f"distance_{c}"], r["reference"].get(f"distance_{c}")
            if dref:
                out[f"{name}.dist_err.{c}"] = d / dref - 1
    errs = [v for k, v in out.items() if ".dist_err." in k]
    out["dist_err_min"], out["dist_err_max"] = min(errs), max(errs)
    return out


def _auc(r: dict, client: str) -> float:
    d = r["detection"]
    for det in d.values():
        if client in det and det[client].get("roc_auc") is not None:
            return float(det[client]["roc_auc"])
    return float("nan")


def fedbary_seeds() -> dict[str, float]:
    """docs/protocols.md FedBary seed claims (seeds 0-7): how often the contributions fall
    strictly with the noise, and the range of the detection AUCs."""
    out = {}
    seeds = range(8)
    for name in ("fedbary_case4_label_noise", "fedbary_valuation", "fedbary_no_validation"):
        mono = mono_exact = farthest = 0
        aucs: list[float] = []
        for s in seeds:
            r = _results(name, s)
            est, ref = _contributions(r)
            mono += all(a > b for a, b in zip(est, est[1:]))
            mono_exact += all(a > b for a, b in zip(ref, ref[1:]))
            farthest += int(np.argmin(est)) == 4
            if name == "fedbary_case4_label_noise":
                aucs += [_auc(r, c) for c in CLIENTS[1:]]
            elif name == "fedbary_valuation":
                aucs.append(_auc(r, "client_4"))
            else:
                aucs.append(_auc(r, "client_5"))
        out[f"{name}.monotone"] = mono
        out[f"{name}.monotone_exact"] = mono_exact
        out[f"{name}.farthest_last"] = farthest
        out[f"{name}.auc_min"] = float(np.nanmin(aucs))
        out[f"{name}.auc_max"] = float(np.nanmax(aucs))
    return out


def triangle_scenarios() -> dict[str, float]:
    """docs/protocols.md TriangleWad scenario table: seed 0 and the ranges over seeds 0-4 of
    the relative error, the exact and estimated W, the unknown-t vs known-t gap and the
    detection AUCs (``triangle_wad_digits``: server on bob; marketplace: buyer / seller on
    seller_2)."""
    out: dict[str, float] = {}
    cases = {
        "digits": ("triangle_wad_digits", {"auc_server": ("server", "bob")}),
        "market": (
            "triangle_wad_marketplace",
            {"auc_buyer": ("buyer", "seller_2"), "auc_seller": ("seller", "seller_2")},
        ),
    }
    for tag, (name, aucs) in cases.items():
        per: dict[str, list[float]] = {}
        for seed in range(5):
            r = _results(name, seed)
            acc = r["accuracy"]["wasserstein"]
            vals = {
                "error": acc["relative_error"],
                "exact": acc["exact"],
                "estimate": acc["estimate"],
                "unknown_vs_known": (r.get("diagnostics") or {}).get(
                    "unknown_vs_known_relative", float("nan")
                ),
            }
            det = r["detection"]
            for key, (detector, party) in aucs.items():
                vals[key] = det[detector][party]["roc_auc"]
            if tag == "digits":
                vals["precision"] = det["server"]["bob"]["precision_at_rate"]
                vals["recall"] = det["server"]["bob"]["recall_at_rate"]
            for k, v in vals.items():
                per.setdefault(k, []).append(float(v))
        for k, vs in per.items():
            out[f"{tag}.{k}"] = vs[0]
            out[f"{tag}.{k}.min"], out[f"{tag}.{k}.max"] = min(vs), max(vs)
    return out


def _fedwad_case(name: str) -> tuple[np.ndarray, np.ndarray]:
    X = _digits()
    from sklearn.datasets import load_digits

    y = load_digits().target
    rng = np.random.default_rng(0)
    if name == "digits_classes":
        return X[y < 5], X[y >= 5]
    if name == "digits_halves":
        perm = rng.permutation(len(X))
        return X[perm[:898]], X[perm[898:]]
    if name == "gauss_1000_1000":
        return rng.normal(size=(1000, 50)), rng.normal(size=(1000, 50)) + 0.5
    return rng.normal(size=(1000, 50)), rng.normal(size=(333, 50)) * 1.2 + 0.5


def fedwad_modes() -> dict[str, float]:
    """docs/protocols.md FedWAD table: relative error of the paper mode (S = 10, K = 20,
    init_scale 5) and of the accurate mode, and the accurate mode's rounds (protocol rng seed 1,
    as tests/test_fedwad.py); MiB on the wire of each mode."""
    from protocols.fedwad import FedWAD
    from testbed.data.datasets import PartyData
    from testbed.exchange.bus import Bus

    out = {}
    for case in ("digits_classes", "digits_halves", "gauss_1000_1000", "gauss_1000_333"):
        A, B = _fedwad_case(case)
        parties = {"a": PartyData("a", A), "b": PartyData("b", B)}
        for mode, params in (
            ("paper", {"trace": False, "init_scale": 5.0}),
            ("accurate", {"mode": "accurate", "trace": False}),
        ):
            proto = FedWAD.from_params(params)
            bus = Bus(parties=parties)
            res = proto.run(parties, bus, np.random.default_rng(1))
            exact = proto.reference(parties)["wasserstein"]
            out[f"{case}.{mode}"] = (res.estimates["wasserstein"] - exact) / exact
            out[f"{case}.{mode}.mib"] = bus.transcript.nbytes / 2**20
            if mode == "accurate":
                out[f"{case}.rounds"] = float(res.outputs["rounds"])
    return out


def fedwad_toy_attack() -> dict[str, float]:
    """docs/attacks.md, FedWAD 2-D toy (``scenarios/fedwad_gaussians_attack.yaml``): alice's
    W(nu_hat, nu)/W(mu, nu) with the geodesic and the optimisation attack, then the server
    inverting the last interpolants (``rerun_attacks(..., observer="server")``), each target's
    W2 and its public-prior baseline's, divided by W(mu, nu)."""
    import tempfile
    from pathlib import Path

    from testbed.run.execute import execute
    from testbed.run.rerun import rerun_attacks
    from testbed.scenario.schema import load_scenario

    root = Path(__file__).resolve().parents[1]
    out = {}
    with tempfile.TemporaryDirectory(prefix="docs-toy-") as tmp:
        run = execute(load_scenario(root / "scenarios/fedwad_gaussians_attack.yaml"), tmp)
        w = run.results["reference"]["wasserstein"]
        for a in run.results["attacks"]:
            out[f"client_{a['method']}"] = a["w2"] / w
        rows, _ = rerun_attacks(tmp, observer="server")
        for a in rows:
            out[f"server_{a['target']}"] = a["w2"] / w
            out[f"server_{a['target']}_baseline"] = a["w2_baseline"] / w
    return out


def fedwad_clustering_settings() -> dict[str, float]:
    """docs/protocols.md, FedWAD client clustering (``scenarios/fedwad_clustering.yaml``, seed 0)
    in its four spectral-clustering settings: ARI of the federated and of the exact matrix,
    relative Frobenius error of the federated matrix, messages and FedWAD runs."""
    from pathlib import Path

    import yaml

    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world
    from testbed.scenario.schema import parse_scenario

    path = Path(__file__).resolve().parents[1] / "scenarios/fedwad_clustering.yaml"
    raw = yaml.safe_load(path.read_text())
    out = {}
    settings = {
        "affinity": {"setting": "affinity"},
        "gaussian": {"setting": "affinity", "kernel": "gaussian"},
        "sparse3": {"setting": "sparse_graph", "n_neighbors": 3},
        "sparse5": {"setting": "sparse_graph", "n_neighbors": 5},
    }
    for tag, params in settings.items():
        raw["protocol"]["params"].update(params)
        sc = parse_scenario(yaml.safe_dump(raw), str(path), str(path.parent))
        _out = run_and_evaluate(build_world(sc))
        r = _out.results
        out[f"{tag}.ari"] = float(r["estimates"]["ari"])
        out[f"{tag}.exact_ari"] = float(r["reference"]["ari"])
        out[f"{tag}.matrix_error"] = float(r["accuracy"]["distance_matrix"]["relative_error"])
        out[f"{tag}.messages"] = float(r["transcript"]["messages"])
        n = len(r["parties"])
        out[f"{tag}.pairs"] = n * (n - 1) / 2
    return out


def fedbary_barycenter() -> dict[str, float]:
    """docs/protocols.md, FedBary's federated barycenter vs POT's central one (the paper's Fig. 3
    set-up: three 2-D Gaussians of 100 points, t = 0.5, S = 100, seed 0, as
    tests/test_fedbary.py): W2 gap after K = 3, 10, 20 rounds, and the K = 10 gap as a share of
    the clients' mean distance to the central barycenter."""
    from protocols.fedbary import FedBary, FedBaryConfig, central_barycenter
    from testbed import ot as tot
    from testbed.data.datasets import PartyData
    from testbed.exchange.bus import Bus
    from testbed.measure import Measure

    rng = np.random.default_rng(0)
    cov = np.array([[1.0, 0.3], [0.3, 1.0]])
    parties = {
        f"c{i}": PartyData(f"c{i}", rng.multivariate_normal(m, cov, 100))
        for i, m in enumerate([[0.0, 0.0], [6.0, 0.0], [3.0, 5.0]])
    }
    central = central_barycenter(
        [Measure(p.X) for p in parties.values()], rng.normal(size=(100, 2)), iterations=100
    )
    spread = np.mean([tot.wasserstein(Measure(p.X), central) for p in parties.values()])
    out = {}
    for K in (3, 10, 20):
        cfg = FedBaryConfig(support_size=100, iterations=K, return_barycenter=True)
        res = FedBary(cfg).run(parties, Bus(parties=parties), np.random.default_rng(0))
        out[f"gap_k{K}"] = tot.wasserstein(Measure(res.outputs["barycenter"]), central)
    out["gap_k10_share"] = out["gap_k10"] / spread
    return out


def triangle_attacks() -> dict[str, float]:
    """docs/attacks.md: the server inverting TriangleWad's eta (known t, k = 10) in
    ``triangle_wad_digits`` and the buyer trilaterating the sellers in
    ``triangle_wad_marketplace`` (seed 0): exact recovery, coverage and W2 ratio per target."""
    import tempfile
    from pathlib import Path

    from testbed.run.execute import execute
    from testbed.run.rerun import rerun_attacks
    from testbed.scenario.schema import load_scenario

    root = Path(__file__).resolve().parents[1]
    out = {}
    for name, attack, observer in (
        ("triangle_wad_digits", "measure_inversion", "server"),
        ("triangle_wad_marketplace", "marketplace_trilateration", "buyer"),
    ):
        with tempfile.TemporaryDirectory(prefix="docs-triangle-") as tmp:
            execute(load_scenario(root / "scenarios" / f"{name}.yaml"), tmp)
            rows, _ = rerun_attacks(tmp, attacks=[{"name": attack}], observer=observer)
        for a in rows:
            for k in ("exact_recovery", "coverage", "w2_ratio"):
                out[f"{name}.{a['target']}.{k}"] = float(a[k])
    return out


def xi_words() -> dict[str, float]:
    """docs/attacks.md: share of the top-1 words retrieved from FedWAD's xi^K between Lee
    documents 0 and 1 (``scenarios/fedwad_lee_words.yaml``, exact interpolation, K = 5) that are
    in a party's document, its prior-only baseline, and the barycentric variant with S = 20 and
    S = 100 (worst case over the two targets, as the report's any-target figure)."""
    from pathlib import Path

    import yaml

    from testbed.run.execute import execute
    from testbed.scenario.schema import parse_scenario

    path = Path(__file__).resolve().parents[1] / "scenarios/fedwad_lee_words.yaml"
    raw = yaml.safe_load(path.read_text())
    out = {}
    import tempfile

    for tag, params in (
        ("exact", {}),
        ("bary_s20", {"interpolation": "barycentric", "support_size": 20}),
        ("bary_s100", {"interpolation": "barycentric", "support_size": 100}),
    ):
        raw["protocol"]["params"].update(params)
        sc = parse_scenario(yaml.safe_dump(raw), str(path), str(path.parent))
        with tempfile.TemporaryDirectory(prefix="docs-words-") as tmp:
            rows = execute(sc, tmp).results["attacks"]
        out[tag] = max(float(r["matching_rate_any"]) for r in rows)
        out[f"{tag}_baseline"] = max(float(r["matching_rate_any_baseline"]) for r in rows)
    return out


def frontier_fedbary() -> dict[str, float]:
    """docs/frontier.md, data-valuation table (``scenarios/frontier_fedbary.yaml``, seeds 0-2):
    per setting (index in the sweep) the report's mean [95 % interval] of the two utilities, the
    worst leakage and coverage@r, and the largest claimed epsilon over parties."""
    import tempfile
    from pathlib import Path

    from testbed.report.writer import _aggregate
    from testbed.run.sweep import expand_cells, run_sweep
    from testbed.scenario.schema import load_scenario

    sc = load_scenario(Path(__file__).resolve().parents[1] / "scenarios/frontier_fedbary.yaml")
    order = list(dict.fromkeys(next(iter(c.labels.values())) for c in expand_cells(sc)))
    with tempfile.TemporaryDirectory(prefix="docs-frontier-") as tmp:
        rows = run_sweep(sc, tmp, jobs=2).rows
    from testbed.report.writer import _point
    from testbed.scoring.metrics import mean_ci

    agg = _aggregate(rows)
    out = {}
    for (_, point), a in agg.items():
        i = order.index(point)
        for key in ("contribution_spearman", "detection_auc"):
            vals = [float(r["results"]["utility"][key]) for r in rows if _point(r) == point]
            m, lo, hi = mean_ci(vals)
            out[f"{i}.utility.{key}.mean"], out[f"{i}.utility.{key}.lo"] = m, lo
            out[f"{i}.utility.{key}.hi"] = hi
        for key in ("any_attack.leakage", "any_attack.coverage"):
            out[f"{i}.{key}.mean"], out[f"{i}.{key}.lo"], out[f"{i}.{key}.hi"] = a[key]
        # the claim of the parties that sent anything (the validation party sends nothing)
        eps = [v[0] for k, v in a.items() if k.startswith("eps_claimed[")]
        finite = [e for e in eps if np.isfinite(e)]
        out[f"{i}.eps"] = max(finite) if finite else float("inf")
    return out


AUDIT_WORLD = """\
name: docs_audit
seed: 0
data:
  dataset:
    name: gaussians
    params: {d: 2, components: [{n: 20, mean: 0.5, std: 0.2}, {n: 20, mean: 1.0, std: 0.2}]}
  partition: {name: class_subsets, params: {classes: [[0], [1]]}}
  parties: [alice, bob]
protocol: {name: fedwad, params: {support_size: 3, iterations: 1, init_scale: 0.3, trace: false}}
defenses: %s
"""


def audit_canary() -> dict[str, float]:
    """docs/scenarios.md "Auditing a claim": canary audit of a 20-row FedWAD client (S = 3, K = 1,
    200 trials) with no defense and Gaussian noise z = 0.05, 1, 4 (clip 2, push_max 0.5)."""
    from testbed.run.audit import canary_audit
    from testbed.run.roster import build_world
    from testbed.scenario.schema import parse_scenario

    out = {}
    for tag, z in (("none", None), ("z0.05", 0.05), ("z1", 1.0), ("z4", 4.0)):
        defs = (
            "[]"
            if z is None
            else "[{name: gaussian_measure_noise, params: "
            f"{{clip_norm: 2.0, push_max: 0.5, noise_multiplier: {z}}}}}]"
        )
        world = build_world(parse_scenario(AUDIT_WORLD % defs, "docs_audit.yaml", "."))
        r = canary_audit(world, "alice", trials=200)
        out[f"audit_{tag}_claimed"] = r.claimed_epsilon
        out[f"audit_{tag}_audited"] = r.audited_epsilon
    return out


def _distill_summary():
    """``scripts/distill_summary.py`` as a module (the summary the docs' tables come from)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent / "distill_summary.py"
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
    from testbed.scenario.schema import load_scenario

    root = Path(__file__).resolve().parents[1]
    sc = load_scenario(root / "scenarios" / f"{name}.yaml")
    order = list(dict.fromkeys(c.label for c in expand_cells(sc)))
    with tempfile.TemporaryDirectory(prefix="docs-distill-") as tmp:
        run_sweep(sc, tmp, jobs=2)
        rows = _distill_summary().load(Path(tmp))
    return distill_figures(rows, order)


def distill_diabetes() -> dict[str, float]:
    """docs/protocols.md, ordinal task 1 table and central reference (5 seeds x 8 settings)."""
    return _distill("distill_diabetes")


def _logreg_cv(name: str) -> dict[str, float]:
    """How hard the task is: macro-F1 of a logistic regression (scikit-learn defaults,
    ``max_iter=2000``) in stratified 5-fold CV (shuffled, random_state 0) on all of the scenario's
    rows in dataset order, per seed (each seed trains its own Word2Vec); mean and 95 % interval."""
    from pathlib import Path

    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    from testbed.run.roster import build_world
    from testbed.scenario.schema import load_scenario
    from testbed.scoring.metrics import mean_ci

    sc = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / f"{name}.yaml")
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
    """docs/protocols.md, ordinal task 2 table and central reference (5 seeds x 8 settings), and
    the logistic-regression baseline that shows how hard the task is."""
    return _distill("distill_sentiment") | _logreg_cv("distill_sentiment")


def distill_privacy() -> dict[str, float]:
    """docs/protocols.md, privacy table (claimed and audited epsilon, accuracy, SD, membership AUC
    and TPR, label TV and its baseline) and the figures of the text below it."""
    return _distill("distill_privacy")


def _personalized(scenarios: list[str]) -> dict[str, float]:
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
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
    """docs/fedwad_applications.md: coreset 1-NN vs FedAvg/FedPer/FedRep, with and without class
    structure (``scripts/personalized_comparison.py``)."""
    return _personalized(["fedwad_coreset_digits", "fedwad_coreset_digits_iid"])


def personalized_clustered() -> dict[str, float]:
    """docs/fedwad_applications.md: vanilla vs per-cluster FedAvg/FedPer/FedRep, three partitions."""
    return _personalized(
        ["fedwad_clustered_fl", "fedwad_clustered_fl_random_pairs", "fedwad_clustered_fl_iid"]
    )


# --------------------------------------------------------------------------------------------
# docs/frontier.md: the frontier and dataset-distance tables, the Short answer (docsgen)


def _frontier_table(name: str, utility: str) -> dict[str, float]:
    """``scenarios/<name>.yaml`` swept (seeds 0-2, 2 jobs) and summarised by ``python -m
    testbed.scoring.frontier RUN --utility <utility>``: per setting label (``dataset: protocol...``)
    ``<label>.{utility,leakage,coverage}.{mean,lo,hi}`` and ``<label>.eps``; per budget and
    dataset the best setting as ``best.<budget>.<dataset>::<label>`` = its mean utility; for the
    DP baselines ``<label>.{z,op_norm,sigma}.{min,max}`` over seeds (noise multiplier, ||U||_op,
    noise scale); and ``cells``, the number of cells the sweep ran."""
    import os
    import tempfile
    from pathlib import Path

    from testbed.run.sweep import run_sweep
    from testbed.scenario.schema import load_scenario
    from testbed.scoring.frontier import best_per_budget, frontier_rows, setting_label

    sc = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / f"{name}.yaml")
    keep = os.environ.get("DOCS_FIGURES_SWEEPS")
    if keep:  # resume (or start) the sweep in DIR/<name>: finished cells are not recomputed
        rows = run_sweep(sc, Path(keep) / name, jobs=2).rows
    else:
        with tempfile.TemporaryDirectory(prefix="docs-frontier-") as tmp:
            rows = run_sweep(sc, tmp, jobs=2).rows
    table = frontier_rows(rows, utility)
    out: dict[str, float] = {"cells": float(len(rows))}
    for t in table:
        out[f"{t['setting']}.eps"] = float(t["epsilon"])
        for key in ("utility", "leakage", "coverage"):
            m, lo, hi = t[key]
            out[f"{t['setting']}.{key}.mean"] = m
            out[f"{t['setting']}.{key}.lo"], out[f"{t['setting']}.{key}.hi"] = lo, hi
    for b, ds, t in best_per_budget(table):
        out[f"best.{b:g}.{ds}::{t['setting']}"] = t["utility"][0]
    # the DP baselines' noise: z, ||U||_op (sensitivity / 2C) and sigma, lowest and highest seed
    noise: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        o, p = row["results"].get("outputs") or {}, row["results"]["protocol"]["params"]
        if "sigma" in o and "sensitivity" in o and p.get("clip_norm"):
            per = noise.setdefault(setting_label(row), {"z": [], "op_norm": [], "sigma": []})
            per["z"].append(float(o["noise_multiplier"]))
            per["op_norm"].append(float(o["sensitivity"]) / (2 * float(p["clip_norm"])))
            per["sigma"].append(float(o["sigma"]))
    for label, per in noise.items():
        for k, vs in per.items():
            out[f"{label}.{k}.min"], out[f"{label}.{k}.max"] = min(vs), max(vs)
    return out


def frontier_main() -> dict[str, float]:
    """docs/frontier.md, the frontier (``scenarios/frontier.yaml``, seeds 0-2): per setting the
    mean [95 % interval] over seeds of ``utility.distance_accuracy``, the worst attack's leakage
    and coverage@r, the claimed ε; the best setting per budget."""
    return _frontier_table("frontier", "distance_accuracy")


def frontier_matrix() -> dict[str, float]:
    """docs/frontier.md, dataset-distance matrix (``scenarios/frontier_matrix.yaml``, seeds 0-2):
    as :func:`frontier_main` with ``utility.distance_rank``."""
    return _frontier_table("frontier_matrix", "distance_rank")


def mask_in_domain() -> dict[str, float]:
    """docs/frontier.md: ``blind_mask_inversion`` against TriangleWad (k = 1) on digits under the
    shared ``secret_isometry_mask`` (``triangle_wad_digits`` as in
    ``tests/test_secret_mask.py``, seed 0), with the Gaussian prior and with 600 real held-out
    digits as its proxy: coverage@r and leakage (against the prior-only baseline) per party."""
    from dataclasses import replace
    from pathlib import Path

    import yaml

    from attacks.blind_mask_inversion import BlindMaskInversion
    from testbed.report.coverage import _heldout
    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world
    from testbed.scenario.schema import parse_scenario
    from testbed.scoring.metrics import coverage_at_r, w2_leakage

    path = Path(__file__).resolve().parents[1] / "scenarios/triangle_wad_digits.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["protocol"]["params"].update({"support_size": 1, "gamma_mean": 0.5, "gamma_std": 0.5})
    raw["data"]["transform"] = {"name": "scale", "params": {"factor": 0.0625, "clip_norm": 5.0}}
    raw["data"].pop("noise", None)
    raw["defenses"] = [{"name": "secret_isometry_mask"}]
    world = build_world(parse_scenario(yaml.safe_dump(raw), str(path), str(path.parent)))
    _out = run_and_evaluate(world)
    tr = _out.transcript
    public = replace(
        world.public, extra={**world.public.extra, "candidates": _heldout(world)[:600]}
    )
    view = tr.view("server", own_data={p: d.X for p, d in world.parties.items()}, public=public)
    out = {}
    for proxy in ("prior", "candidates"):
        att = BlindMaskInversion(BlindMaskInversion.Config(proxy=proxy))
        base = {b.target: b for b in att.baseline(view, public, np.random.default_rng(0))}
        for o in att.run(view, public, np.random.default_rng(0)):
            X = world.parties[o.target].X
            b = base[o.target]
            out[f"{proxy}.{o.target}.coverage"] = coverage_at_r(o.points, X)["coverage"]
            out[f"{proxy}.{o.target}.leakage"] = w2_leakage(
                o.points, o.weights, X, b.points, b.weights
            )["leakage"]
    return out


# --------------------------------------------------------------------------------------------
# docs/fedwad_applications.md: the curious-client and membership rows of the attack table


def fedwad_applications_attacks() -> dict[str, float]:
    """docs/fedwad_applications.md, "What the new messages leak" (seed 0): the shipped
    scenarios' runs re-attacked by a curious client (``testbed attack RUN --observer c00`` on
    ``fedwad_coreset_digits``, ``--observer client_0`` on ``fedwad_clustered_fl``) and the
    membership figures of ``scripts/coreset_membership.py scenarios/fedwad_coreset_digits.yaml``.
    Per attack the mean over targets (``<attack>.<metric>``), and for the clustered-FL client
    its lowest per-target TV and the mean TV over the other targets."""
    import importlib.util
    import tempfile
    from pathlib import Path

    from testbed.run.execute import execute
    from testbed.run.rerun import rerun_attacks
    from testbed.scenario.schema import load_scenario

    root = Path(__file__).resolve().parents[1]
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


FIGURES: dict[str, Callable[[], dict[str, float]]] = {
    "frontier_fedbary": frontier_fedbary,
    "xi_words": xi_words,
    "triangle_attacks": triangle_attacks,
    "fedbary_barycenter": fedbary_barycenter,
    "fedwad_clustering_settings": fedwad_clustering_settings,
    "fedwad_toy_attack": fedwad_toy_attack,
    "fedwad_modes": fedwad_modes,
    "triangle_scenarios": triangle_scenarios,
    "audit_canary": audit_canary,
    "distill_diabetes": distill_diabetes,
    "distill_sentiment": distill_sentiment,
    "distill_privacy": distill_privacy,
    "fedbary_tables": fedbary_tables,
    "fedbary_seeds": fedbary_seeds,
    "personalized_coreset": personalized_coreset,
    "personalized_clustered": personalized_clustered,
    "eta_words": eta_words,
    "eta_inversion": eta_inversion,
    "triangle_bias": triangle_bias,
}


# --------------------------------------------------------------------------------------------
# docs/protocols.md: FedBary's duplication study (Table 3) (docsgen)


def fedbary_duplication() -> dict[str, float]:
    """docs/protocols.md, FedBary Table 3 (``protocols.fedbary.duplication_study``): the estimated
    distance of a client repeating its whole dataset x1/x2/x3 and adding 10 copies of its most
    valuable datum. ``toy.*``: the 2-D set-up of ``tests/test_fedbary.py`` (validation 60 rows,
    clients a/b of 40, S = 60, shared gamma, init_scale 2, client a); ``digits_<init>.*``: the
    parties and protocol parameters of ``scenarios/fedbary_valuation.yaml`` (seed 0; S = 300,
    client_1 of 250 clean rows) with ``gamma_init`` shared and per_client."""
    from pathlib import Path

    from protocols.fedbary import FedBaryConfig, duplication_study
    from testbed.data.datasets import PartyData
    from testbed.run.roster import build_world
    from testbed.scenario.schema import load_scenario

    rng = np.random.default_rng(0)
    toy = {
        "validation": PartyData("validation", rng.normal(size=(60, 2))),
        "a": PartyData("a", rng.normal(size=(40, 2)) + 0.5),
        "b": PartyData("b", rng.normal(size=(40, 2)) + 1.0),
    }
    cfg = FedBaryConfig(
        validation="validation", support_size=60, gamma_init="shared", init_scale=2.0
    )
    out = {f"toy.{k}": v for k, v in duplication_study(cfg, toy, "a").items()}
    world = build_world(
        load_scenario(Path(__file__).resolve().parents[1] / "scenarios/fedbary_valuation.yaml")
    )
    params = dict(world.resolved["protocol"]["params"])
    for init in ("shared", "per_client"):
        cfg = FedBaryConfig(**{**params, "gamma_init": init})
        for k, v in duplication_study(cfg, world.parties, "client_1").items():
            out[f"digits_{init}.{k}"] = v
    for k in [k for k in out if k.endswith("whole_x1")]:
        tag = k[: -len(".whole_x1")]
        for f in ("whole_x2", "whole_x3", "datum_x10"):
            out[f"{tag}.{f}.change"] = out[f"{tag}.{f}"] / out[k] - 1
    return out


# --------------------------------------------------------------------------------------------
# docs/attacks.md: the FedWAD 2-D toy's optimisation attack, start by start (docsgen)


def fedwad_toy_starts() -> dict[str, float]:
    """docs/attacks.md, FedWAD 2-D toy (``scenarios/fedwad_gaussians_attack.yaml``, seed 0): the
    5 starts of alice's optimisation attack (``restarts: 5``, the attack's own rng:
    ``keyed_rng(attack_key(world), "attack", 1, "fedwad_distributional")``), each start's
    W(nu_hat, nu)/W(mu, nu) and final loss, and the ratio of the lowest-loss start."""
    from pathlib import Path

    import yaml

    from attacks.fedwad_distributional import distributional_optimisation
    from testbed import ot as tot
    from testbed.measure import Measure
    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world
    from testbed.run.view import attack_key
    from testbed.scenario.schema import load_scenario
    from testbed.seeding import keyed_rng

    path = Path(__file__).resolve().parents[1] / "scenarios/fedwad_gaussians_attack.yaml"
    sc = load_scenario(path)
    params = yaml.safe_load(path.read_text())["attacks"][1]["params"]
    world = build_world(sc)
    _out = run_and_evaluate(world)
    results, tr = _out.results, _out.transcript
    alice, bob = world.parties["alice"].X, world.parties["bob"].X
    xi = tr.view("alice").messages("fedwad.xi_final", sender="server", receiver="alice")[-1].payload
    w_hat = float(results["estimates"]["wasserstein"])
    w = tot.wasserstein(Measure(alice), Measure(bob))
    rng = keyed_rng(attack_key(world), "attack", 1, "fedwad_distributional")
    out, losses = {}, []
    for i, sub in enumerate(rng.spawn(params["restarts"])):
        pts, loss = distributional_optimisation(
            Measure(alice), xi, w_hat, len(bob), sub, params["steps"]
        )
        out[f"start{i}.ratio"] = tot.wasserstein(Measure(pts), Measure(bob)) / w
        out[f"start{i}.loss"] = float(loss[-1])
        losses.append(float(loss[-1]))
    ratios = [out[f"start{i}.ratio"] for i in range(len(losses))]
    out["min"], out["max"] = min(ratios), max(ratios)
    out["lowest_loss"] = ratios[int(np.argmin(losses))]
    return out


# --------------------------------------------------------------------------------------------
# docs/trust.md (docsgen)


def trust_renormalise() -> dict[str, float]:
    """docs/trust.md: of the uniform measures with n = 1...1000 atoms (weights 1/n, as
    ``Measure`` builds them), how many a second normalisation ``w / w.sum()`` changes in the last
    bits (each would have broken its transcript digest before ``Measure.restore``)."""
    from testbed.measure import Measure

    changed = 0
    for n in range(1, 1001):
        w = Measure(np.zeros((n, 1))).weights
        changed += not np.array_equal(w / w.sum(), w)
    return {"renormalised_uniform": float(changed)}


# --------------------------------------------------------------------------------------------
# docs/plugins.md: declared tolerances of the built-in protocols (docsgen)


def plugins_tolerances() -> dict[str, float]:
    """docs/plugins.md, "Declared tolerances" (``python scripts/protocol_tolerances.py --seeds
    20``): per protocol and compared key the largest and the median relative error over seeds
    0-19 of its contract scenario (``<protocol>.<key>.{max,median,seeds}``)."""
    import statistics

    from testbed.registry import PROTOCOLS

    mod = _tolerances_module()
    out = {}
    for name in PROTOCOLS.names():
        for k, v in mod.errors(name, 20).items():
            out[f"{name}.{k}.max"], out[f"{name}.{k}.median"] = max(v), statistics.median(v)
            out[f"{name}.{k}.seeds"] = float(len(v))
    return out


# docsgen block: figures of docs/frontier.md, fedwad_applications.md, protocols.md, attacks.md,
# trust.md, plugins.md
FIGURES.update(
    {
        "frontier_main": frontier_main,
        "frontier_matrix": frontier_matrix,
        "mask_in_domain": mask_in_domain,
        "fedwad_applications_attacks": fedwad_applications_attacks,
        "fedbary_duplication": fedbary_duplication,
        "fedwad_toy_starts": fedwad_toy_starts,
        "trust_renormalise": trust_renormalise,
        "plugins_tolerances": plugins_tolerances,
    }
)


# --------------------------------------------------------------------------------------------
# docs/frontier.md: the protocol x threat coverage matrix (docs2)


def coverage_cells() -> dict[str, float]:
    """docs/frontier.md, "Coverage matrix" (``python -m testbed.report.coverage``, seed 0): per protocol
    and threat the best attack's figure (``<protocol>.<threat>.value``) and its baseline
    (``.baseline``), the attack as ``.attack.<name>`` = 1, or ``.not_applicable`` = 1."""
    from testbed.report.coverage import coverage_matrix

    out: dict[str, float] = {}
    for proto, cells in coverage_matrix().items():
        for threat, c in cells.items():
            key = f"{proto}.{threat}"
            if c.get("not_applicable"):
                out[f"{key}.not_applicable"] = 1.0
                continue
            out[f"{key}.attack.{c['attack']}"] = 1.0
            out[f"{key}.value"] = float(c["value"])
            if isinstance(c.get("baseline"), (int, float)):
                out[f"{key}.baseline"] = float(c["baseline"])
    return out


# --------------------------------------------------------------------------------------------
# docs/plugins.md: the FedWAD applications' scorecards, the loose tolerances (docs2)


def _threat_kind(label: str, parties: list[str], clients: list[str]) -> str:
    if label in ("server", "eavesdropper"):
        return label
    if label in parties:
        return "client" if label in clients else "party"
    return "server_coalition" if label.startswith("server+") else "client_coalition"


def scorecards_fedwad_apps() -> dict[str, float]:
    """docs/plugins.md, "Scorecards of the two FedWAD applications" (``testbed scorecard
    fedwad_coreset`` / ``fedwad_clustered_fl``: contract scenarios, seed 7): per accuracy key its
    estimate, exact value, relative error and tolerance; per kind of threat model (server,
    client, party = a non-client party, eavesdropper, server_coalition, client_coalition) the
    near-copy messages, the worst attack's value (``worst.<kind>.{min,max}`` over the threat
    models of that kind) and how many threat models each attack is the worst of
    (``worst_attack.<attack>``), and per attack and headline metric the range over threat
    models and targets (``<kind>.<attack>.<metric>.{min,max}``)."""
    import tempfile

    from testbed.plugins.scorecard import _scenario, scorecard
    from testbed.run.roster import build_world

    out: dict[str, float] = {}
    for name in ("fedwad_coreset", "fedwad_clustered_fl"):
        with tempfile.TemporaryDirectory(prefix="docs-scorecard-") as tmp:
            card = scorecard(name, tmp)
        for k, a in card.accuracy.items():
            for f in ("estimate", "exact", "relative_error", "tolerance"):
                if isinstance(a.get(f), (int, float)):
                    out[f"{name}.{k}.{f}"] = float(a[f])
        world = build_world(_scenario(name))
        parties = list(world.parties)
        roles = world.protocol.roles(world.parties)
        clients = [p for p in parties if "client" in roles.get(p, "")]
        kinds = {t["label"]: _threat_kind(t["label"], parties, clients) for t in card.threats}
        out[f"{name}.threats"] = float(len(kinds))
        for label, w in card.worst().items():
            kind = kinds[label]
            key = f"{name}.near_copies.{kind}"
            out[key] = out.get(key, 0.0) + w["near_copy_messages"]
            if w["value"] is None:
                continue
            key = f"{name}.worst_attack.{w['attack']}"
            out[key] = out.get(key, 0.0) + 1
            lo, hi = f"{name}.worst.{kind}.min", f"{name}.worst.{kind}.max"
            out[lo] = min(out.get(lo, np.inf), w["value"])
            out[hi] = max(out.get(hi, -np.inf), w["value"])
        for r in card.attacks:
            if r["value"] is None:
                continue
            key = f"{name}.{kinds[r['threat']]}.{r['attack']}.{r['metric']}"
            out[f"{key}.min"] = min(out.get(f"{key}.min", np.inf), r["value"])
            out[f"{key}.max"] = max(out.get(f"{key}.max", -np.inf), r["value"])
    return out


def _tolerances_module():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "protocol_tolerances", Path(__file__).resolve().parent / "protocol_tolerances.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def plugins_loose_tolerances() -> dict[str, float]:
    """docs/plugins.md, the paragraph after "Declared tolerances" (contract scenarios, seeds
    0-19): per key the ``dp_jl_ot`` seeds clamped to relative error 1, its largest error without noise
    (``noise_multiplier: 0``); ``fedwad_coreset``'s largest federated / central coreset W2; the
    scaffolded example's (``testbed new-protocol``) largest error."""
    import importlib
    import tempfile

    import yaml

    from testbed.plugins.scaffold import new_protocol
    from testbed.registry import PROTOCOLS
    from testbed.scenario.schema import parse_scenario
    from testbed.testing.protocol_checks import _run, protocol_scenario

    mod = _tolerances_module()
    out: dict[str, float] = {}
    for k, v in mod.errors("dp_jl_ot", 20).items():
        out[f"dp_jl_ot.{k}.clamped_seeds"] = float(sum(e >= 1 - 1e-12 for e in v))
    base = protocol_scenario(PROTOCOLS.get("dp_jl_ot"))
    noiseless = []
    ratios = []
    core = protocol_scenario(PROTOCOLS.get("fedwad_coreset"))
    for seed in range(20):
        raw = {**base._raw, "seed": seed}
        raw["protocol"] = {
            **raw["protocol"],
            "params": {**raw["protocol"]["params"], "noise_multiplier": 0.0},
        }
        run = _run(parse_scenario(yaml.safe_dump(raw), base._fname, base._base_dir))
        noiseless += [a["relative_error"] for a in run.results["accuracy"].values()]
        raw = {**core._raw, "seed": seed}
        run = _run(parse_scenario(yaml.safe_dump(raw), core._fname, core._base_dir))
        a = run.results["accuracy"]["coreset_wasserstein"]
        ratios.append(a["estimate"] / a["exact"])
    out["dp_jl_ot.noiseless.max"] = max(noiseless)
    out["fedwad_coreset.ratio.max"] = max(ratios)
    name = "docs_anchor_sketch"
    with tempfile.TemporaryDirectory(prefix="docs-scaffold-") as tmp:
        root = f"{tmp}/{name}"
        new_protocol(name, root)
        sys.path.insert(0, root)
        try:
            cls = importlib.import_module(f"{name}.protocol").DocsAnchorSketch
            PROTOCOLS.register(cls)
            errs = mod.errors(name, 20)
        finally:
            PROTOCOLS._items.pop(name, None)
            PROTOCOLS._origins.pop(name, None)
            sys.path.remove(root)
            for m in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[m]
    out["scaffold.max"] = max(max(v) for v in errs.values())
    return out


def scorecard_toy() -> dict[str, float]:
    """docs/plugins.md, "The scorecard": ``testbed scorecard toy_leaky_mean`` (the leaky toy of
    ``tests/_toy_protocols.py``, registered for the call): per threat model the messages with
    near-copies of private rows (``<label>.near_copies``) and whose rows
    (``<label>.rows_of.<party>`` = 1); per target, ``sent_rows``'s exact recovery and recovered
    rate and rows under each threat model
    (``<label>.sent_rows.<target>.{exact_recovery,exact_rows}``)."""
    import tempfile
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    from testbed.plugins.scorecard import _scenario, scorecard
    from testbed.run.roster import build_world
    from tests._toy_protocols import LeakyMean, registered

    out: dict[str, float] = {}
    with registered(LeakyMean), tempfile.TemporaryDirectory(prefix="docs-toy-card-") as tmp:
        card = scorecard("toy_leaky_mean", tmp)
        sizes = {p: d.n for p, d in build_world(_scenario("toy_leaky_mean")).parties.items()}
    for label, w in card.worst().items():
        out[f"{label}.near_copies"] = float(w["near_copy_messages"])
        for p in w["rows_of"]:
            out[f"{label}.rows_of.{p}"] = 1.0
    for r in card.attacks:
        if r["attack"] == "sent_rows" and "exact_recovery" in r["metrics"]:
            key = f"{r['threat']}.sent_rows.{r['target']}"
            out[f"{key}.exact_recovery"] = float(r["metrics"]["exact_recovery"])
            out[f"{key}.exact_rows"] = round(r["metrics"]["exact_recovery"] * sizes[r["target"]])
    return out


# docs2 block: the coverage matrix (docs/frontier.md) and the scorecards (docs/plugins.md)
FIGURES.update(
    {
        "coverage_cells": coverage_cells,
        "scorecards_fedwad_apps": scorecards_fedwad_apps,
        "plugins_loose_tolerances": plugins_loose_tolerances,
        "scorecard_toy": scorecard_toy,
    }
)


def main(argv: list[str]) -> int:
    names = argv or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        print(
            f"docs_figures: unknown figure {unknown[0]!r}; known: {', '.join(FIGURES)}",
            file=sys.stderr,
        )
        return 2
    for n in names:
        for k, v in FIGURES[n]().items():
            print(f"{k} {v:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
