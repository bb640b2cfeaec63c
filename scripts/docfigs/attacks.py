"""docs/reference/attacks.md: eta and xi inversions, the FedWAD 2-D toy, the TriangleWad attacks."""

from __future__ import annotations

import numpy as np

from .common import ROOT, digits


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

    X = digits()
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


def fedwad_toy_attack() -> dict[str, float]:
    """docs/reference/attacks.md, FedWAD 2-D toy (``scenarios/fedwad_gaussians_attack.yaml``): alice's
    W(nu_hat, nu)/W(mu, nu) with the geodesic and the optimisation attack, then the server
    inverting the last interpolants (``rerun_attacks(..., observer="server")``), each target's
    W2 and its public-prior baseline's, divided by W(mu, nu)."""
    import tempfile

    from testbed.run.execute import execute
    from testbed.run.rerun import rerun_attacks
    from testbed.scenario.loading import load_scenario

    root = ROOT
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


def triangle_attacks() -> dict[str, float]:
    """docs/reference/attacks.md: the server inverting TriangleWad's eta (known t, k = 10) in
    ``triangle_wad_digits`` and the buyer trilaterating the sellers in
    ``triangle_wad_marketplace`` (seed 0): exact recovery, coverage and W2 ratio per target."""
    import tempfile

    from testbed.run.execute import execute
    from testbed.run.rerun import rerun_attacks
    from testbed.scenario.loading import load_scenario

    root = ROOT
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
    """docs/reference/attacks.md: share of the top-1 words retrieved from FedWAD's xi^K between Lee
    documents 0 and 1 (``scenarios/fedwad_lee_words.yaml``, exact interpolation, K = 5) that are
    in a party's document, its prior-only baseline, and the barycentric variant with S = 20 and
    S = 100 (worst case over the two targets, as the report's any-target figure)."""

    import yaml

    from testbed.run.execute import execute
    from testbed.scenario.loading import parse_scenario

    path = ROOT / "scenarios/fedwad_lee_words.yaml"
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


def fedwad_toy_starts() -> dict[str, float]:
    """docs/reference/attacks.md, FedWAD 2-D toy (``scenarios/fedwad_gaussians_attack.yaml``, seed 0): the
    5 starts of alice's optimisation attack (``restarts: 5``, the attack's own rng:
    ``keyed_rng(attack_key(world), "attack", 1, "fedwad_distributional")``), each start's
    W(nu_hat, nu)/W(mu, nu) and final loss, and the ratio of the lowest-loss start."""

    import yaml

    from attacks.fedwad_distributional import distributional_optimisation
    from testbed import ot as tot
    from testbed.measure import Measure
    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world
    from testbed.run.view import attack_key
    from testbed.scenario.loading import load_scenario
    from testbed.seeding import keyed_rng

    path = ROOT / "scenarios/fedwad_gaussians_attack.yaml"
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
