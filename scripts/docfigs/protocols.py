"""docs/reference/protocols.md: the FedWAD, TriangleWad and FedBary tables and claims."""

from __future__ import annotations

import numpy as np

from .common import ROOT, digits


def triangle_bias() -> dict[str, float]:
    """TriangleWad's estimate / exact W2 on digits pixels (0..16): rows 0-299 against rows
    300-445 of load_digits(), t = 0.5, gamma ~ N(0, sigma^2) with k atoms (gamma seed 0)."""
    from testbed import ot as tot
    from testbed.measure import Measure

    X = digits()
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

    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world
    from testbed.scenario.loading import load_scenario

    sc = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
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
    """docs/reference/protocols.md FedBary table: seed-0 contributions (estimate and exact) per scenario."""
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
    """docs/reference/protocols.md FedBary seed claims (seeds 0-7): how often the contributions fall
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
    """docs/reference/protocols.md TriangleWad scenario table: seed 0 and the ranges over seeds 0-4 of
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
    X = digits()
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
    """docs/reference/protocols.md FedWAD table: relative error of the paper mode (S = 10, K = 20,
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


def fedwad_clustering_settings() -> dict[str, float]:
    """docs/reference/protocols.md, FedWAD client clustering (``scenarios/fedwad_clustering.yaml``, seed 0)
    in its four spectral-clustering settings: ARI of the federated and of the exact matrix,
    relative Frobenius error of the federated matrix, messages and FedWAD runs."""

    import yaml

    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world
    from testbed.scenario.loading import parse_scenario

    path = ROOT / "scenarios/fedwad_clustering.yaml"
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
    """docs/reference/protocols.md, FedBary's federated barycenter vs POT's central one (the paper's Fig. 3
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


def fedbary_duplication() -> dict[str, float]:
    """docs/reference/protocols.md, FedBary Table 3 (``protocols.fedbary.duplication_study``): the estimated
    distance of a client repeating its whole dataset x1/x2/x3 and adding 10 copies of its most
    valuable datum. ``toy.*``: the 2-D set-up of ``tests/test_fedbary.py`` (validation 60 rows,
    clients a/b of 40, S = 60, shared gamma, init_scale 2, client a); ``digits_<init>.*``: the
    parties and protocol parameters of ``scenarios/fedbary_valuation.yaml`` (seed 0; S = 300,
    client_1 of 250 clean rows) with ``gamma_init`` shared and per_client."""

    from protocols.fedbary import FedBaryConfig, duplication_study
    from testbed.data.datasets import PartyData
    from testbed.run.roster import build_world
    from testbed.scenario.loading import load_scenario

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
    world = build_world(load_scenario(ROOT / "scenarios/fedbary_valuation.yaml"))
    params = world.rs.configs.protocol.model_dump(mode="json")
    for init in ("shared", "per_client"):
        cfg = FedBaryConfig(**{**params, "gamma_init": init})
        for k, v in duplication_study(cfg, world.parties, "client_1").items():
            out[f"digits_{init}.{k}"] = v
    for k in [k for k in out if k.endswith("whole_x1")]:
        tag = k[: -len(".whole_x1")]
        for f in ("whole_x2", "whole_x3", "datum_x10"):
            out[f"{tag}.{f}.change"] = out[f"{tag}.{f}"] / out[k] - 1
    return out
