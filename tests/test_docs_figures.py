"""`make docs-check`: the figures README/docs quote are recomputed and compared (slow).

Each check names the doc, a pattern that captures the printed figure, and the generator that
recomputes it (``scripts/docs_figures.py``, or the demo sweep). A figure drifts when it moves by
more than the rounding of its printed value, or, for means over seeds, by more than the 95 %
interval over those seeds.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _figures():
    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "scripts/docs_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _quoted(doc: str, pattern: str) -> tuple[float, float]:
    """The figure a doc prints, and half a unit of its last printed digit."""
    text = " ".join((ROOT / doc).read_text().split())
    m = re.search(pattern, text)
    assert m, f"{doc}: no figure matches {pattern!r} (was the text reworded?)"
    s = m.group(1)
    decimals = len(s.split(".")[1]) if "." in s else 0
    return float(s), 0.5 * 10**-decimals


# (doc, pattern capturing the printed figure, generator, key, scale to the printed unit)
SINGLE = [
    ("docs/attacks.md", r"t = 0\.9\): \*\*([\d.]+) %\*\*", "eta_words", "eta_words_t0.9", 100),
    ("docs/attacks.md", r"t = 0\.5: ([\d.]+) %\)", "eta_words", "eta_words_t0.5", 100),
    (
        "docs/attacks.md",
        r"not a class subset\): k = 10: ([\d.]+) %",
        "eta_inversion",
        "inversion_first901_k10",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows: k = 1: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k1",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 2: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k2",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 5: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k5",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 10: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k10",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 20: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k20",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 50: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k50",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 100: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k100",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 200: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k200",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 450: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k450",
        100,
    ),
    (
        "docs/attacks.md",
        r"all 1797 rows:.*? 900: ([\d.]+) %",
        "eta_inversion",
        "inversion_all_k900",
        100,
    ),
    ("docs/attacks.md", r"k = 1797: ([\d.]+) %", "eta_inversion", "inversion_all_k1797", 100),
    (
        "docs/attacks.md",
        r"t̂ = ([\d.]+) from the public prior",
        "eta_inversion",
        "hidden_t_estimate",
        1,
    ),
    (
        "docs/attacks.md",
        r"public prior's moments, ([\d.]+) % exact",
        "eta_inversion",
        "hidden_t_exact",
        100,
    ),
    (
        "docs/protocols.md",
        r"ratio ([\d.]+) / [\d.]+ / [\d.]+ for k = 5",
        "triangle_bias",
        "bias_k5_s1",
        1,
    ),
    (
        "docs/protocols.md",
        r"ratio [\d.]+ / ([\d.]+) / [\d.]+ for k = 5",
        "triangle_bias",
        "bias_k5_s5",
        1,
    ),
    (
        "docs/protocols.md",
        r"ratio [\d.]+ / [\d.]+ / ([\d.]+) for k = 5",
        "triangle_bias",
        "bias_k5_s20",
        1,
    ),
    ("docs/protocols.md", r"and ([\d.]+) for k = 300", "triangle_bias", "bias_k300_s20", 1),
    (
        "docs/scenarios.md",
        r"audited ε ≥ ([\d.]+) \(perfect",
        "audit_canary",
        "audit_none_audited",
        1,
    ),
    (
        "docs/scenarios.md",
        r"z = 0\.05 — claimed ([\d.]+)",
        "audit_canary",
        "audit_z0.05_claimed",
        1,
    ),
    (
        "docs/scenarios.md",
        r"claimed 535, audited ([\d.]+)",
        "audit_canary",
        "audit_z0.05_audited",
        1,
    ),
    ("docs/scenarios.md", r"z = 1 — claimed ([\d.]+)", "audit_canary", "audit_z1_claimed", 1),
    (
        "docs/scenarios.md",
        r"claimed 7\.08, audited ([\d.]+)",
        "audit_canary",
        "audit_z1_audited",
        1,
    ),
    ("docs/scenarios.md", r"z = 4 — claimed ([\d.]+)", "audit_canary", "audit_z4_claimed", 1),
    (
        "docs/scenarios.md",
        r"claimed 1\.48, audited ([\d.]+)",
        "audit_canary",
        "audit_z4_audited",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"\| W2\(coreset, pooled clients\) \| ([\d.]+) \|",
        "personalized_coreset",
        "fedwad_coreset_digits.w_federated",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"\| W2\(coreset, pooled clients\) \| [\d.]+ \| ([\d.]+) \|",
        "personalized_coreset",
        "fedwad_coreset_digits.w_central",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"\| W2\(coreset, pooled clients\) \| [\d.]+ \| [\d.]+ \| ([\d.]+) \|",
        "personalized_coreset",
        "fedwad_coreset_digits.w_free_support",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"\(150 atoms\), held-out \| ([\d.]+) \|",
        "personalized_coreset",
        "fedwad_coreset_digits.knn_global",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"\(150 atoms\), held-out \| [\d.]+ \| ([\d.]+) \|",
        "personalized_coreset",
        "fedwad_coreset_digits.knn_central",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"Coreset quality ([\d.]+)",
        "personalized_coreset",
        "fedwad_coreset_digits.quality",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"federated W is ([\d.]+) % above",
        "personalized_coreset",
        "fedwad_coreset_digits.excess",
        100,
    ),
    (
        "docs/fedwad_applications.md",
        r"adds the client's own coreset \| server \| coverage@r \*\*([\d.]+)\*\*",
        "personalized_coreset",
        "fedwad_coreset_digits.coreset_inversion.coverage",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"coverage@r \*\*[\d.]+\*\*, W2 ratio ([\d.]+) \(leakage",
        "personalized_coreset",
        "fedwad_coreset_digits.coreset_inversion.w2_ratio",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"in the classifier\) \| server / c00 \| TV \*\*([\d.]+)\*\*",
        "personalized_coreset",
        "fedwad_coreset_digits.coreset_label_inference.tv",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"federated / exact OTDD matrix\) \| ([\d.]+) /",
        "personalized_clustered",
        "fedwad_clustered_fl.protocol_ari",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"federated / exact OTDD matrix\) \| [\d.]+ / ([\d.]+) \|",
        "personalized_clustered",
        "fedwad_clustered_fl.exact_ari",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"exact OTDD matrix\) \| ([\d.]+) \(matrix rel",
        "personalized_clustered",
        "fedwad_clustered_fl.distance_rank",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"\(matrix rel\. error ([\d.]+) %",
        "personalized_clustered",
        "fedwad_clustered_fl.matrix_error",
        100,
    ),
    (
        "docs/fedwad_applications.md",
        r"one FedAvg model per cluster \| ([\d.]+) \|",
        "personalized_clustered",
        "fedwad_clustered_fl.protocol_clustered",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"FedAvg over all clients \| ([\d.]+) \|",
        "personalized_clustered",
        "fedwad_clustered_fl.protocol_fedavg",
        1,
    ),
    (
        "docs/fedwad_applications.md",
        r"\| gain \| \*\*\+([\d.]+) points\*\*",
        "personalized_clustered",
        "fedwad_clustered_fl.protocol_gain",
        100,
    ),
    (
        "docs/fedwad_applications.md",
        r"lr·steps·\(π − 1/C\) \| server \| TV \*\*([\d.]+)\*\*",
        "personalized_clustered",
        "fedwad_clustered_fl.clustered_fl_label_inference.tv",
        1,
    ),
    (
        "docs/attacks.md",
        r"= \*\*([\d.]+)\*\* \(geodesic\)",
        "fedwad_toy_attack",
        "client_geodesic",
        1,
    ),
    (
        "docs/attacks.md",
        r"\(\*\*([\d.]+)\*\* keeping the lowest-loss",
        "fedwad_toy_attack",
        "client_optimisation",
        1,
    ),
    (
        "docs/attacks.md",
        r"last interpolants: ([\d.]+) / [\d.]+",
        "fedwad_toy_attack",
        "server_alice",
        1,
    ),
    (
        "docs/attacks.md",
        r"last interpolants: [\d.]+ / ([\d.]+)",
        "fedwad_toy_attack",
        "server_bob",
        1,
    ),
    (
        "docs/attacks.md",
        r"public-prior baseline ([\d.]+) /",
        "fedwad_toy_attack",
        "server_alice_baseline",
        1,
    ),
    (
        "docs/attacks.md",
        r"public-prior baseline [\d.]+ / ([\d.]+)\)",
        "fedwad_toy_attack",
        "server_bob_baseline",
        1,
    ),
    ("docs/protocols.md", r"W2 gap ([\d.]+) after 3 rounds", "fedbary_barycenter", "gap_k3", 1),
    ("docs/protocols.md", r"after 3 rounds, ([\d.]+) after 10", "fedbary_barycenter", "gap_k10", 1),
    (
        "docs/protocols.md",
        r"after 10 \((\d+) % of the clients",
        "fedbary_barycenter",
        "gap_k10_share",
        100,
    ),
    ("docs/protocols.md", r"([\d.]+) after 20 — slower", "fedbary_barycenter", "gap_k20", 1),
    ("docs/attacks.md", r"K = 5\): \*\*([\d.]+) %\*\* of the top-1", "xi_words", "exact", 100),
    (
        "docs/attacks.md",
        r"prior-only baseline ([\d.]+) %; barycentric",
        "xi_words",
        "exact_baseline",
        100,
    ),
    ("docs/attacks.md", r"barycentric S = 20: ([\d.]+) %", "xi_words", "bary_s20", 100),
    (
        "docs/attacks.md",
        r"barycentric S = 20: [\d.]+ %, S = 100: ([\d.]+) %",
        "xi_words",
        "bary_s100",
        100,
    ),
]


@pytest.fixture(scope="module")
def generated():
    mod = _figures()
    cache: dict[str, dict[str, float]] = {}

    def get(name: str) -> dict[str, float]:
        if name not in cache:
            cache[name] = mod.FIGURES[name]()
        return cache[name]

    return get


@pytest.mark.parametrize("doc,pattern,gen,key,scale", SINGLE, ids=[s[3] for s in SINGLE])
def test_single_seed_figure(doc, pattern, gen, key, scale, generated):
    printed, half_unit = _quoted(doc, pattern)
    value = generated(gen)[key] * scale
    assert abs(value - printed) <= half_unit + 1e-9, f"{doc}: prints {printed}, now {value:.4g}"


def _row(doc: str, first_cell: str) -> list[str]:
    """The cells after the first of the Markdown table row whose first cell contains
    ``first_cell``."""
    for line in (ROOT / doc).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and first_cell in cells[0]:
            return cells[1:]
    raise AssertionError(f"{doc}: no table row starting with {first_cell!r}")


def _numbers(cell: str) -> list[str]:
    return re.findall(r"-?\d+\.\d+|-?\d+", cell)


# (doc, first cell of the row, generator, one list of keys per remaining cell: the numbers of
# the cell in order, None to skip a number)
ROWS = [
    (
        "docs/fedwad_applications.md",
        "(`fedwad_coreset_digits`)",
        "personalized_coreset",
        [["knn_client"], ["fedavg"], ["fedper"], ["fedrep"]],
    ),
    (
        "docs/fedwad_applications.md",
        "(`fedwad_coreset_digits_iid`)",
        "personalized_coreset",
        [["knn_client"], ["fedavg"], ["fedper"], ["fedrep"]],
    ),
] + [
    (
        "docs/fedwad_applications.md",
        f"(`{name}`)",
        "personalized_clustered",
        [
            ["protocol_clustered", "protocol_fedavg"],
            ["vanilla_fedavg", "clustered_fedavg"],
            ["vanilla_fedper", "clustered_fedper"],
            ["vanilla_fedrep", "clustered_fedrep"],
        ],
    )
    for name in (
        "fedwad_clustered_fl",
        "fedwad_clustered_fl_random_pairs",
        "fedwad_clustered_fl_iid",
    )
]


@pytest.mark.parametrize("doc,first,gen,keys", ROWS, ids=[r[1].strip("(`)") for r in ROWS])
def test_table_row(doc, first, gen, keys, generated):
    cells = _row(doc, first)
    scenario = first.strip("(`)")
    figures = generated(gen)
    checked = 0
    for cell, cell_keys in zip(cells, keys):
        nums = _numbers(cell)
        assert len(nums) >= len(cell_keys), f"{doc} {first}: cell {cell!r} lacks numbers"
        for s, key in zip(nums, cell_keys):
            if key is None:
                continue
            decimals = len(s.split(".")[1]) if "." in s else 0
            value = figures[f"{scenario}.{key}"]
            assert abs(value - float(s)) <= 0.5 * 10**-decimals + 1e-9, (
                f"{doc} {first} {key}: prints {s}, now {value:.4g}"
            )
            checked += 1
    assert checked == sum(k is not None for ks in keys for k in ks)


def _close(printed: str, value: float, what: str) -> None:
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    assert abs(value - float(printed)) <= 0.5 * 10**-decimals + 1e-9, (
        f"{what}: prints {printed}, now {value:.4g}"
    )


# the FedBary scenarios with a validation set (the last one, without, has its own prose check)
FEDBARY = tuple(n for n in _figures().FEDBARY if n != "fedbary_no_validation")
CLIENTS = _figures().CLIENTS


@pytest.mark.parametrize("name", FEDBARY)
def test_fedbary_contributions(name, generated):
    # seed-0 contributions: five estimates, then five exact ones (docs/protocols.md)
    cell = _row("docs/protocols.md", f"`{name}`")[0]
    nums = re.findall(r"(?<![\d])\.\d{3}", cell)
    assert len(nums) >= 10, cell
    fig = generated("fedbary_tables")
    for i, c in enumerate(CLIENTS):
        _close(nums[i], fig[f"{name}.est.{c}"], f"{name} estimate {c}")
        _close(nums[5 + i], fig[f"{name}.exact.{c}"], f"{name} exact {c}")


def test_fedbary_prose_figures(generated):
    fig = generated("fedbary_tables")
    cell = _row("docs/protocols.md", "`fedbary_no_validation`")[0]
    m = re.search(r"contribution (\.\d+) vs ≥ (\.\d+)", cell)
    assert m, cell
    est = [fig[f"fedbary_no_validation.est.{c}"] for c in CLIENTS]
    _close(m.group(1), est[4], "no_validation client_5")
    _close(m.group(2), min(est[:4]), "no_validation other clients")
    m = re.search(
        r"\+(\d+) % distance error", _row("docs/protocols.md", "`fedbary_case3_sizes`")[0]
    )
    _close(m.group(1), 100 * fig["fedbary_case3_sizes.dist_err.client_5"], "case 3 distance error")
    text = " ".join((ROOT / "docs/protocols.md").read_text().split())
    m = re.search(r"Distances are over-estimated by (\d+)–(\d+) %", text)
    assert m
    _close(m.group(1), 100 * fig["dist_err_min"], "smallest distance over-estimate")
    _close(m.group(2), 100 * fig["dist_err_max"], "largest distance over-estimate")


def test_fedbary_seed_claims(generated):
    fig = generated("fedbary_seeds")
    case4 = _row("docs/protocols.md", "`fedbary_case4_label_noise`")[0]
    m = re.search(r"strictly monotone in (\d) of 8 seeds \(exact (\d)/8\)", case4)
    assert m, case4
    assert int(m.group(1)) == fig["fedbary_case4_label_noise.monotone"]
    assert int(m.group(2)) == fig["fedbary_case4_label_noise.monotone_exact"]
    for name, cell in (
        ("fedbary_case4_label_noise", case4),
        ("fedbary_valuation", _row("docs/protocols.md", "`fedbary_valuation`")[0]),
        ("fedbary_no_validation", _row("docs/protocols.md", "`fedbary_no_validation`")[0]),
    ):
        m = re.search(r"AUC[^–]*?([\d.]+)–([\d.]+)", cell)
        assert m, cell
        _close(m.group(1), fig[f"{name}.auc_min"], f"{name} lowest AUC over seeds")
        _close(m.group(2), fig[f"{name}.auc_max"], f"{name} highest AUC over seeds")
    val = _row("docs/protocols.md", "`fedbary_valuation`")[0]
    assert (
        int(re.search(r"monotone in (\d) of 8", val).group(1)) == fig["fedbary_valuation.monotone"]
    )
    nov = _row("docs/protocols.md", "`fedbary_no_validation`")[0]
    assert (
        int(re.search(r"in (\d) of 8 seeds", nov).group(1))
        == fig["fedbary_no_validation.farthest_last"]
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


DISTILL_ROWS = {
    "Sinkhorn macro-F1": ("sinkhorn", "macro_f1"),
    "entropy macro-F1": ("entropy", "macro_f1"),
    "Sinkhorn accuracy": ("sinkhorn", "accuracy"),
    "entropy accuracy": ("entropy", "accuracy"),
    "Sinkhorn SD (lower = better)": ("sinkhorn", "semantic_distance"),
    "Sinkhorn SD": ("sinkhorn", "semantic_distance"),
    "entropy SD": ("entropy", "semantic_distance"),
}


@pytest.mark.parametrize(
    "gen,start,end,reference",
    [
        (
            "distill_diabetes",
            "*Ordinal task 1",
            "*Ordinal task 2",
            r"reference: macro-F1 ([\d.]+ \[[\d.]+, [\d.]+\]), SD ([\d.]+)",
        ),
        (
            "distill_sentiment",
            "*Ordinal task 2",
            "**Against the paper",
            r"the central reference ([\d.]+ \[[\d.]+, [\d.]+\])",
        ),
    ],
)
def test_distillation_tables(gen, start, end, reference, generated):
    fig = generated(gen)
    rows = _section("docs/protocols.md", start, end)
    checked = 0
    body = [(first, cells) for first, cells in rows if first != "loss / weighting"]
    for first, cells in body:
        assert first in DISTILL_ROWS, f"{gen}: table row {first!r} is not checked"
        loss, metric = DISTILL_ROWS[first]
        assert len(cells) == 4, (first, cells)
        for w, cell in zip("ADUE", cells):
            _ci_close(cell, fig, f"{loss}.{w}.{metric}", f"{gen} {first} {w}")
            checked += 1
    assert checked >= 16, f"{gen}: only {checked} table cells found"
    text = " ".join((ROOT / "docs/protocols.md").read_text().split())
    m = re.search(reference, text)
    assert m, f"{gen}: no central reference figure"
    _ci_close(m.group(1), fig, "sinkhorn.A.reference_macro_f1", f"{gen} reference macro-F1")
    if m.lastindex == 2:
        _ci_close(m.group(2), fig, "sinkhorn.A.reference_semantic_distance", f"{gen} reference SD")
    if gen == "distill_sentiment":  # how hard the task is: a logistic regression's CV macro-F1
        m = re.search(
            rf"logistic regression reaches macro-F1 ({_FIGURE} \[{_FIGURE}, {_FIGURE}\])", text
        )
        assert m, "docs/protocols.md: the logistic-regression baseline was reworded"
        _ci_close(m.group(1), fig, "logreg_cv_macro_f1", "logistic regression CV macro-F1")


# the paired-differences paragraph: "<comparison> <metric> <mean> [<lo>, <hi>] (<tag>)", where a
# comparison and a metric hold until the next one; tag = weighting (Sinkhorn − entropy) or loss
# (E − A)
_PAIRED_TOKEN = re.compile(
    rf"(?P<comp>Sinkhorn − entropy|E − A)|(?P<metric>macro-F1|accuracy|SD)"
    rf"|(?P<fig>{_FIGURE} \[{_FIGURE}, {_FIGURE}\]) \((?P<tag>\w+)"
)
_PAIRED_COMP = {"Sinkhorn − entropy": "sinkhorn-entropy", "E − A": "E-A"}
_PAIRED_METRIC = {"macro-F1": "macro_f1", "accuracy": "accuracy", "SD": "semantic_distance"}


def _paragraph(doc: str, start: str, end: str, opening: str) -> str:
    """The paragraph beginning with ``opening`` between two markers of a doc, on one line."""
    text = (ROOT / doc).read_text()
    part = text[text.index(start) : text.index(end, text.index(start))]
    para = next(p for p in part.split("\n\n") if p.startswith(opening))
    return " ".join(para.split())


@pytest.mark.parametrize(
    "gen,start,end,opening,figures",
    [
        ("distill_diabetes", "*Ordinal task 1", "*Ordinal task 2", "Paired differences:", 5),
        ("distill_sentiment", "*Ordinal task 2", "**Against the paper", "Paired:", 11),
    ],
)
def test_distillation_paired_differences(gen, start, end, opening, figures, generated):
    # each paired per-seed difference within the seeds' interval, and resolved (interval
    # excluding 0) exactly when the printed one is: the prose around it says which are
    fig = generated(gen)
    para = _paragraph("docs/protocols.md", start, end, opening)
    comp = metric = None
    checked = 0
    for m in _PAIRED_TOKEN.finditer(para):
        if m.group("comp"):
            comp = _PAIRED_COMP[m.group("comp")]
        elif m.group("metric"):
            metric = _PAIRED_METRIC[m.group("metric")]
        else:
            assert comp and metric, f"{gen}: figure {m.group(0)!r} before its comparison"
            tag = m.group("tag")
            key = f"{comp}.{tag if comp == 'sinkhorn-entropy' else tag.lower()}.{metric}"
            what = f"{gen} paired {comp} {metric} ({tag})"
            _ci_close(m.group("fig"), fig, key, what)
            lo, hi = (_signed(x) for x in re.findall(_FIGURE, m.group("fig"))[1:])
            assert (lo > 0 or hi < 0) == (fig[f"{key}.lo"] > 0 or fig[f"{key}.hi"] < 0), (
                f"{what}: printed [{lo}, {hi}] vs now [{fig[key + '.lo']:.4g}, {fig[key + '.hi']:.4g}]"
                " (resolved or not)"
            )
            checked += 1
    assert checked == figures == para.count("["), f"{gen}: {checked} paired figures checked"


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
    rows = _section("docs/protocols.md", "*Privacy", "Membership AUC falls")
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
    text = " ".join((ROOT / "docs/protocols.md").read_text().split())
    m = re.search(rf"uniform baseline TV ({_FIGURE} \[{_FIGURE}, {_FIGURE}\])", text)
    assert m, "docs/protocols.md: the privacy caption's baseline TV was reworded"
    _ci_close(m.group(1), fig, f"0.{TV_RATIO}#1.tv_baseline", "uniform baseline TV")
    mia = _attack_key(fig, 0, MIA, "auc")
    m = re.search(r"Membership AUC falls from ([\d.]+) \(per seed ([\d., ]+)\)", text)
    assert m, "docs/protocols.md: the membership AUC sentence was reworded"
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
    cost = r"(−\d+ \[−\d+, −\d+\])"
    m = re.search(
        rf"cost of DP-SGD \(paired per seed\): {cost} points at ε = 2, {cost} points at ε = 1", text
    )
    assert m, "docs/protocols.md: the DP-SGD accuracy cost sentence was reworded"
    for printed, i in zip(m.groups(), (3, 4)):  # paired per seed against row 0 (no DP), points
        key = f"{i}-0.accuracy"
        points = {f"{key}.{b}": 100 * fig[f"{key}.{b}"] for b in ("mean", "lo", "hi")}
        _ci_close(printed, points, key, f"accuracy cost of DP-SGD row {i}")


def test_fedwad_clustering_paragraph(generated):
    text = " ".join((ROOT / "docs/protocols.md").read_text().split())
    m = re.search(
        r"ARI ([\d.]+) in all four settings \(exact matrix: ([\d.]+)\); matrix error "
        r"\+([\d.]+) % .*?, (\d+) (\d+) messages, (\d+) FedWAD runs",
        text,
    )
    assert m, "docs/protocols.md: the fedwad_clustering figures were reworded"
    fig = generated("fedwad_clustering_settings")
    for tag in ("affinity", "gaussian", "sparse3", "sparse5"):
        _close(m.group(1), fig[f"{tag}.ari"], f"{tag} ARI")
        _close(m.group(2), fig[f"{tag}.exact_ari"], f"{tag} exact ARI")
        _close(m.group(3), 100 * fig[f"{tag}.matrix_error"], f"{tag} matrix error")
        assert int(m.group(4) + m.group(5)) == fig[f"{tag}.messages"], tag
        assert int(m.group(6)) == fig[f"{tag}.pairs"], tag


def test_triangle_attack_items(generated):
    fig = generated("triangle_attacks")
    text = " ".join((ROOT / "docs/attacks.md").read_text().split())
    m = re.search(
        r"1e-6 × the median row norm: (\d+) % for each seller; coverage (\d+) %; "
        r"W2 ratio < ([\de.-]+)\)",
        text,
    )
    assert m, "docs/attacks.md: marketplace item reworded"
    for seller in ("seller_1", "seller_2", "seller_3"):
        key = f"triangle_wad_marketplace.{seller}"
        _close(m.group(1), 100 * fig[f"{key}.exact_recovery"], f"{seller} exact recovery")
        _close(m.group(2), 100 * fig[f"{key}.coverage"], f"{seller} coverage")
        assert fig[f"{key}.w2_ratio"] < float(m.group(3)), (seller, fig[f"{key}.w2_ratio"])
    m = re.search(r"k = 10\): (\d+) % / (\d+) % of alice's / bob's", text)
    assert m, "docs/attacks.md: known-t item reworded"
    _close(m.group(1), 100 * fig["triangle_wad_digits.alice.exact_recovery"], "alice")
    _close(m.group(2), 100 * fig["triangle_wad_digits.bob.exact_recovery"], "bob")


def test_frontier_fedbary_table(generated):
    # rows in the sweep's order: none, small_support 50, small_support 10, noise eps 10, eps 1
    fig = generated("frontier_fedbary")
    rows = _section("docs/frontier.md", "## Data valuation: FedBary", "With its default support")
    body = [cells for first, cells in rows if first != "setting"]
    assert len(body) == 5, list(rows)
    keys = (
        "utility.contribution_spearman",
        "utility.detection_auc",
        "any_attack.leakage",
        "any_attack.coverage",
    )
    for i, cells in enumerate(body):
        eps = cells[0]
        if eps == "∞":
            assert math.isinf(fig[f"{i}.eps"]), (i, fig[f"{i}.eps"])
        else:
            _close(eps, fig[f"{i}.eps"], f"frontier_fedbary row {i} ε")
        for cell, key in zip(cells[1:], keys):
            printed = cell.replace("−", "-")
            neg = printed.startswith("-")
            m = re.match(r"-?([\d.]+)(?: \[(-?[\d.]+), (-?[\d.]+)\])?", printed)
            mean = fig[f"{i}.{key}.mean"]
            lo, hi = fig[f"{i}.{key}.lo"], fig[f"{i}.{key}.hi"]
            value = float(m.group(1)) * (-1 if neg else 1)
            decimals = len(m.group(1).split(".")[1]) if "." in m.group(1) else 0
            slack = max(0.5 * 10**-decimals, hi - mean, mean - lo) + 1e-9
            assert abs(value - mean) <= slack, (
                f"frontier_fedbary row {i} {key}: prints {cell}, now {mean:.4g} [{lo:.4g}, {hi:.4g}]"
            )


FEDWAD_ROWS = {
    "digits, classes 0–4 vs 5–9": "digits_classes",
    "digits, random halves": "digits_halves",
    "d = 50 Gaussians, 1000 vs 1000": "gauss_1000_1000",
    "d = 50 Gaussians, 1000 vs 333": "gauss_1000_333",
}


@pytest.mark.parametrize("first", list(FEDWAD_ROWS))
def test_fedwad_mode_table(first, generated):
    # | case | paper mode "+54.9 %" | accurate mode "2.1e-5" | rounds |
    paper, accurate, rounds = _row("docs/protocols.md", first)[:3]
    fig = generated("fedwad_modes")
    case = FEDWAD_ROWS[first]
    _close(re.match(r"\+([\d.]+) %", paper).group(1), 100 * fig[f"{case}.paper"], first)
    mant, exp = accurate.split("e")
    value = fig[f"{case}.accurate"] / 10 ** int(exp)
    _close(mant, value, f"{first} accurate mode (× 1e{exp})")
    assert int(rounds) == fig[f"{case}.rounds"], (first, rounds, fig[f"{case}.rounds"])


TRIANGLE = {
    "triangle_wad_digits": [
        (r"\+([\d.]+) % \(W", "digits.error", 100),
        (r"\(W ([\d.]+) →", "digits.exact", 1),
        (r"→ ([\d.]+)\)", "digits.estimate", 1),
        (r"ROC-AUC ([\d.]+),", "digits.auc_server", 1),
        (r"precision = recall ([\d.]+)", "digits.precision", 1),
        (r"precision = recall ([\d.]+)", "digits.recall", 1),
        (r"seeds 0–4: \+([\d.]+)…", "digits.error.min", 100),
        (r"…\+([\d.]+) %", "digits.error.max", 100),
        (r"AUC ([\d.]+)–", "digits.auc_server.min", 1),
        (r"AUC [\d.]+–([\d.]+)", "digits.auc_server.max", 1),
    ],
    "triangle_wad_marketplace": [
        (r"\+([\d.]+) % vs exact", "market.error", 100),
        (r"\(([\d.]+) →", "market.exact", 1),
        (r"→ ([\d.]+)\)", "market.estimate", 1),
        (r"unknown-t vs known-t ([\d.]+) %", "market.unknown_vs_known", 100),
        (r"AUC ([\d.]+) \(buyer side\)", "market.auc_buyer", 1),
        (r"([\d.]+) \(seller side\)", "market.auc_seller", 1),
        (r"seeds 0–4: \+([\d.]+)…", "market.error.min", 100),
        (r"…\+([\d.]+) %", "market.error.max", 100),
        (r"unknown vs known ≤ ([\d.]+) %", "market.unknown_vs_known.max", 100),
        (r"AUC ([\d.]+)–[\d.]+ \(buyer\)", "market.auc_buyer.min", 1),
        (r"AUC [\d.]+–([\d.]+) \(buyer\)", "market.auc_buyer.max", 1),
        (r"([\d.]+)–[\d.]+ \(seller\)", "market.auc_seller.min", 1),
        (r"[\d.]+–([\d.]+) \(seller\)", "market.auc_seller.max", 1),
    ],
}


@pytest.mark.parametrize("name", list(TRIANGLE))
def test_triangle_scenario_table(name, generated):
    cell = _row("docs/protocols.md", f"`{name}`")[0]
    fig = generated("triangle_scenarios")
    for pattern, key, scale in TRIANGLE[name]:
        m = re.search(pattern, cell)
        assert m, f"docs/protocols.md {name}: no figure matches {pattern!r}"
        value = fig[key] * scale
        if key.endswith(".max") and "≤" in pattern:
            # an upper bound: the largest over seeds must stay below it (at its rounding)
            decimals = len(m.group(1).split(".")[1]) if "." in m.group(1) else 0
            assert value <= float(m.group(1)) + 0.5 * 10**-decimals, (name, key, value)
            continue
        _close(m.group(1), value, f"{name} {key}")


# the demo table (docs/findings.md): setting as printed -> the sweep's setting label
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
    from testbed.config import load_scenario
    from testbed.report import _aggregate
    from testbed.sweep import run_sweep

    out = run_sweep(load_scenario(ROOT / "scenarios/leakage_vs_accuracy.yaml"), tmp_path, jobs=2)
    agg = _aggregate(out.rows)
    text = (ROOT / "docs/findings.md").read_text()
    checked = 0
    for (proto, printed_setting), label in DEMO_ROWS.items():
        m = re.search(rf"^\| {proto} \| {re.escape(printed_setting)} \| (.+) \|$", text, flags=re.M)
        assert m, f"docs/findings.md: no demo row for {proto} / {printed_setting}"
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
