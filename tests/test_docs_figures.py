"""`make docs-check`: the figures README/docs quote are recomputed and compared (slow).

Most figures are listed in docs/findings/figures.json: its generator (``scripts/docs_figures.py``)
recomputes each, and ``test_figure`` compares the fresh value with the printed one within the
figure's tolerance (scripts/docfigs/figures_file.py): the rounding of the printed value, or, for
means over seeds, the 95 % interval over those seeds. That the docs print what figures.json says
is the default suite's (tests/test_figures_file.py). The checks below ``test_figure`` still read
their figures out of the prose with a pattern each (the demo sweep's, and figures read from
several keys at once) and have not moved to figures.json yet.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
sys.path.insert(0, str(ROOT / "scripts"))
from docfigs import figures_file  # noqa: E402

FIGURES_JSON = figures_file.load()


def _figures():
    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "scripts/docs_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def generated():
    mod = _figures()
    cache: dict[str, dict[str, float]] = {}

    def get(name: str) -> dict[str, float]:
        if name not in cache:
            cache[name] = mod.FIGURES[name]()
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(FIGURES_JSON))
def test_figure(name, generated):
    f = FIGURES_JSON[name]
    drift = figures_file.compare(name, f, generated(f["generator"]))
    assert drift is None, f"{f['doc']}: {drift}"


def _close(printed: str, value: float, what: str) -> None:
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    assert abs(value - float(printed)) <= 0.5 * 10**-decimals + 1e-9, (
        f"{what}: prints {printed}, now {value:.4g}"
    )


def _section(doc: str, start: str, end: str) -> list[tuple[str, list[str]]]:
    """(first cell, the other cells) of the table rows between two markers of a doc, in order."""
    text = (ROOT / doc).read_text()
    part = text[text.index(start) : text.index(end, text.index(start))]
    rows = []
    for line in part.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.append((cells[0], cells[1:]))
    return rows


_FIGURE = r"[+−-]?[\d.]+"


def _signed(s: str) -> float:
    return float(s.replace("−", "-").lstrip("+"))


def _ci_close(printed: str, fig: dict, key: str, what: str) -> None:
    """A printed mean (optionally with its [lo, hi]) against the recomputed mean over seeds:
    within the printed rounding or the recomputed 95 % interval's half-width, whichever is wider
    (the printed bounds too, and a printed "0" within 0.005 unless the interval is wider)."""
    m = re.match(rf"({_FIGURE})(?: \[({_FIGURE}), ({_FIGURE})\])?", printed)
    assert m, f"{what}: {printed!r} is not a figure"
    mean, lo, hi = fig[f"{key}.mean"], fig[f"{key}.lo"], fig[f"{key}.hi"]
    digits = m.group(1).lstrip("+−-")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    rounding = 0.005 if digits == "0" else 0.5 * 10**-decimals
    slack = max(rounding, hi - mean, mean - lo) + 1e-9
    for s, value in zip(m.groups(), (mean, lo, hi)):
        if s is not None:
            assert abs(_signed(s) - value) <= slack, (
                f"{what}: prints {printed}, now {mean:.4g} [{lo:.4g}, {hi:.4g}]"
            )


@pytest.mark.parametrize("gen", ["distill_diabetes", "distill_sentiment"])
def test_distillation_paired_differences_resolved(gen, generated):
    # each paired per-seed difference (figures.json, ``<gen>.paired.*``: within the seeds'
    # interval) is resolved (its interval excludes 0) exactly when the printed one is: the prose
    # around it says which are
    fig = generated(gen)
    paired = {n: f for n, f in FIGURES_JSON.items() if n.startswith(f"{gen}.paired.")}
    assert len(paired) == {"distill_diabetes": 5, "distill_sentiment": 11}[gen], list(paired)
    for name, f in paired.items():
        lo, hi = (figures_file.parse(s) for s in figures_file.numbers(f["printed"])[1:])
        now_lo, now_hi = fig[f"{f['key']}.lo"], fig[f"{f['key']}.hi"]
        assert (lo > 0 or hi < 0) == (now_lo > 0 or now_hi < 0), (
            f"{name}: printed [{lo}, {hi}] vs now [{now_lo:.4g}, {now_hi:.4g}] (resolved or not)"
        )


def _attack_key(fig: dict, row: int, attack: str, metric: str) -> str | None:
    """``<row>.<attack>[<method>]#1.<metric>`` as the summary names it (None: not attacked)."""
    pattern = rf"{row}\.{re.escape(attack)}(\[[^\]]*\])?#1\.{metric}\.mean$"
    keys = [k[: -len(".mean")] for k in fig if re.match(pattern, k)]
    return keys[0] if keys else None


def _seed_close(printed: str, value: float, what: str) -> None:
    """One seed's figure (deterministic): within its rounding; a printed "0" within 0.005."""
    if printed == "0":
        assert abs(value) <= 0.005, f"{what}: prints 0, now {value:.4g}"
    else:
        _close(printed, value, what)


MIA = "soft_label_membership"
TV_RATIO = "label_distribution_inference[ratio]"
TV_BIAS = "label_distribution_inference[bias]"


def test_distillation_privacy_table(generated):
    # rows in the sweep's order: DP-SGD eps = inf, 8, 4, 2, 1, noisy soft labels, PATE; columns:
    # claimed eps, accuracy, SD, MIA AUC, TPR@1 %FPR, audited eps, label TV (ratio / bias)
    fig = generated("distill_privacy")
    rows = _section("docs/reference/protocols.md", "*Privacy", "Membership AUC falls")
    body = [cells for first, cells in rows if first not in ("defense",)]
    assert len(body) == 7, list(rows)
    for i, cells in enumerate(body):
        assert len(cells) == 7, (i, cells)
        claimed, acc, sd, auc, tpr, audited, tv = cells
        _ci_close(acc, fig, f"{i}.accuracy", f"privacy row {i} accuracy")
        _ci_close(sd, fig, f"{i}.semantic_distance", f"privacy row {i} SD")
        if claimed == "∞":  # no claim in the ledger
            assert f"{i}.claimed_eps[client_0].mean" not in fig, f"row {i} claims an ε"
        else:
            _ci_close(claimed, fig, f"{i}.claimed_eps[client_0]", f"privacy row {i} claimed eps")
        if auc == "—":  # PATE: no per-client output, so no attack result (the prose says so)
            assert (tpr, audited, tv) == ("—", "—", "—"), (i, cells)
            for attack in (MIA, TV_RATIO, TV_BIAS):
                assert _attack_key(fig, i, attack, "(?:auc|tv)") is None, f"row {i}: {attack} ran"
            continue
        _ci_close(auc, fig, _attack_key(fig, i, MIA, "auc"), f"privacy row {i} membership AUC")
        _ci_close(tpr, fig, _attack_key(fig, i, MIA, "tpr_at_1pct_fpr"), f"privacy row {i} TPR")
        lb = _attack_key(fig, i, MIA, "epsilon_lb")
        m = re.fullmatch(rf"({_FIGURE})(?: \(per seed (.*)\))?", audited)
        assert m, (i, audited)
        _ci_close(m.group(1), fig, lb, f"privacy row {i} audited ε")
        if m.group(2):  # each seed's value: deterministic, within its rounding
            for seed, s in enumerate(m.group(2).split(", ")):
                _seed_close(s, fig[f"{lb}.seed{seed}"], f"privacy row {i} audited ε seed {seed}")
        ratio, bias = tv.split(" / ")
        _ci_close(ratio, fig, f"{i}.{TV_RATIO}#1.tv", f"privacy row {i} label TV (ratio)")
        _ci_close(bias, fig, f"{i}.{TV_BIAS}#1.tv", f"privacy row {i} label TV (bias)")


def test_distillation_privacy_prose(generated):
    fig = generated("distill_privacy")
    seeds = sorted({int(k.rsplit("seed", 1)[1]) for k in fig if ".accuracy.seed" in k})
    text = " ".join((ROOT / "docs/reference/protocols.md").read_text().split())
    mia = _attack_key(fig, 0, MIA, "auc")
    m = re.search(r"Membership AUC falls from ([\d.]+) \(per seed ([\d., ]+)\)", text)
    assert m, "docs/reference/protocols.md: the membership AUC sentence was reworded"
    _ci_close(m.group(1), fig, mia, "membership AUC without DP")
    per_seed = m.group(2).split(", ")
    assert len(per_seed) == len(seeds), per_seed
    for seed, s in zip(seeds, per_seed):
        _seed_close(s, fig[f"{mia}.seed{seed}"], f"membership AUC without DP, seed {seed}")
    # "the audited ε lower bound ... is 0 under every DP setting and never exceeds the claimed ε"
    assert "is 0 under every DP setting and never exceeds the claimed ε" in text
    for i in range(6):
        lb = _attack_key(fig, i, MIA, "epsilon_lb")
        base = lb[: -len(".epsilon_lb")]
        for seed in seeds:
            value = fig[f"{lb}.seed{seed}"]
            assert value <= fig[f"{base}.claimed_epsilon.seed{seed}"], (i, seed, value)
            if 1 <= i <= 4:  # DP-SGD
                assert value == 0, f"DP-SGD row {i} seed {seed}: audited ε {value:.3g}"
    # "Label-distribution inference beats the uniform baseline under every defense that releases
    # per-client soft labels" (ratio estimator, every row but PATE)
    for i in range(6):
        tv, base = fig[f"{i}.{TV_RATIO}#1.tv.mean"], fig[f"{i}.{TV_RATIO}#1.tv_baseline.mean"]
        assert tv < base, f"row {i}: label TV {tv:.3g} does not beat the baseline {base:.3g}"
    # (the uniform baseline TV and DP-SGD's accuracy cost: figures.json)


def test_frontier_fedbary_table(generated):
    # rows in the sweep's order: none, small_support 50, small_support 10, noise eps 10, eps 1;
    # the claimed ε of each (its other cells: figures.json)
    fig = generated("frontier_fedbary")
    rows = _section(
        "docs/findings/frontier.md", "## Data valuation: FedBary", "With its default support"
    )
    body = [cells for first, cells in rows if first != "setting"]
    assert len(body) == 5, list(rows)
    for i, cells in enumerate(body):
        _eps_close(cells[0], fig[f"{i}.eps"], f"frontier_fedbary row {i}")


# the demo table (docs/findings/findings.md): setting as printed -> the sweep's setting label
_NOISE = "gaussian_measure_noise(noise_multiplier={})"
DEMO_ROWS = {
    ("fedwad", "none"): "none",
    **{("fedwad", f"noise z = {z}"): _NOISE.format(z) for z in ("0.001", "0.01", "0.1", "1")},
    ("fedwad", "noise, target ε = 10 (41 releases)"): (
        "gaussian_measure_noise(releases=41,target_epsilon=10)"
    ),
    ("fedwad", "random_t"): "random_t",
    ("fedwad", "large_t (t = 0.9)"): "large_t(t=0.9)",
    ("fedwad", "distances_at_end"): "distances_at_end",
    ("fedwad", "small_support S = 5"): "small_support(support_size=5)",
    ("fedwad", "subsample_support 7 of 10 atoms"): "subsample_support(atoms=7)",
    ("triangle_wad", "none"): "none",
    ("triangle_wad", "k = 1"): "small_support(support_size=1)",
    ("triangle_wad", "k = 100"): "small_support(support_size=100)",
    ("triangle_wad", "large_t (t = 0.9)"): "large_t(t=0.9)",
    **{("triangle_wad", f"noise z = {z}"): _NOISE.format(z) for z in ("0.001", "0.01")},
}
# printed columns after the setting -> the report's aggregated key (None: the claimed epsilon)
DEMO_COLUMNS = (
    "wasserstein.relative_error",
    "any_attack.leakage",
    "any_attack.coverage",
    "any_attack.exact_recovery",
    "any_attack.record_leakage",
    None,
)


def _demo_slack(printed: str, mean: float, lo: float, hi: float) -> float:
    if abs(float(printed)) < 1e-9:  # "0" (clipped) or "2e-15" (rounding noise): about zero
        return max(hi - mean, mean - lo, 0.005 if printed == "0" else 1e-12)
    if "e" in printed:  # 2.1e7: two significant digits
        mant = printed.split("e")[0]
        decimals = len(mant.split(".")[1]) if "." in mant else 0
        return max(hi - mean, mean - lo, 0.5 * 10**-decimals * 10 ** int(printed.split("e")[1]))
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return max(hi - mean, mean - lo, 0.5 * 10**-decimals)


def test_demo_table(tmp_path):
    from testbed.report.model import aggregate
    from testbed.run.sweep import run_sweep
    from testbed.scenario.loading import load_scenario

    out = run_sweep(load_scenario(ROOT / "scenarios/leakage_vs_accuracy.yaml"), tmp_path, jobs=2)
    agg = aggregate(out.rows)
    text = (ROOT / "docs/findings/findings.md").read_text()
    checked = 0
    for (proto, printed_setting), label in DEMO_ROWS.items():
        m = re.search(rf"^\| {proto} \| {re.escape(printed_setting)} \| (.+) \|$", text, flags=re.M)
        assert m, f"docs/findings/findings.md: no demo row for {proto} / {printed_setting}"
        cells = [c.strip() for c in m.group(1).split("|")]
        a = agg[(proto, label)]
        for s, key in zip(cells, DEMO_COLUMNS):
            s = s.split(" (")[0]  # "5.1e5 (assumption fails)"
            if key is None:
                eps = [v for k, v in a.items() if k.startswith("eps_claimed[")]
                mean = max(e[0] for e in eps)
                lo = hi = mean
                if s == "∞":
                    assert math.isinf(mean), f"{proto} {printed_setting}: claims ε = {mean:.4g}"
                    checked += 1
                    continue
            else:
                mean, lo, hi = a[key]
            slack = _demo_slack(s, mean, lo, hi)
            assert math.isfinite(mean) and abs(float(s) - mean) <= slack + 1e-12, (
                f"{proto} {printed_setting} {key or 'claimed ε'}: printed {s}, "
                f"now {mean:.4g} [{lo:.4g}, {hi:.4g}]"
            )
            checked += 1
    assert checked == len(DEMO_COLUMNS) * len(DEMO_ROWS)


# --------------------------------------------------------------------------------------------
# docs/findings/frontier.md: the frontier, the dataset-distance matrix and the Short answer (docsgen)


def _plain_figure(s: str) -> str:
    return s.replace("−", "-").replace("*", "").strip()


def _mean_close(printed: str, fig: dict, key: str, what: str) -> None:
    """A printed ``mean [lo, hi]`` (or a bare mean, or ``–`` for none) against the recomputed
    mean over seeds (and its interval): within the printed rounding or the recomputed 95 %
    interval's half-width, whichever is wider."""
    printed = _plain_figure(printed)
    m = re.match(r"(-?[\d.]+)(?: \[(-?[\d.]+), (-?[\d.]+)\])?", printed)
    assert m, f"{what}: {printed!r} is not a figure"
    mean, lo, hi = fig[f"{key}.mean"], fig[f"{key}.lo"], fig[f"{key}.hi"]
    for s, v in zip(m.groups(), (mean, lo, hi)):
        if s is None:
            continue
        decimals = len(s.split(".")[1]) if "." in s else 0
        slack = max(0.5 * 10**-decimals, hi - mean, mean - lo) + 1e-9
        assert abs(float(s) - v) <= slack, (
            f"{what}: prints {printed}, now {mean:.4g} [{lo:.4g}, {hi:.4g}]"
        )


def _eps_close(printed: str, eps: float, what: str) -> None:
    if printed == "∞":
        assert math.isinf(eps), f"{what}: prints ∞, now claims ε = {eps:.4g}"
    else:
        _close(printed, eps, f"{what} ε")


# (first cell, ε cell) of the "Selected rows" table -> the setting label after "<dataset>: "
FRONTIER_SELECTED = {
    ("triangle_wad (k = 1)", "∞"): "triangle_wad",
    ("triangle_wad + secret_isometry_mask", "∞"): "triangle_wad + secret_isometry_mask(shared)",
    ("triangle_wad + gaussian_measure_noise", "10"): "triangle_wad + gaussian_measure_noise(ε=10)",
    ("fedwad (paper mode, S = 10, K = 10)", "∞"): "fedwad",
    ("fedwad + gaussian_measure_noise", "10"): "fedwad + gaussian_measure_noise(ε=10)",
    ("dp_sliced_wasserstein, no noise (z = 0)", "∞"): "dp_sliced_wasserstein(z=0)",
    ("dp_sliced_wasserstein", "10"): "dp_sliced_wasserstein(ε=10)",
    ("dp_jl_ot, no noise (z = 0)", "∞"): "dp_jl_ot(z=0)",
    ("dp_jl_ot", "10"): "dp_jl_ot(ε=10)",
    ("dp_gaussian_moments full, z = 0", "∞"): "dp_gaussian_moments(z=0, full)",
    ("dp_gaussian_moments full", "10"): "dp_gaussian_moments(ε=10, full)",
    ("dp_gaussian_moments diagonal", "1"): "dp_gaussian_moments(ε=1, diagonal)",
}


def test_frontier_selected_rows(generated):
    # each row's setting and its claimed ε (its utility / leakage / coverage: figures.json)
    fig = generated("frontier_main")
    rows = _section("docs/findings/frontier.md", "Selected rows of the full table", "(DP sliced")
    body = [(first, cells) for first, cells in rows if first != "setting"]
    assert len(body) == len(FRONTIER_SELECTED), [b[0] for b in body]
    for first, (eps, *_) in body:
        label = FRONTIER_SELECTED[(first, eps)]
        for ds in ("digits", "breast_cancer"):
            key = f"{ds}: {label}"
            assert f"{key}.eps" in fig, f"the sweep has no setting {key!r}"
            _eps_close(eps, fig[f"{key}.eps"], key)


def _best_rows(doc: str, start: str, end: str) -> list[tuple[str, str, str, str, str]]:
    rows = _section(doc, start, end)
    return [(b, *cells[:4]) for b, cells in rows if b != "budget ε"]


def test_frontier_best_per_budget(generated):
    # | budget ε | dataset | <setting as bench.frontier prints it>: mean [lo, hi] | leak | cov |
    fig = generated("frontier_main")
    rows = _best_rows("docs/findings/frontier.md", "Best setting per budget", "Selected rows")
    assert len(rows) == 6, rows
    for budget, ds, best, leak, cov in rows:
        b = "inf" if budget.startswith("∞") else budget
        (key,) = [k for k in fig if k.startswith(f"best.{b}.{ds}::")]
        label = key.split("::", 1)[1]
        if best.startswith("none"):
            assert fig[key] <= 0, f"budget {budget} {ds}: {label} now has utility {fig[key]:.3g}"
            continue
        name, printed = best.rsplit(": ", 1)
        assert f"{ds}: {name}" == label, f"budget {budget} {ds}: prints {name}, now {label}"
        _mean_close(printed, fig, f"{label}.utility", f"best at {budget} {ds}")
        _mean_close(leak, fig, f"{label}.leakage", f"best at {budget} {ds} leakage")
        _mean_close(cov, fig, f"{label}.coverage", f"best at {budget} {ds} coverage")


# (first cell, ε cell) of the dataset-distance table -> setting labels (several for "10 and 1")
FRONTIER_MATRIX = {
    ("triangle_wad (known t, k = 1, all six clients)", "∞"): ["triangle_wad"],
    ("triangle_wad + secret_isometry_mask (prior-proxy attacker)", "∞"): [
        "triangle_wad + secret_isometry_mask(shared)"
    ],
    ("fedwad_clustering (FedWAD paper mode for every pair)", "∞"): ["fedwad_clustering"],
    ("dp_sliced_wasserstein, no noise", "∞"): ["dp_sliced_wasserstein(z=0)"],
    ("dp_sliced_wasserstein", "10"): ["dp_sliced_wasserstein(ε=10)"],
    ("dp_sliced_wasserstein", "1"): ["dp_sliced_wasserstein(ε=1)"],
    ("dp_jl_ot", "10 and 1"): ["dp_jl_ot(ε=10)", "dp_jl_ot(ε=1)"],
    ("dp_jl_ot, `debias: false`", "10"): ["dp_jl_ot(ε=10, no debias)"],
    ("dp_jl_ot, `debias: false`", "1"): ["dp_jl_ot(ε=1, no debias)"],
    ("dp_gaussian_moments full, no noise", "∞"): ["dp_gaussian_moments(z=0, full)"],
    ("dp_gaussian_moments diagonal", "10"): ["dp_gaussian_moments(ε=10, diagonal)"],
    ("dp_gaussian_moments diagonal", "1"): ["dp_gaussian_moments(ε=1, diagonal)"],
}


def test_frontier_matrix_table(generated):
    fig = generated("frontier_matrix")
    rows = _section(
        "docs/findings/frontier.md", "## Dataset-distance matrix", "Best per budget: ε = 1"
    )
    body = [(first, cells) for first, cells in rows if first != "setting"]
    assert len(body) == len(FRONTIER_MATRIX), [b[0] for b in body]
    for first, (eps, *_) in body:  # the settings and their ε; the other cells: figures.json
        labels = FRONTIER_MATRIX[(first, eps)]
        epss = eps.split(" and ")  # a row of several settings ("10 and 1")
        for j, label in enumerate(labels):
            key = f"frontier_matrix: {label}"
            assert f"{key}.eps" in fig, f"the sweep has no setting {key!r}"
            _eps_close(epss[j] if len(epss) > 1 else epss[0], fig[f"{key}.eps"], key)


def _text(doc: str) -> str:
    return " ".join((ROOT / doc).read_text().split())


def _figure(text: str, pattern: str, what: str) -> tuple[str, ...]:
    m = re.search(pattern, text)
    assert m, f"{what}: reworded in the docs (no match for {pattern!r})"
    return m.groups()


def test_frontier_short_answer(generated):
    fig, mat = generated("frontier_main"), generated("frontier_matrix")
    text = _text("docs/findings/frontier.md")
    # no formally private setting (finite ε <= 10) is accurate: utility < 0.9 (error > 10 %)
    private = [k[: -len(".eps")] for k, v in fig.items() if k.endswith(".eps") and math.isfinite(v)]
    assert private and all(fig[f"{p}.eps"] <= 10.5 for p in private)
    assert "Nothing measured here is both accurate (error < 10 %)" in text
    assert max(fig[f"{p}.utility.mean"] for p in private) < 0.9
    # zero distance utility for the DP baselines and the Gaussian-mechanism defense at ε 1 and 10
    assert "*zero* distance utility" in text
    for ds in ("digits", "breast_cancer"):
        for e in (1, 10):
            for label in (
                f"dp_sliced_wasserstein(ε={e})",
                f"dp_jl_ot(ε={e})",
                f"fedwad + gaussian_measure_noise(ε={e})",
                f"triangle_wad + gaussian_measure_noise(ε={e})",
            ):
                assert fig[f"{ds}: {label}.utility.hi"] <= 1e-9, (ds, label)
    # dp_gaussian_moments on digits: utility 0.49-0.61, i.e. 40-50 % error
    # (the utilities: figures.json; the errors they mean, within 5 points)
    err_lo, err_hi = _figure(
        text, r"only on digits \(utility [\d.]+–[\d.]+, i\.e\. (\d+)–(\d+) % error", "moments"
    )
    best1 = fig["digits: dp_gaussian_moments(ε=1, diagonal).utility.mean"]
    best10 = fig["digits: dp_gaussian_moments(ε=10, full).utility.mean"]
    assert abs(100 * (1 - best10) - int(err_lo)) <= 5 and abs(100 * (1 - best1) - int(err_hi)) <= 5
    # ranking task (its figures: figures.json): the DP settings recover no record
    m = "frontier_matrix: "
    for label in ("dp_sliced_wasserstein(ε=1)", "dp_gaussian_moments(ε=10, diagonal)"):
        assert mat[f"{m}{label}.coverage.hi"] <= 1e-9, f"{label} now recovers records"
    (cells,) = _figure(text, r"--out runs/frontier # (\d+) cells", "frontier cell count")
    assert int(cells) == fig["cells"]


def test_frontier_mask_in_domain(generated):
    # the Gaussian prior proxy recovers nothing (the in-domain attack's figures: figures.json)
    fig = generated("mask_in_domain")
    assert max(fig[f"prior.{p}.coverage"] for p in ("alice", "bob")) < 0.0005


def test_frontier_matrix_prose(generated):
    # which setting is best per budget and the cell count (the sentence's figures: figures.json)
    mat = generated("frontier_matrix")
    text = _text("docs/findings/frontier.md")
    m = "frontier_matrix: "
    best = {k.split("::")[0]: k.split("::")[1] for k in mat if k.startswith("best.")}
    assert best["best.1.frontier_matrix"] == m + "dp_sliced_wasserstein(ε=1)"
    assert best["best.10.frontier_matrix"] == m + "dp_gaussian_moments(ε=10, diagonal)"
    assert best["best.inf.frontier_matrix"] == m + "triangle_wad + secret_isometry_mask(shared)"
    (cells,) = _figure(
        text, r"Spearman 0\.\d+\. (\d+) cells, ~\d+ min on 2 busy cores", "matrix cell count"
    )
    assert int(cells) == mat["cells"]


def test_frontier_prose(generated):
    # the Gaussian bound's gap to W2 on digits without noise (utility of the noise-free moments);
    # the paragraph's other figures: figures.json
    fig = generated("frontier_main")
    (gap,) = _figure(
        _text("docs/findings/frontier.md"),
        r"which on digits is (\d+) % below W2 even without noise",
        "bound",
    )
    _close(gap, 100 * (1 - fig["digits: dp_gaussian_moments(z=0, full).utility.mean"]), "gap")


# --------------------------------------------------------------------------------------------
# docs/reference/protocols.md: FedBary's duplication study (docsgen)


def test_fedbary_duplication(generated):
    # the digits datum runs are not bit-reproducible across processes (2.43 % to 2.98 % seen;
    # the doc says so): checked within the half point the doc states (the other figures of the
    # duplication study: figures.json)
    fig = generated("fedbary_duplication")
    datum, datum_per = _figure(
        _text("docs/reference/protocols.md"),
        r"adding 10 copies of the most valuable datum moves it by −\d+\.\d+ % \(2-D\) / "
        r"\+(\d+\.\d+) % and \+(\d+\.\d+) % \(digits, shared and per-client γ;",
        "FedBary duplication",
    )
    for printed, case in ((datum, "digits_shared"), (datum_per, "digits_per_client")):
        now = 100 * fig[f"{case}.datum_x10.change"]
        assert abs(float(printed) - now) <= 0.5, (
            f"{case} datum x10: prints {printed}, now {now:.3g}"
        )


# --------------------------------------------------------------------------------------------
# docs/guide/plugins.md: declared tolerances of the built-in protocols (docsgen)


def _printed_range(cell: str) -> tuple[str, str]:
    lo, _, hi = cell.partition("–")
    return lo, hi or lo


def test_plugins_tolerance_table(generated):
    # | protocol | key(s) | max | median (one value, or the range over the keys) | declared |
    fig = generated("plugins_tolerances")
    rows = _section("docs/guide/plugins.md", "## Declared tolerances", "Two are loose enough")
    body = [(p, cells) for p, cells in rows if p != "protocol"]
    assert len(body) >= 15, body
    for proto, (keys, mx, med, _declared) in body:
        groups = [g.strip() for g in keys.split(" / ")]
        maxes, medians = [m.strip() for m in mx.split(" / ")], [m.strip() for m in med.split(" / ")]
        if len(groups) == 1:  # one max, one median (range) over every key of the group
            maxes, medians = maxes * 1, medians * 1
        for group, m, md in zip(groups, maxes, medians):
            pats = [g.strip() for g in group.split(",")]
            found = [
                k[: -len(".max")]
                for k in fig
                if k.startswith(f"{proto}.")
                and k.endswith(".max")
                and any(
                    re.fullmatch(p.replace("*", ".*"), k[len(proto) + 1 : -len(".max")])
                    for p in pats
                )
            ]
            assert found, f"docs/guide/plugins.md: no measured key of {proto} matches {group!r}"
            _close(m, max(fig[f"{k}.max"] for k in found), f"{proto} {group} max")
            lo, hi = _printed_range(md)
            _close(lo, min(fig[f"{k}.median"] for k in found), f"{proto} {group} median (low)")
            _close(hi, max(fig[f"{k}.median"] for k in found), f"{proto} {group} median (high)")
    (skipped,) = _figure(
        _text("docs/guide/plugins.md"), r"`sinkhorn_distillation` skips the (\d+) seeds", "skips"
    )
    seeds = fig["sinkhorn_distillation.macro_f1.seeds"]
    assert int(skipped) == 20 - seeds, f"prints {skipped} skipped seeds, now {20 - seeds:.0f}"


# --------------------------------------------------------------------------------------------
# docs/findings/frontier.md: the protocol x threat coverage matrix (docs2)


_THREATS = ("reconstruction", "membership", "attribute_label", "text_retrieval")


def test_frontier_coverage_matrix(generated):
    # | protocol | reconstruction | membership | attribute / label | text retrieval |; a cell is
    # "n/a: reason" or "attack value (baseline)" (bold marks the new attacks), seed 0: which
    # attack, or none, per cell (the figures, at their printed rounding: figures.json)
    fig = generated("coverage_cells")
    rows = _section("docs/findings/frontier.md", "## Coverage matrix", "New attacks (bold)")
    body = {p.split()[0]: cells for p, cells in rows if p != "protocol"}
    protocols = {k.split(".")[0] for k in fig}
    assert set(body) == protocols, f"coverage table rows {sorted(body)} != {sorted(protocols)}"
    for proto, cells in body.items():
        for threat, cell in zip(_THREATS, cells, strict=True):
            key, cell = f"{proto}.{threat}", cell.replace("*", "")
            if cell.startswith("n/a"):
                assert f"{key}.not_applicable" in fig, f"{key}: prints n/a, now measured"
                continue
            m = re.fullmatch(r"(\w+) (?:TV )?([\d.]+)(?: \(([\d.]+)\))?", cell)
            assert m, f"{key}: cell {cell!r} is not 'attack value (baseline)'"
            attack = m.group(1)  # its value and baseline: figures.json
            assert f"{key}.attack.{attack}" in fig, f"{key}: prints {attack}, now another attack"


# --------------------------------------------------------------------------------------------
# docs/guide/plugins.md: the FedWAD applications' scorecards, the toy's (docs2)


def test_plugins_fedwad_scorecards(generated):
    # what the scorecards' prose claims besides its figures (those: figures.json)
    fig = generated("scorecards_fedwad_apps")
    text = _text("docs/guide/plugins.md")
    co, cf = "fedwad_coreset", "fedwad_clustered_fl"
    assert "No threat model sees a near-copy of another party's rows in either" in text
    copies = {k: v for k, v in fig.items() if ".near_copies." in k}
    assert copies and not any(copies.values()), copies
    assert "`coreset_inversion` is the most leaking attack under every threat model" in text
    assert fig[f"{co}.worst_attack.coreset_inversion"] == fig[f"{co}.threats"]
    # the clients' label-histogram TV range is over each client's best target (the smallest TV,
    # the scorecard's worst row): clustered_fl_label_inference is every client's worst attack
    clients = fig[f"{cf}.threats"] - 4  # server, eavesdropper and the two coalitions
    assert fig[f"{cf}.worst_attack.clustered_fl_label_inference"] >= clients


def test_plugins_toy_scorecard(generated):
    fig = generated("scorecard_toy")
    text = _text("docs/guide/plugins.md")
    k, parties, n = _figure(
        text,
        r"means plus a (\d+)-row \"debug sample\" to the server\), the scorecard lists `server: "
        r"near-copies of private rows of \[([^\]]+)\] in (\d+) message\(s\)`, the same for the "
        r"eavesdropper, none for either party",
        "toy scorecard",
    )
    names = [p.strip(" '") for p in parties.split(",")]
    for label in ("server", "eavesdropper"):
        assert int(n) == fig[f"{label}.near_copies"], f"{label}: prints {n} message(s)"
        assert {p for p in names if fig.get(f"{label}.rows_of.{p}")} == set(names), label
    for p in names:
        assert fig[f"{p}.near_copies"] == 0, f"{p} sees near-copies"
        assert int(k) == fig[f"server.sent_rows.{p}.exact_rows"], f"sent_rows on {p}"


# --------------------------------------------------------------------------------------------
# docs/findings/findings.md: the frontier at the tightest honest accounting (scenarios/frontier_dp.yaml)

#: column of the findings table -> (setting label after "<dataset>: ", with {e} the budget;
#: the label at no defense, or None where the column has no such setting), figure
FRONTIER_DP_COLUMNS = {
    "FedWAD tight": ("fedwad + gaussian_measure_noise(ε={e})", "fedwad", "error"),
    "FedWAD worst case": ("fedwad + gaussian_measure_noise(ε={e}, worst case)", None, "error"),
    "TriangleWad": ("triangle_wad + gaussian_measure_noise(ε={e})", "triangle_wad", "error"),
    "TriangleWad worst case": (
        "triangle_wad + gaussian_measure_noise(ε={e}, worst case)",
        None,
        "error",
    ),
    "FedBary distances": ("fedbary + gaussian_measure_noise(ε={e})", "fedbary", "distance_error"),
    "FedBary Spearman": ("fedbary + gaussian_measure_noise(ε={e})", "fedbary", "spearman"),
    "DP sliced W": ("dp_sliced_wasserstein(ε={e})", None, "error"),
    "DP-JL": ("dp_jl_ot(ε={e})", None, "error"),
    "DP moments": ("dp_gaussian_moments(ε={e}, diagonal)", None, "error"),
}
FRONTIER_DP_DATASETS = {"digits": "digits", "breast cancer": "breast_cancer"}


def test_findings_frontier_dp_table(generated):
    """The findings' frontier table: each budget is the setting's claimed ε (PLD, within 1 %),
    and each cell (mean relative error, or FedBary's Spearman, over the seeds its caption names)
    is a figure of figures.json, compared there with the sweep recomputed."""
    fig = generated("frontier_dp")
    rows = _section("docs/findings/findings.md", "| dataset | ε |", "\n\n")
    header, body = rows[0], rows[1:]
    columns = header[1][1:]
    assert set(columns) == set(FRONTIER_DP_COLUMNS), columns
    assert len(body) == 2 * 7, [r[0] for r in body]  # two datasets, no defense and six budgets
    checked = 0
    for first, (eps, *cells) in body:
        ds = FRONTIER_DP_DATASETS[first]
        for col, cell in zip(columns, cells):
            template, undefended, what = FRONTIER_DP_COLUMNS[col]
            label = undefended if eps == "∞" else template.format(e=eps)
            if label is None:
                assert cell == "–", f"{first} ε={eps} {col}: no such setting, prints {cell}"
                continue
            key = f"{ds}: {label}"
            assert f"{key}.eps" in fig, f"the sweep has no setting {key!r}"
            if eps == "∞":
                assert math.isinf(fig[f"{key}.eps"]), f"{key} claims ε = {fig[f'{key}.eps']}"
            else:
                assert abs(fig[f"{key}.eps"] - float(eps)) <= 0.01 * float(eps), key
            assert f"frontier_dp.{key}.{what}" in FIGURES_JSON, f"figures.json lacks {key} {what}"
            checked += 1
    assert checked == 2 * (6 * len(FRONTIER_DP_COLUMNS) + 4)


def test_findings_frontier_dp_leakage(generated):
    """The findings' leakage paragraph, besides its figures (figures.json): the worst leakage
    under any mechanism is the setting it names, and record leakage is 0 under every mechanism
    but the one named, whose interval over the seeds includes 0."""
    fig = generated("frontier_dp")
    text = _text("docs/findings/findings.md")
    (jl_eps,) = _figure(  # the figures of the paragraph: figures.json
        text,
        r"record leakage 0 but in one setting, DP-JL at ε = (\d+) on breast cancer: [\d.]+ "
        r"\[[\d.]+, [\d.]+\] over the seeds, an interval that includes 0",
        "frontier_dp leakage paragraph",
    )
    defended = [k[: -len(".eps")] for k, v in fig.items() if k.endswith(".eps") and v < math.inf]
    exception = f"breast_cancer: dp_jl_ot(ε={jl_eps})"
    assert fig[f"{exception}.record.lo"] <= 0, "its interval now excludes 0: a record leak"
    others = [k for k in defended if k != exception and f"{k}.record.mean" in fig]
    assert all(fig[f"{k}.record.mean"] == 0 for k in others), [
        k for k in others if fig[f"{k}.record.mean"]
    ]
    top = max(defended, key=lambda k: fig.get(f"{k}.leakage.mean", -1.0))
    assert top == "breast_cancer: dp_sliced_wasserstein(ε=16)", top
