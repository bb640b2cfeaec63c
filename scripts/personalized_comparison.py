"""FedWAD's applications beside personalised FL (FedPer, FedRep) and FedAvg, same clients.

``python scripts/personalized_comparison.py SCENARIO [SCENARIO ...]`` runs each scenario (a
``fedwad_coreset`` or ``fedwad_clustered_fl`` one) in a temporary directory, rebuilds the same
clients from the scenario's seed, trains FedAvg / FedPer / FedRep on them
(:mod:`protocols._personalized`) and prints ``name key value`` lines:

- ``fedwad_coreset``: the global 1-NN classifier of per-client coresets, scored as the
  personalised methods are: every client on the ``test`` party's rows of its own classes (the
  paper's setting: test samples distributed so that each client sees its own classes); the
  test-row-weighted mean is ``knn_client``; ``knn_global`` is the whole test party. The MLPs
  train on every row of each client, pixels divided by 16 (their public range).
- ``fedwad_clustered_fl``: the protocol's own numbers (``protocol_*``), then each method on a
  seeded 75/25 split of every client's rows, over all clients (``vanilla_*``) and inside the
  clusters the run found (``clustered_*``): the paper's Table 1 pattern.

``make docs-check`` recomputes these through ``scripts/docs_figures.py personalized_*``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# one budget for every method (small CPU scale; the paper uses the FedRep code's CNNs)
TRAIN = {"hidden": (32,), "rounds": 10, "local_epochs": 1, "head_epochs": 5, "lr": 0.1}


def _run(path: str | Path):
    from testbed.run.execute import execute
    from testbed.run.roster import build_world
    from testbed.scenario.loading import load_scenario

    sc = load_scenario(path)
    with tempfile.TemporaryDirectory(prefix="personalized-") as tmp:
        out = execute(sc, Path(tmp) / "run")
        results = out.results
    return sc, results, build_world(sc).parties


def _run_figures(results: dict) -> dict[str, float]:
    """Messages, MiB on the wire, and each attack's mean figures over its targets."""
    tr = results["transcript"]
    out = {"messages": float(tr["messages"]), "mib": tr["bytes"] / 2**20}
    by: dict[str, list[dict]] = {}
    for a in results.get("attacks") or []:
        by.setdefault(a["attack"], []).append(a)
    for name, rows in by.items():
        for k in ("coverage", "coverage_baseline", "w2_ratio", "tv", "tv_baseline", "auc"):
            vals = [float(a[k]) for a in rows if isinstance(a.get(k), (int, float))]
            if vals:
                out[f"{name}.{k}"] = float(np.mean(vals))
    return out


def _methods(clients, groups=None, seed: int = 0) -> dict[str, float]:
    from protocols._personalized import METHODS, personalized_accuracy, train_personalized

    out = {}
    for m in METHODS:
        accs = train_personalized(clients, m, groups=groups, seed=seed, **TRAIN)
        out[m] = personalized_accuracy(clients, accs)
    return out


def coreset_comparison(path: str | Path) -> dict[str, float]:
    from protocols._personalized import ClientSplit
    from protocols.fedwad_coreset import nn_accuracy

    sc, results, parties = _run(path)
    outs = results["outputs"]
    A = np.asarray(outs["classifier_atoms"], dtype=np.float64)
    L = np.asarray(outs["classifier_labels"])
    test = parties[sc.protocol.params.get("test", "test")]
    clients, knn, n_test = [], [], []
    for c in outs["clients"]:
        p = parties[c]
        mine = np.isin(test.y, np.unique(p.y))
        Xte, yte = test.X[mine], test.y[mine]
        knn.append(nn_accuracy(A, L, Xte, yte))
        n_test.append(len(yte))
        clients.append(ClientSplit(p.X / 16.0, p.y, Xte / 16.0, yte))
    ref = results["reference"]
    out = {
        "knn_global": float(results["estimates"]["nn_accuracy"]),
        "knn_client": float(np.average(knn, weights=n_test)),
        "knn_central": float(ref["nn_accuracy"]),
        "w_federated": float(results["evaluation"]["coreset_wasserstein"]),
        "w_central": float(ref["coreset_wasserstein"]),
        "w_free_support": float(ref["free_support_wasserstein"]),
        "quality": float(results["utility"]["coreset_quality"]),
        "excess": results["evaluation"]["coreset_wasserstein"] / ref["coreset_wasserstein"] - 1,
        **_run_figures(results),
    }
    out.update(_methods(clients, seed=sc.seed))
    return out


def clustered_comparison(path: str | Path, test_fraction: float = 0.25) -> dict[str, float]:
    from protocols._personalized import ClientSplit

    sc, results, parties = _run(path)
    est = results["estimates"]
    out = {
        "protocol_clustered": float(est["accuracy"]),
        "protocol_fedavg": float(est["fedavg_accuracy"]),
        "protocol_gain": float(est["accuracy_gain"]),
        "protocol_ari": float(est["ari"]),
        "exact_ari": float(results["reference"]["ari"]),
        "distance_rank": float(results["utility"]["distance_rank"]),
        "matrix_error": float(results["accuracy"]["distance_matrix"]["relative_error"]),
        **_run_figures(results),
    }
    names = list(parties)
    rng = np.random.default_rng([sc.seed, 16])
    clients = []
    for n in names:
        p = parties[n]
        perm = rng.permutation(p.n)
        k = max(1, int(round(test_fraction * p.n)))
        te, tr = np.sort(perm[:k]), np.sort(perm[k:])
        clients.append(ClientSplit(p.X[tr], p.y[tr], p.X[te], p.y[te]))
    clusters = np.asarray(results["outputs"]["clusters"])
    for m, v in _methods(clients, seed=sc.seed).items():
        out[f"vanilla_{m}"] = v
    for m, v in _methods(clients, groups=clusters, seed=sc.seed).items():
        out[f"clustered_{m}"] = v
    return out


def compare(path: str | Path) -> dict[str, float]:
    from testbed.scenario.loading import load_scenario

    name = load_scenario(path).protocol.name
    if name == "fedwad_coreset":
        return coreset_comparison(path)
    if name == "fedwad_clustered_fl":
        return clustered_comparison(path)
    raise SystemExit(f"{path}: protocol {name!r} is neither fedwad_coreset nor fedwad_clustered_fl")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for path in argv:
        for k, v in compare(path).items():
            print(f"{Path(path).stem} {k} {v:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
