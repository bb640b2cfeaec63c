"""A run's one error, the x-axis of leakage against accuracy: the quantity each protocol names
(``Protocol.headline_accuracy``), several quantities scored as one vector, and the report and
CLI that read it. Before it, a FedBary report plotted client_1's contribution error, and a report
of FedBary beside FedWAD left FedBary's points out of every trade-off figure. FedBary's headline
is its contribution ranking (``Protocol.headline_ranking``; issue 46), its distance error kept
beside it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.cli.main import main
from testbed.registry import PROTOCOLS
from testbed.report.model import HEADLINE, gather
from testbed.report.writer import write_report
from testbed.run.evaluate import accuracy_of, headline_accuracy
from testbed.run.execute import execute
from testbed.scenario.loading import load_scenario


class _Proto:
    headline_accuracy: tuple[str, ...] = ()
    headline_ranking: str | None = None  # declared by protocols.Protocol: every protocol has it

    def _as_str(self):
        """The same declaration as one string (``headline_accuracy = "wasserstein"``)."""
        self.headline_accuracy = self.headline_accuracy[0]
        return self


def _named(*patterns):
    p = _Proto()
    p.headline_accuracy = patterns
    return p


def _acc(est: dict, ref: dict) -> dict:
    return {k: accuracy_of(est[k], ref[k]) for k in est}


def test_one_named_quantity_is_scored_alone():
    acc = _acc({"ari": 0.5, "wasserstein": 1.1}, {"ari": 1.0, "wasserstein": 1.0})
    head = headline_accuracy(_named("wasserstein"), acc)
    assert head["keys"] == ["wasserstein"] and head["quantity"] == "wasserstein"
    assert head["relative_error"] == acc["wasserstein"]["relative_error"]
    assert head["signed_relative_error"] == acc["wasserstein"]["signed_relative_error"]


def test_a_glob_scores_its_quantities_as_one_vector():
    est = {"distance_b": 2.0, "distance_a": 1.0, "contribution_a": 0.9}
    ref = {"distance_b": 1.0, "distance_a": 2.0, "contribution_a": 0.1}
    head = headline_accuracy(_named("distance_*"), _acc(est, ref))
    assert head["keys"] == ["distance_a", "distance_b"]
    # ||(1, 2) - (2, 1)|| / ||(2, 1)||; the signed error is that of the sums (3 against 3)
    assert head["relative_error"] == pytest.approx(math.sqrt(2) / math.sqrt(5), rel=1e-12)
    assert head["signed_relative_error"] == pytest.approx(0.0, abs=1e-12)


def test_the_first_glob_that_matches_wins_and_arrays_join_the_vector():
    D = np.array([[0.0, 1.0], [1.0, 0.0]])
    acc = _acc(
        {"wasserstein": 1.0, "distance_matrix": 2 * D}, {"wasserstein": 2.0, "distance_matrix": D}
    )
    assert headline_accuracy(_named("distance_matrix", "wasserstein"), acc)["keys"] == [
        "distance_matrix"
    ]
    assert headline_accuracy(_named("nothing_*", "wasserstein"), acc)["relative_error"] == 0.5
    head = headline_accuracy(_named("*"), acc)  # both: the matrix flattened into the vector
    flat_e, flat_x = np.r_[2 * D.ravel(), 1.0], np.r_[D.ravel(), 2.0]
    assert head["relative_error"] == pytest.approx(
        np.linalg.norm(flat_e - flat_x) / np.linalg.norm(flat_x), rel=1e-12
    )


def test_a_protocol_that_names_nothing_keeps_its_first_quantity():
    acc = _acc({"b": 3.0, "a": 1.0}, {"b": 2.0, "a": 1.0})
    for proto in (_Proto(), _named("missing")):
        head = headline_accuracy(proto, acc)
        assert head["keys"] == ["b"] and head["relative_error"] == 0.5
    assert headline_accuracy(_Proto(), {}) is None


def test_a_bad_declaration_is_named_not_a_traceback():
    from testbed.errors import TestbedError

    acc = _acc({"wasserstein": 1.0}, {"wasserstein": 2.0})
    assert headline_accuracy(_named("wasserstein")._as_str(), acc)["keys"] == ["wasserstein"]
    bad = _named(3)
    bad.name = "hostile"
    with pytest.raises(TestbedError, match="protocol 'hostile': headline_accuracy must be"):
        headline_accuracy(bad, acc)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.01, 100, allow_nan=False), st.floats(0.01, 100, allow_nan=False)),
        min_size=1,
        max_size=8,
    ),
    st.floats(1e-3, 1e3),
)
def test_the_vector_error_is_the_norm_rule_and_ignores_scale(pairs, c):
    est = {f"distance_{i}": e for i, (e, _) in enumerate(pairs)}
    ref = {f"distance_{i}": x for i, (_, x) in enumerate(pairs)}
    head = headline_accuracy(_named("distance_*"), _acc(est, ref))
    e, x = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    assert head["relative_error"] == pytest.approx(
        np.linalg.norm(e - x) / np.linalg.norm(x), rel=1e-9
    )
    if len(pairs) == 1:  # one quantity: its own relative error
        assert head["relative_error"] == pytest.approx(abs(e[0] - x[0]) / x[0], rel=1e-12)
    scaled = headline_accuracy(
        _named("distance_*"),
        _acc({k: c * v for k, v in est.items()}, {k: c * v for k, v in ref.items()}),
    )
    assert scaled["relative_error"] == pytest.approx(head["relative_error"], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(
    "name, keys",
    [
        ("fedwad", {"wasserstein"}),
        ("triangle_wad", {"wasserstein"}),
        ("triangle_wad_marketplace", {"wasserstein"}),
        ("fedbary", {"distance_*"}),
        ("fedwad_clustering", {"distance_matrix"}),
        ("fedwad_clustered_fl", {"distance_matrix"}),
        ("fedwad_coreset", {"coreset_wasserstein"}),
        ("sinkhorn_distillation", {"accuracy"}),
        ("dp_jl_ot", {"distance_matrix", "wasserstein"}),
        ("dp_sliced_wasserstein", {"distance_matrix", "wasserstein"}),
        ("dp_gaussian_moments", {"distance_matrix", "wasserstein"}),
    ],
)
def test_every_built_in_protocol_names_its_distance(name, keys):
    assert set(PROTOCOLS.get(name).headline_accuracy) == keys


@pytest.fixture(scope="module")
def two_protocols(tmp_path_factory):
    """A FedWAD run and a FedBary run, and a directory whose results.jsonl holds both, as a
    sweep over protocols writes it."""
    base = tmp_path_factory.mktemp("headline")
    rows = []
    for i, name in enumerate(("contract_tiny", "contract_tiny_fedbary")):
        out = execute(load_scenario(f"scenarios/{name}.yaml"), out_dir=base / name, progress=False)
        r = out.results
        rows.append(
            {
                "cell": f"c{i}",
                "seed": r["seed"],
                "setting": {},
                "labels": {},
                "label": name,
                "results": r,
            }
        )
    both = base / "both"
    both.mkdir()
    (both / "results.jsonl").write_text("".join(json.dumps(r, default=float) + "\n" for r in rows))
    return base, rows


def test_fedbarys_secondary_error_is_its_clients_distances(two_protocols):
    _, rows = two_protocols
    r = rows[1]["results"]
    head = r[HEADLINE]["secondary"]
    dist = sorted(k for k in r["accuracy"] if k.startswith("distance_"))
    assert head["quantity"] == "distance_*" and head["keys"] == dist and len(dist) == 3
    e = np.array([r["estimates"][k] for k in dist])
    x = np.array([r["reference"][k] for k in dist])
    assert head["relative_error"] == pytest.approx(np.linalg.norm(e - x) / np.linalg.norm(x))
    fedwad = rows[0]["results"]
    assert fedwad[HEADLINE]["relative_error"] == fedwad["accuracy"]["wasserstein"]["relative_error"]


def test_a_report_of_two_protocols_puts_both_on_the_error_axis(two_protocols):
    base, rows = two_protocols
    data = gather(base / "both")
    assert data.err_key == f"{HEADLINE}.relative_error"
    assert data.err_label == (
        "fedwad: relative error of wasserstein; fedbary: contribution ranking: 1 − Spearman ρ "
        "(3 parties)"
    )
    assert {k[0] for k in data.agg if data.err_key in data.agg[k]} == {"fedwad", "fedbary"}
    fedbary = next(k for k in data.agg if k[0] == "fedbary")
    assert data.agg[fedbary][data.err_key][0] == rows[1]["results"][HEADLINE]["relative_error"]
    html = write_report(base / "both").read_text().replace("<wbr>", "")
    assert json.dumps(data.err_label)[1:-1] in html  # the figures' axis title (JSON text)
    results = html.split("Results per protocol", 1)[1]
    # each protocol's table names its own quantity; FedBary's distance error beside its ranking
    assert results.count("<th>contribution ranking: 1 − Spearman ρ (3 parties)</th>") == 1
    assert results.count("<th>relative error of distance_* (3 values)</th>") == 1
    assert results.count("<th>relative error of wasserstein</th>") == 1
    # the accuracy-by-setting figure has a point of each protocol
    fig = html.split('id="plot-error_by_setting"', 1)[1].split("</script>", 1)[0]
    assert '"name":"fedbary"' in fig and '"name":"fedwad"' in fig


def test_results_written_before_the_headline_keep_the_first_quantity(two_protocols, tmp_path):
    _, rows = two_protocols
    old = json.loads(json.dumps(rows[1], default=float))
    del old["results"][HEADLINE]
    (tmp_path / "results.jsonl").write_text(json.dumps(old) + "\n")
    data = gather(tmp_path)
    first = next(iter(old["results"]["accuracy"]))  # a client's distance or contribution
    assert first.endswith("_client_1")
    assert data.err_key == f"{first}.relative_error" and data.err_label == first


def test_testbed_run_prints_the_ranking_and_the_error_over_several_quantities(tmp_path, capsys):
    code = main(["run", "scenarios/contract_tiny_fedbary.yaml", "--out", str(tmp_path / "r"), "-q"])
    assert code == 0
    out = capsys.readouterr().out
    head = json.loads((tmp_path / "r" / "results.json").read_text())[HEADLINE]
    line = next(x for x in out.splitlines() if x.startswith("headline accuracy"))
    assert line == (
        f"headline accuracy (contribution ranking, 3 parties): Spearman {head['spearman']:.3f}, "
        f"top-2 overlap {head['top_k_overlap']:.2f} against the central ranking"
    )
    line = next(x for x in out.splitlines() if x.startswith("secondary"))
    assert line.startswith("secondary: relative error (distance_*, 3 values): ")
    assert f"{100 * head['secondary']['relative_error']:.3g}" in line


def test_the_findings_page_quotes_this_run(two_protocols):
    """docs/findings/findings.md ("What FedBary's error axis measured") quotes contract_tiny_fedbary's
    old axis (client_1's contribution error) and its headline error, in the report's format."""
    from pathlib import Path

    from testbed.report.fmt import pct

    text = (Path(__file__).resolve().parents[1] / "docs/findings/findings.md").read_text()
    part = text.split("## What FedBary's error axis measured", 1)[1]
    r = two_protocols[1][1]["results"]
    old = r["accuracy"]["contribution_client_1"]["relative_error"]
    dist = [r["accuracy"][f"distance_client_{i}"]["relative_error"] for i in (1, 2, 3)]
    assert (
        f"plotted client_1's contribution error alone: on `contract_tiny_fedbary` {pct(old)}"
        in (" ".join(part.split()))
    )
    dist_err = r[HEADLINE]["secondary"]["relative_error"]
    assert f"{pct(dist_err)} on that scenario" in " ".join(part.split())
    lo, hi = min(dist), max(dist)
    assert f"distances are {round(100 * lo)}–{round(100 * hi)} % off" in " ".join(part.split())


def test_a_bad_declaration_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    """``testbed validate`` and ``testbed run`` read the declaration in their preflight: one
    line, exit 2, and no run directory, instead of an error after the protocol ran."""
    monkeypatch.setattr(PROTOCOLS.get("fedwad"), "headline_accuracy", (3,))
    assert main(["validate", "scenarios/contract_tiny.yaml"]) == 2
    assert main(["run", "scenarios/contract_tiny.yaml", "--out", str(tmp_path / "r"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    want = (
        "error: scenarios/contract_tiny.yaml: protocol 'fedwad': headline_accuracy must be a "
        "tuple of glob strings, got (3,)"
    )
    assert err == [want, want]
    assert not (tmp_path / "r").exists()


def test_fedbarys_headline_is_its_contribution_ranking(two_protocols):
    """A FedBary user relies on the clients' ranking by contribution: the headline is that
    ranking against the central one (Spearman, top-k overlap), not the distance error (issue
    46); on this scenario the distances are 23 % off while the ranking is the central one."""
    from scipy.stats import spearmanr

    _, rows = two_protocols
    r = rows[1]["results"]
    head = r[HEADLINE]
    keys = sorted(k for k in r["accuracy"] if k.startswith("contribution_"))
    est = [r["estimates"][k] for k in keys]
    ref = [r["reference"][k] for k in keys]
    assert head["quantity"] == "contribution ranking" and head["keys"] == keys
    assert head["spearman"] == pytest.approx(spearmanr(est, ref).statistic)
    assert head["top_k"] == 2
    best = set(np.argsort(est)[-2:]) & set(np.argsort(ref)[-2:])
    assert head["top_k_overlap"] == pytest.approx(len(best) / 2)
    assert head["relative_error"] == pytest.approx(1.0 - head["spearman"])
    assert r["utility"]["contribution_top_k"] == head["top_k_overlap"]
    assert head["secondary"]["relative_error"] > 0.2  # the distances, far off


def test_a_misranked_contribution_is_what_fedbarys_headline_shows():
    # Prepare: accurate distances (1 % off) whose contributions swap the two best clients
    proto = PROTOCOLS.get("fedbary")
    acc = _acc(
        {
            "distance_a": 1.01,
            "distance_b": 0.99,
            "distance_c": 3.0,
            "distance_d": 4.0,
            "contribution_a": 0.30,
            "contribution_b": 0.31,
            "contribution_c": 0.2,
            "contribution_d": 0.19,
        },
        {
            "distance_a": 1.0,
            "distance_b": 1.0,
            "distance_c": 3.0,
            "distance_d": 4.0,
            "contribution_a": 0.32,
            "contribution_b": 0.30,
            "contribution_c": 0.2,
            "contribution_d": 0.18,
        },
    )
    # Execute
    head = headline_accuracy(proto, acc)
    # Assert: Spearman 0.8 (one swap in four), top-2 overlap 1; the distance error is 1 %
    assert head["spearman"] == pytest.approx(0.8)
    assert head["top_k_overlap"] == 1.0 and head["top_k"] == 2
    assert head["relative_error"] == pytest.approx(0.2)
    assert head["secondary"]["relative_error"] < 0.01
