"""The report renders results only: self-contained HTML, plots, tables, epsilon section, CSV."""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from _scenarios import tiny
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.cli.main import main
from testbed.report.fmt import fmt
from testbed.report.model import pareto_front
from testbed.report.writer import write_report
from testbed.run.execute import execute
from testbed.scenario.loading import parse_scenario


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "srcset", "data", "action", "poster"):
                self.refs.append((tag, k, v or ""))


def _parse(html: str) -> _Links:
    p = _Links()
    p.feed(html)
    return p


@pytest.fixture(scope="module")
def sweep_dir(noise_sweep) -> Path:
    """The session's noise sweep (tests/conftest.py): 4 settings x 5 seeds."""
    return noise_sweep.dir


class Rendered(NamedTuple):
    html: str  # report.html's text
    stderr: str  # what the render wrote on stderr (asked for no progress: nothing)


@pytest.fixture(scope="module")
def sweep_report(sweep_dir) -> Rendered:
    """The sweep's report, rendered once (without progress lines) for the tests that only read
    it: report.html's text and the render's stderr; report.md, results.csv, summary.csv and
    plots/ are beside it in ``sweep_dir``. A test that renders again writes the same files."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        html = write_report(sweep_dir).read_text()
    return Rendered(html, err.getvalue())


def _assert_self_contained(html: str) -> list[str]:
    """No reference leaves the file; plotly's library inlined once; returns the figures' ids."""
    links = _parse(html)
    for tag, attr, value in links.refs:
        assert value.startswith("data:") or value.startswith("#"), f"external {tag} {attr}={value}"
    assert "<link" not in html
    assert not re.search(r"<script[^>]*\bsrc=", html), "a script loaded from elsewhere"
    assert "cdn.plot.ly" not in html.split("</head>", 1)[1]
    # the library once, in the head; every figure a div with its own inline data
    assert html.count("Plotly.newPlot") >= 1 and html.split("</head>")[0].count("<script") == 1
    figs = re.findall(r'<div id="(plot-[^"]+)" class="plotly-graph-div"', html)
    assert figs and len(figs) == len(set(figs))
    return figs


def test_sweep_report_is_self_contained_with_plots_tables_and_epsilon(sweep_dir, sweep_report):
    html = sweep_report.html
    # Assert: interactive plots with their library inline, no external reference
    figs = _assert_self_contained(html)
    assert len(figs) >= 2  # claimed-epsilon trade-off per party + accuracy by setting
    # tables: one per protocol, the epsilon table, the observer's view, provenance
    for heading in (
        "Leakage against accuracy",
        "Results per protocol",
        "Claimed vs audited ε",
        "What the observer saw",
        "Protocol modes and deviations",
        "Scenario and provenance",
    ):
        assert f">{heading}</h" in html, heading
    # the assumptions and the sweep's cells are folded (a click away), the scenario too
    assert "<summary>Assumptions behind the claims: " in html
    assert "<summary>the scenario as run</summary>" in html
    assert html.count("<table>") >= 6
    rows = [json.loads(x) for x in (sweep_dir / "results.jsonl").read_text().splitlines()]
    sweep_hash = json.loads((sweep_dir / "sweep.json").read_text())["sweep_hash"]
    assert sweep_hash in html
    assert "fedwad.xi_mu" in html and "paper/barycentric" in html
    assert "opacus" in html and "POT" in html
    # every figure's error axis names the quantity (results.json's accuracy_headline)
    for fig in ("plot-tradeoff_claimed_epsilon", "plot-error_by_setting"):
        part = html.split(f'id="{fig}"', 1)[1].split("</script>", 1)[0]
        assert '"title":{"text":"relative error of wasserstein (mean, 95 % CI)"}' in part, fig
    # claimed epsilon of a cell as the ledger wrote it
    eps = rows[-1]["results"]["privacy"]["alice"]["epsilon"]
    assert fmt(eps) in html
    # Markdown, PNG files and CSV beside it
    md = (sweep_dir / "report.md").read_text()
    assert "## Claimed vs audited ε" in md
    for img in re.findall(r"\]\((plots/[^)]+)\)", md):
        assert (sweep_dir / img).read_bytes().startswith(b"\x89PNG")
    with open(sweep_dir / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert {r["cell"] for r in table} == {r["cell"] for r in rows} and len(rows) == 20
    columns = {r["column"] for r in table}
    assert "wasserstein.relative_error" in columns and "eps_claimed[alice]" in columns


def test_report_renders_what_the_files_say(sweep_dir, tmp_path):
    # Prepare: a copy whose first result was edited by hand; the report must show the edit
    work = tmp_path / "edited"
    work.mkdir()
    for name in ("results.jsonl", "sweep.json", "run_info.json", "scenario.yaml"):
        (work / name).write_bytes((sweep_dir / name).read_bytes())
    rows = [json.loads(x) for x in (work / "results.jsonl").read_text().splitlines()]
    rows[0]["results"]["accuracy"]["wasserstein"]["estimate"] = 123456.0
    (work / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # Execute
    write_report(work)
    # Assert
    with open(work / "results.csv") as f:
        table = list(csv.DictReader(f))
    first = [r for r in table if r["cell"] == rows[0]["cell"]]
    assert [float(r["value"]) for r in first if r["column"] == "wasserstein.estimate"] == [123456.0]


def _with_attacks(rows: list[dict]) -> list[dict]:
    """Rows as the attacks branch writes them: one attack row per target (values invented
    here — the report only renders them)."""
    out = copy.deepcopy(rows)
    for i, r in enumerate(out):
        d = r["setting"]["defenses"]
        z = d[0]["params"]["noise_multiplier"] if d else 0.0
        r["results"]["attacks"] = [
            {
                "attack": "fedwad_geodesic",
                "label": "fedwad_geodesic",
                "isolation": "process",
                "target": t,
                "observer": "server",
                "w2": 1.0 + z,
                "w2_baseline": 2.0,
                "w2_ratio": (1.0 + z) / 2.0,
                "leakage": max(0.0, 1 - (1.0 + z) / 2.0) + 0.01 * (i % 3),
                "eps_lower": 50.0 if z == 0.01 else 0.5,
            }
            for t in ("alice", "bob")
        ]
    return out


# slow (5 s: re-attacks a sweep): make test keeps the Pareto front (test_pareto_front) and the
# trade-off figures (test_one_tradeoff_figure_per_family_with_a_view_per_metric_and_attack)
@pytest.mark.slow
def test_attack_rows_give_tradeoff_plots_pareto_front_and_audit(sweep_dir, tmp_path):
    # Prepare
    work = tmp_path / "attacked"
    work.mkdir()
    for name in ("sweep.json", "run_info.json", "scenario.yaml"):
        (work / name).write_bytes((sweep_dir / name).read_bytes())
    rows = _with_attacks(
        [json.loads(x) for x in (sweep_dir / "results.jsonl").read_text().splitlines()]
    )
    (work / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # Execute
    html = write_report(work).read_text()
    # Assert: one figure per metric family (distributional leakage: w2_ratio and leakage;
    # membership: eps_lower) with a view per metric for the attack and for the worst case over
    # attacks (the cross-protocol view), one for claimed epsilon (a view per party), accuracy by
    # setting; the raw w2 is in the tables only
    figs = _assert_self_contained(html)
    assert len(figs) == 1 + 2 + 1 + 1  # the headline's frontier first
    for m in ("w2_ratio", "leakage", "eps_lower"):
        for attack in ("fedwad_geodesic", "any_attack"):
            assert f'"label":"{attack}.{m}"' in html.replace(": ", ":"), (attack, m)
        for ext, magic in (("png", b"\x89PNG"), ("pdf", b"%PDF"), ("svg", b"<?xml")):
            path = work / "plots" / f"tradeoff_any_attack_{m}.{ext}"
            assert path.read_bytes().startswith(magic), path
    assert '"label":"fedwad_geodesic.w2"' not in html.replace(": ", ":")
    for party in ("alice", "bob"):
        assert f'"label":"eps_claimed[{party}]"' in html.replace(": ", ":")
    # the headline names the worst leak, its attack and observer, and gives a verdict
    head = html.split('class="headline-text"')[1].split("</div>")[0]
    assert "fedwad_geodesic" in head and "server" in head and 'class="verdict"' in head
    # a setting in brackets after a figure is named as one, not a bare value read as a baseline
    text = re.sub(r"<[^>]+>", "", head)
    assert re.search(r"at error [\d.]+ % \(no defense\)", text), text
    assert "(setting gaussian_measure_noise(noise_multiplier=1))." in text
    # the least-error and the least-leakage settings are on the leakage Pareto front
    means: dict[str, list[float]] = {}
    for r in rows:
        lab = r["label"].removeprefix("defenses=")
        err = r["results"]["accuracy"]["wasserstein"]["relative_error"]
        leak = max(a["leakage"] for a in r["results"]["attacks"])
        means.setdefault(lab, []).append((err, leak))
    avg = {k: tuple(sum(x) / len(v) for x in zip(*v)) for k, v in means.items()}
    best_err = min(avg, key=lambda k: avg[k][0])
    best_leak = min(avg, key=lambda k: avg[k][1])
    for lab in {best_err, best_leak}:
        row = re.search(rf"<td>{re.escape(lab)}</td>.*?</tr>", html)
        # the last cell: the fronts it is on (worst over attacks: "leakage" of any_attack)
        assert row and "leakage" in row.group(0).rsplit("<td>", 1)[1], lab
    # audited lower bounds (all below the claims here) are shown as consistent
    eps_section = html.split("Claimed vs audited ε</h2>")[1].split("Assumptions behind")[0]
    assert "consistent" in eps_section and "VIOLATION" not in eps_section
    with open(work / "results.csv") as f:
        columns = {r["column"] for r in csv.DictReader(f)}
    assert "fedwad_geodesic[alice].leakage" in columns and "fedwad_geodesic.eps_lower" in columns


def test_audit_above_claim_is_flagged(sweep_dir, tmp_path):
    work = tmp_path / "violation"
    work.mkdir()
    rows = [json.loads(x) for x in (sweep_dir / "results.jsonl").read_text().splitlines()]
    r = next(x for x in rows if x["setting"]["defenses"])
    claim = r["results"]["privacy"]["alice"]["epsilon"]
    r["results"]["attacks"] = [
        {
            "attack": "mia",
            "label": "mia",
            "isolation": "process",
            "target": "alice",
            "observer": "server",
            "auc": 0.9,
            "eps_lower": claim * 2,
        }
    ]
    (work / "results.jsonl").write_text(json.dumps(r) + "\n")
    html = write_report(work).read_text()
    assert "VIOLATION: audited &gt; claimed" in html


def _eps_table(html: str) -> list[list[str]]:
    """The rows of the "Claimed vs audited ε" table, as the cells' text."""
    part = html.split("Claimed vs audited ε", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", part, re.S)
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
            for r in rows if "<td" in r]  # fmt: skip


# re-renders the shared sweep (2 s): make test-slow; test_audit_above_claim_is_flagged keeps the
# claim and audit columns in make test
@pytest.mark.slow
def test_many_parties_with_the_same_claim_share_one_row_and_column(sweep_dir, tmp_path):
    # Prepare: one run of 12 clients, the same claim for all but client_7
    rows = [json.loads(x) for x in (sweep_dir / "results.jsonl").read_text().splitlines()]
    r = next(x for x in rows if x["setting"]["defenses"])
    clients = [f"client_{i}" for i in range(12)]
    res = r["results"]
    res["parties"] = {c: res["parties"][next(iter(res["parties"]))] for c in clients}
    claim = {"delta": 1e-5, "events": 1, "accountant": "pld", "noise_multipliers": [1.0]}
    res["privacy"] = {c: {"epsilon": 2.0, **claim} for c in clients}
    res["attacks"] = []
    res["privacy_assumptions"] = [
        {"party": c, "assumption": a, "holds": True, "detail": detail}
        for i, c in enumerate(clients)
        for a, detail in (("rows >= 1", "100 rows"), ("norm <= 9", f"max norm {i}"))
    ]
    work = tmp_path / "many"
    work.mkdir()
    (work / "results.jsonl").write_text(json.dumps(r) + "\n")
    # Execute, Assert: every party alike: one row and one claimed-ε column for all of them
    html = write_report(work).read_text().replace("<wbr>", "")
    table = _eps_table(html)
    assert [row[3] for row in table] == ["all 12 parties (client_0 … client_11)"]
    assert "<th>eps_claimed[all 12 parties (client_0 … client_11)]</th>" in html
    assert "eps_claimed[client_3]" not in html  # no column, menu entry or hover line of its own
    # the assumptions: the one every party shares in one row, the one that differs per party
    assumptions = html.split("Assumptions behind the claims", 1)[1].split("</table>", 1)[0]
    assert assumptions.count("rows &gt;= 1") == 1 and assumptions.count("norm &lt;= 9") == 12
    assert "<td>all 12 parties (client_0 … client_11)</td><td>rows &gt;= 1</td>" in assumptions
    # one party differs: its own row where it sorts (client_7 after client_6, before client_10),
    # the others by name, and a column per party again
    res["privacy"]["client_7"]["epsilon"] = 5.0
    (work / "results.jsonl").write_text(json.dumps(r) + "\n")
    html = write_report(work).read_text().replace("<wbr>", "")
    table = _eps_table(html)
    others = ", ".join(c for c in clients if c != "client_7")
    assert [(row[3], row[4]) for row in table] == [
        (f"11 parties: {others}", "2"),
        ("client_7", "5"),
    ]
    assert f"<th>eps_claimed[11 parties: {others}]</th><th>eps_claimed[client_7]</th>" in html
    menu = re.findall(r'"label":\s*"(eps_claimed\[[^"]*)"', html)
    assert menu == [f"eps_claimed[11 parties: {others}]", "eps_claimed[client_7]"]


# renders the shared sweep again (3-6 s): make test-slow; the other report tests read it
@pytest.mark.slow
def test_the_tasks_own_metrics_stand_beside_the_error(sweep_dir, tmp_path):
    """A protocol's pinned task metric (FedBary: contribution Spearman against the central
    ranking, detection AUC) is in the results table next to the error, in summary.csv and in the
    sweep's printed summary; ``distance_accuracy``, only 1 - the error, is not repeated."""
    from testbed.cli.summary import sweep_rows

    # Prepare: the sweep's rows, each seed given a Spearman and an AUC of its own
    rows = [json.loads(x) for x in (sweep_dir / "results.jsonl").read_text().splitlines()]
    for i, r in enumerate(rows):
        r["results"]["utility"] = {
            "distance_accuracy": 0.9,
            "contribution_spearman": 0.5 + 0.1 * (i % 5),
            "detection_auc": 0.75,
        }
    work = tmp_path / "utility"
    work.mkdir()
    (work / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # Execute
    html = write_report(work).read_text().replace("<wbr>", "")
    header, table, _ = sweep_rows(rows)
    # Assert: the columns, right after the error, in the results table of every setting
    results = html.split("Results per protocol", 1)[1].split("</table>", 1)[0]
    heads = re.findall(r"<th>([^<]*)</th>", results)
    at = heads.index("utility.contribution_spearman")
    assert (
        heads[at - 1].startswith("relative error of") and heads[at + 1] == "utility.detection_auc"
    )
    assert "utility.distance_accuracy" not in html.split("Results per protocol", 1)[1]
    assert results.count("0.7 [") >= 4  # five seeds of 0.5 ... 0.9 in each setting: mean 0.7
    with open(work / "summary.csv") as f:
        util = [r for r in csv.DictReader(f) if r["source"] == "utility"]
    spearman = [r for r in util if r["metric"] == "contribution_spearman"]
    assert len(spearman) == 4 and all(float(r["mean"]) == pytest.approx(0.7) for r in spearman)
    assert header[3:6] == ["rel. error", "contribution_spearman", "detection_auc"]
    assert all(t[4] == "0.7" for t in table)


def _run_tiny(tmp_path, name: str, extra: str, exit_code: int = 0) -> str:
    """`testbed run` of the tiny scenario ``name`` with ``extra`` YAML into ``tmp_path/run``,
    ending with ``exit_code``; the report.html it wrote."""
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(tiny(name, extra))
    assert main(["run", str(scenario), "--out", str(tmp_path / "run"), "-q"]) == exit_code
    return (tmp_path / "run" / "report.html").read_text()


def test_single_run_report_and_cli(tmp_path, capsys):
    # `testbed run` writes the report for a single run too
    html = _run_tiny(
        tmp_path,
        "one",
        "defenses: [{name: gaussian_measure_noise, params: {clip_norm: 6.0, noise_multiplier: 2.0}}]",
    )
    _assert_self_contained(html)
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["config_hash"] in html
    with open(tmp_path / "run" / "results.csv") as f:
        assert {r["cell"] for r in csv.DictReader(f)} == {res["config_hash"]}
    # `testbed report` re-renders; a missing directory is a one-line error, exit 2
    assert main(["report", str(tmp_path / "run")]) == 0
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "run directory not found" in capsys.readouterr().err


def test_report_of_a_run_without_defense_or_attack(tmp_path):
    execute(parse_scenario(tiny("plain")), tmp_path)
    html = write_report(tmp_path).read_text()
    _assert_self_contained(html)
    assert "No attack ran in this run" in html


# the coverage study's cells: ~60 s on 2 busy cores; testbed report's runs stay in make test
@pytest.mark.slow
def test_the_coverage_cells_attack_command_runs(tmp_path, capsys):
    """The drill-down's `testbed attack` line names the attack by its plugin name and params,
    quoted for the shell (it passed the label, which --attack does not take: "unknown attack
    'my-label'")."""
    import html as html_mod
    import shlex

    html = _run_tiny(
        tmp_path,
        "l",
        "attacks: [{name: fedwad_distributional, label: my-label, params: {restarts: 2}}]",
    )
    # the drill-down's command line, up to its comment
    line = re.search(r"testbed attack [^\n<]*?(?=   #)", html).group(0)
    argv = shlex.split(html_mod.unescape(line))[1:]
    assert "my-label" not in " ".join(argv) and '"restarts":2' in " ".join(argv), argv
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "fedwad_distributional-" in out and "@server" in out


def test_a_run_whose_every_attack_failed_says_so(tmp_path, capsys):
    """Every attack over its time limit: the headline, its caption and the coverage matrix say
    the attacks failed (before: "no attack applied to this protocol", "not run")."""
    html = _run_tiny(
        tmp_path,
        "f",
        "attacks: [{name: fedwad_distributional}]\nlimits: {attack_seconds: 0.001}",
        exit_code=3,
    )
    capsys.readouterr()
    assert "no attack applied" not in html
    assert "every attack that could measure a leak failed; no leak was measured." in html
    assert "Failed: fedwad_distributional (nothing measured by them; not evidence" in html
    assert "No attack finished (1 failed, listed above)" in html
    cov = html.split("Coverage: protocol × threat</h2>")[1].split("<h2>")[0]
    recon = cov.split("<tbody>")[1].split("</td>")[0]  # the reconstruction column
    assert "failed, nothing measured (fedwad_distributional (failed in time)" in recon, recon
    assert "FAILED in time" in html


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 10)), min_size=1, max_size=25))
def test_pareto_front(points):
    front = pareto_front(points)

    def dominates(a, b):
        return a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])

    assert front
    for i in front:
        assert not any(dominates(q, points[i]) for q in points)
    for j in set(range(len(points))) - set(front):
        assert any(dominates(points[i], points[j]) for i in front)


# two renders of the sweep, 4 s on an idle core
@pytest.mark.slow
def test_rerender_keeps_plots_the_testbed_did_not_write(sweep_dir, tmp_path):
    # Prepare: a user's own file in plots/, and a stale plot an earlier render wrote
    work = tmp_path / "own_files"
    work.mkdir()
    for name in ("results.jsonl", "sweep.json", "run_info.json", "scenario.yaml"):
        (work / name).write_bytes((sweep_dir / name).read_bytes())
    write_report(work)
    (work / "plots" / "my_figure.png").write_bytes(b"mine")
    manifest = work / "plots" / ".written-by-testbed"
    manifest.write_text(manifest.read_text() + "stale_old_plot.png\n")
    (work / "plots" / "stale_old_plot.png").write_bytes(b"old")
    # Execute
    write_report(work)
    # Assert
    assert (work / "plots" / "my_figure.png").read_bytes() == b"mine"
    assert not (work / "plots" / "stale_old_plot.png").exists()
    assert "stale_old_plot.png" not in manifest.read_text()


# 4.9 s (a run with an inversion and its report): the report's figures are read by the other
# report tests and the leakage pictures by test_leak_png; make test-slow
@pytest.mark.slow
def test_pictures_of_leakage_and_coverage_matrix(tmp_path):
    # Prepare: a single run whose server inverts FedWAD's last interpolants
    sc = parse_scenario(tiny("pictured", "attacks: [{name: fedwad_distributional}]"))
    out = execute(sc, tmp_path)
    # Execute
    html = write_report(tmp_path).read_text()
    # Assert: leakage.npz holds, per attack row, the best-recovered private rows with their
    # nearest reconstruction (distances recomputable from the pair) and the PCA clouds
    from testbed.scoring.evidence import load_evidence

    ev = load_evidence(tmp_path)
    assert set(ev) == set(range(len(out.results["attacks"])))
    for row in ev.values():
        d = np.linalg.norm(row["orig"] - row["recon"], axis=1)
        np.testing.assert_allclose(d, row["dist"], rtol=1e-9)
        assert np.all(np.diff(row["dist"]) >= 0)
        assert row["cloud_private"].shape[1] == row["cloud_recon"].shape[1] == 2
    assert "image_side" not in ev[0]  # 3-D Gaussians are not images
    # the report draws them and the coverage matrix names what was not run / cannot apply
    assert 'id="plot-leak_fedwad_reconstruction_cloud"' in html
    # ... and writes the same picture as a static PNG for papers, referenced by report.md
    png = tmp_path / "plots" / "leak_fedwad_reconstruction_cloud.png"
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "(plots/leak_fedwad_reconstruction_cloud.png)" in (tmp_path / "report.md").read_text()
    cov = html.split("Coverage: protocol × threat</h2>")[1].split("<h2>")[0]
    assert "not run (would apply:" in cov and "not applicable" in cov
    # drill-down: every number of the cell and the command that reproduces it
    assert "<details>" in cov and f"testbed run {tmp_path / 'resolved.yaml'}" in cov
    assert "fedwad_distributional" in cov and "coverage_r" in cov


def test_results_csv_is_tidy_and_summary_has_the_reports_intervals(sweep_dir, sweep_report):
    from testbed.scoring.accuracy import positive_ci

    with open(sweep_dir / "results.csv") as f:
        table = list(csv.DictReader(f))
    with open(sweep_dir / "summary.csv") as f:
        summary = list(csv.DictReader(f))
    # Assert: one row per cell x number; the setting's fields are columns of their own, no JSON
    keys = [(r["cell"], r["column"]) for r in table]
    assert len(keys) == len(set(keys)) and len({r["cell"] for r in table}) == 20
    assert not any(v.lstrip("'").startswith(("{", "[")) for r in table for v in r.values())
    noisy = [r for r in table if r["setting.defenses.0.params.noise_multiplier"] == "0.1"]
    assert {r["setting.defenses.0.name"] for r in noisy} == {"gaussian_measure_noise"}
    assert {r["seed"] for r in noisy} == {"0", "1", "2", "3", "4"}
    # summary.csv: mean and 95 % interval over the seeds' values of results.csv (an error is
    # never negative: its interval is on the log scale)
    err = [r for r in noisy if r["column"] == "wasserstein.relative_error"]
    (row,) = [
        s
        for s in summary
        if s["setting"] == noisy[0]["setting"] and s["column"] == "wasserstein.relative_error"
    ]
    m, lo, hi = positive_ci([float(r["value"]) for r in err])
    assert row["n"] == "5" and 0 < lo < m < hi
    assert (float(row["mean"]), float(row["ci95_low"]), float(row["ci95_high"])) == pytest.approx(
        (m, lo, hi), rel=1e-12
    )
    # the report prints the same figure, in the one format
    assert f"{fmt(m)} [{fmt(lo)}, {fmt(hi)}]" in sweep_report.html


# two renders of the sweep, 3.4 s on an idle core
@pytest.mark.slow
def test_report_files_have_the_users_permissions(sweep_dir):
    import os
    import stat

    old = os.umask(0o022)
    try:
        write_report(sweep_dir)
        files = ["report.html", "report.md", "results.csv", "summary.csv"]
        files += [f"plots/{p.name}" for p in (sweep_dir / "plots").iterdir()]
        for name in files:
            assert stat.S_IMODE((sweep_dir / name).stat().st_mode) == 0o644, name
        os.umask(0o077)  # a private umask is respected too
        write_report(sweep_dir)
        assert stat.S_IMODE((sweep_dir / "report.html").stat().st_mode) == 0o600
    finally:
        os.umask(old)


@pytest.mark.parametrize(
    "value, text",
    [
        (0.25534, "0.255"),
        (0.08324, "0.0832"),
        (53.06, "53.1"),
        (1207.7, "1.21e+03"),
        (120770.24, "1.21e+05"),
        (12.0, "12"),
        (0.0, "0"),
        (float("inf"), "∞"),
        (float("nan"), "–"),
    ],
)
def test_one_format_three_significant_figures(value, text):
    assert fmt(value) == text


def test_percentages_capped_in_words():
    from testbed.report.fmt import pct

    assert pct(0.5306) == "53.1 %"
    assert pct(7.96) == "796 %"
    assert pct(1207.7024) == "over 1000 % (1.21e+03×)"
    assert pct(2e-15) == "exact (2e-15)"


def _agg_with_an_exact_point() -> dict:
    """Eleven FedWAD settings with errors close together, one TriangleWad setting exact (its
    error is floating-point rounding), all leaking nothing."""
    agg = {}
    for i in range(11):
        err = 0.30 + 0.001 * i
        agg[("fedwad", f"noise_multiplier={i}")] = {
            "n": 1,
            "wasserstein.relative_error": (err, err, err),
            "any_attack.leakage": (0.0, 0.0, 0.0),
        }
    agg[("triangle_wad", "base")] = {
        "n": 1,
        "wasserstein.relative_error": (2e-15, 2e-15, 2e-15),
        "any_attack.leakage": (0.0, 0.0, 0.0),
    }
    return agg


def test_exact_point_is_marked_and_does_not_stretch_the_axis():
    from testbed.report.figures import View, tradeoff_figure
    from testbed.report.static_figures import tradeoff_fig

    agg = _agg_with_an_exact_point()
    view = View("any_attack.leakage", "leakage", True, "t")
    # Execute: the interactive figure
    fig = tradeoff_figure(agg, "wasserstein.relative_error", [view])
    # Assert: the exact point is a star labelled "exact"; the axis is the others' (linear: their
    # errors span less than 50x), so the eleven FedWAD points keep their own columns
    tw = next(t for t in fig.data if t.name == "triangle_wad")
    assert list(tw.text) == ["exact"] and list(tw.marker.symbol) == ["star"]
    fw = next(t for t in fig.data if t.name == "fedwad")
    assert len(set(fw.x)) == 11 and fig.layout.xaxis.type == "linear"
    # an all-zero metric gets [0, 1], not plotly's -1..1
    assert fig.layout.yaxis.range[0] <= 0 and fig.layout.yaxis.range[1] >= 1
    assert fig.layout.yaxis.range[0] > -0.1
    # Execute: the static figure
    sfig = tradeoff_fig(agg, "wasserstein.relative_error", view)
    ax = sfig.axes[0]
    lo, hi = ax.get_xlim()
    assert lo > -0.05 and hi < 0.5  # not stretched towards 1e-15 or beyond the data
    assert ax.get_ylim()[0] > -0.1 and ax.get_ylim()[1] >= 1
    assert any("exact" in t.get_text() for t in ax.texts)


def test_wide_errors_take_a_log_axis_with_the_exact_point_at_its_floor():
    from testbed.report.figures import View, tradeoff_figure
    from testbed.report.static_figures import tradeoff_fig

    agg = _agg_with_an_exact_point()
    agg[("fedwad", "noise_multiplier=0")]["wasserstein.relative_error"] = (40.0, 40.0, 40.0)
    view = View("any_attack.leakage", "leakage", True, "t")
    fig = tradeoff_figure(agg, "wasserstein.relative_error", [view])
    assert fig.layout.xaxis.type == "log"
    tw = next(t for t in fig.data if t.name == "triangle_wad")
    fw = next(t for t in fig.data if t.name == "fedwad")
    assert 0.03 < tw.x[0] < min(fw.x)  # half a decade below the smallest inexact error
    ax = tradeoff_fig(agg, "wasserstein.relative_error", view).axes[0]
    assert ax.get_xscale() == "log" and ax.get_xlim()[0] > 1e-3


def test_one_huge_error_does_not_move_the_good_settings():
    """Errors 3.7 %, 4.6 %, 6.5 % beside one of 5890 (a noise level far too high): each point is
    drawn at its own error in both figures (a four-decade cap drew the three good ones at 59 %);
    leakages below the leakage axis' floor are triangles in both, named in the static legend."""
    from testbed.report.figures import View, tradeoff_figure
    from testbed.report.static_figures import tradeoff_fig

    errs = {"a": 0.0455, "b": 0.0374, "c": 0.0648, "d": 5890.0}
    leaks = {"a": 0.8, "b": 0.9, "c": 1e-7, "d": 0.0001}
    agg = {
        ("fedwad", k): {
            "n": 1,
            "w.relative_error": (e, e, e),
            "any_attack.leakage": (leaks[k],) * 3,
        }
        for k, e in errs.items()
    }
    view = View("any_attack.leakage", "leakage", True, "t")
    fig = tradeoff_figure(agg, "w.relative_error", [view])
    fw = next(t for t in fig.data if t.name == "fedwad")
    assert fig.layout.xaxis.type == "log"
    assert sorted(fw.x) == sorted(errs.values())
    c = list(fw.x).index(0.0648)
    assert fw.marker.symbol[c] == "triangle-down" and "below the axis floor" in fw.hovertext[c]
    ax = tradeoff_fig(agg, "w.relative_error", view).axes[0]
    xs = [x for ln in ax.lines if ln.get_marker() == "o" for x in ln.get_xdata()]
    assert all(any(abs(x - e) <= 1e-12 * e for x in xs) for e in errs.values()), xs
    floored = [h for h in ax.get_legend_handles_labels()[1] if "drawn at the axis floor" in h]
    assert floored == ["below 9e-05: drawn at the axis floor"]


def test_plotly_text_escapes_tags_but_shows_quotes():
    """Plotly reads labels as a subset of HTML and shows `&quot;` literally: a setting named
    `d"><img src=x onerror=alert(1)>` is shown with its quote, its tags escaped."""
    from testbed.report.figures import error_by_setting_figure

    name = 'd"><img src=x onerror=alert(1)>'
    agg = {("fedwad", name): {"n": 1, "e.relative_error": (0.05,) * 3}}
    fig = error_by_setting_figure(agg, "e.relative_error")
    (tick,) = fig.data[0].y
    assert tick == '#1 d"&gt;&lt;img src=x onerror=alert(1)&gt;', tick


def test_settings_keep_the_sweeps_order():
    """support_size: [1, 3, 10] is numbered and listed 1, 3, 10 (it was sorted as text: 1, 10,
    3), protocols still alphabetical."""
    from testbed.report.figures import error_by_setting_figure
    from testbed.report.model import point_id, settings_in_order

    agg = {
        (s, v): {"n": 1, "e.relative_error": (0.05,) * 3}
        for s in ("triangle_wad", "fedwad")
        for v in ("1", "3", "10")
    }
    order = settings_in_order(agg)
    assert order == [("fedwad", v) for v in ("1", "3", "10")] + [
        ("triangle_wad", v) for v in ("1", "3", "10")
    ]
    assert [point_id(agg, k) for k in order] == [1, 2, 3, 4, 5, 6]
    ticks = [y for tr in error_by_setting_figure(agg, "e.relative_error").data for y in tr.y]
    assert ticks[:3] == ["#1 1", "#2 3", "#3 10"], ticks


def test_an_error_axis_never_shows_negative_errors():
    """One setting (a single run): plotly would centre its point, showing errors from -0.5; a
    relative error is never negative, so every error axis starts at 0, static ones too."""
    from testbed.report.figures import View, error_by_setting_figure, tradeoff_figure
    from testbed.report.static_figures import error_by_setting_fig, tradeoff_fig

    agg = {("fedbary", "base"): {"n": 1, "e.relative_error": (0.05,) * 3, "a.leakage": (0.4,) * 3}}
    view = View("a.leakage", "leakage", True, "t")
    assert error_by_setting_figure(agg, "e.relative_error").layout.xaxis.rangemode == "nonnegative"
    assert tradeoff_figure(agg, "e.relative_error", [view]).layout.xaxis.rangemode == "nonnegative"
    for ax in (
        tradeoff_fig(agg, "e.relative_error", view).axes[0],
        error_by_setting_fig(agg, "e.relative_error").axes[0],
    ):
        lo, hi = ax.get_xlim()
        assert lo == 0.0 and hi > 0.05
    # a log axis (errors over more than 50x) is left as it was
    agg[("fedbary", "noisy")] = {"n": 1, "e.relative_error": (9.0,) * 3, "a.leakage": (0.1,) * 3}
    fig = error_by_setting_figure(agg, "e.relative_error")
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.rangemode == "normal"


def test_static_point_labels_do_not_overlap():
    from testbed.report.figures import View
    from testbed.report.static_figures import tradeoff_fig

    agg = _agg_with_an_exact_point()
    for i in range(11):  # the eleven settings leak differently, close together
        agg[("fedwad", f"noise_multiplier={i}")]["any_attack.leakage"] = (0.5 + 0.002 * i,) * 3
    fig = tradeoff_fig(
        agg, "wasserstein.relative_error", View("any_attack.leakage", "l", True, "t")
    )
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(r) for t in fig.axes[0].texts]
    labels = [t.get_text() for t in fig.axes[0].texts]
    # every point is numbered once (coinciding points share a label), no two labels overlap
    numbers = sorted(int(x.split()[0]) for lab in labels for x in lab.split(", "))
    assert numbers == list(range(1, 13)), labels
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), labels


def test_one_tradeoff_figure_per_family_with_a_view_per_metric_and_attack():
    from testbed.report.tradeoff import family_views

    keys = [
        "any_attack.leakage",
        "any_attack.coverage",
        "any_attack.w2_ratio",
        "measure_inversion.leakage",
        "measure_inversion.coverage",
        "measure_inversion.w2",
        "mia.auc",
    ]
    fam = family_views(keys)
    assert list(fam) == ["distributional leakage", "reconstruction", "membership"]
    assert [v.y_key for v in fam["distributional leakage"]] == [
        "any_attack.leakage",
        "measure_inversion.leakage",
        "any_attack.w2_ratio",
    ]
    assert not any(v.y_key.endswith(".w2") for vs in fam.values() for v in vs)
    w2r = fam["distributional leakage"][2]
    assert not w2r.higher_leaks and "↓" in w2r.y_label


def test_coverage_legend_reads_each_metrics_direction():
    from testbed.report.model import ReportData
    from testbed.report.threats import coverage_legend

    data = ReportData(Path("."), [], {}, {}, None, [], None)
    data.best = {("p", "reconstruction"): {"metric": "coverage"}, ("p", "attr"): {"metric": "tv"}}
    text = coverage_legend(data)
    assert "coverage ↑ (higher = more leakage)" in text
    assert "tv ↓ (lower = more leakage)" in text
    assert "coverage ↓" not in text and "tv ↑" not in text


def test_every_plotted_leakage_metric_has_a_named_family():
    # a metric in no family gets a trade-off figure of its own ("other leakage"): the scorer's
    # transform-aware and record-level metrics belong to the reconstruction figure
    from testbed.report.model import FAMILIES, LEAKAGE_METRICS, NOT_PLOTTED, family_of

    assert {
        m: family_of(m)
        for m in LEAKAGE_METRICS
        if m not in NOT_PLOTTED and family_of(m) == "other leakage"
    } == {}
    assert family_of("coverage_affine") == family_of("coverage") == "reconstruction"
    assert len({m for ms in FAMILIES.values() for m in ms}) == sum(map(len, FAMILIES.values()))


def test_the_observer_section_writes_sizes_as_the_command_line_does(sweep_dir, sweep_report):
    """Sizes in binary units (``9.5 KiB``), the same as ``testbed run`` and ``testbed
    transcript`` print, not a raw byte count (a 100-client FedBary run: 546008800 bytes)."""
    from testbed.report.fmt import fmt_bytes

    html = sweep_report.html
    part = html.split(">What the observer saw</h", 1)[1].split("<h2", 1)[0]
    row = json.loads((sweep_dir / "results.jsonl").read_text().splitlines()[0])["results"]
    ov, tr = row["observer_view"], row["transcript"]
    assert f"({fmt_bytes(ov['bytes'])} of {fmt_bytes(tr['bytes'])})" in part
    kind, n = next(iter(ov["by_kind"].items()))
    assert f"<td>{kind}</td><td>{n['messages']}</td><td>{fmt_bytes(n['bytes'])}</td>" in part
    assert f"{tr['bytes']} bytes" not in part
    assert [fmt_bytes(x) for x in (1000, 9720, 546008800, 3 * 2**30)] == [
        "1000 B",
        "9.5 KiB",
        "520.7 MiB",
        "3.0 GiB",
    ]


def test_target_epsilons_of_one_mechanism_read_as_one_curve_labelled_by_epsilon():
    """A privacy frontier (scenarios/frontier_dp.yaml): the settings of one protocol and defense
    that differ only by target_epsilon are one curve per calibration, and each DP baseline swept
    over target_epsilon (in the protocol's label) one curve, joined in the order of epsilon
    (0.5, 2, 16, not as text) with each point labelled by its epsilon; the undefended setting
    keeps the protocol's series; a data spec is named by its dataset."""
    from testbed.report.figures import View, tradeoff_figure

    data = "{dataset=digits,noise={kind=features,rate=0.1}+{kind=features,rate=0.2},parties=a+b}"
    agg = {}

    def cell(series, point, err):
        agg[(series, point)] = {
            "n": 1,
            "w.relative_error": (err, err, err),
            "any_attack.leakage": (0.1, 0.1, 0.1),
        }

    cell("fedwad", f"data={data}, defenses=none", 0.5)
    for i, e in enumerate(("16", "0.5", "2")):
        for cal in ("tight", "worst_case"):
            gmn = f"gaussian_measure_noise(calibration={cal},target_epsilon={e})"
            cell("fedwad", f"data={data}, defenses={gmn}", 1.0 + i)
        cell(f"dp_jl_ot(target_epsilon={e})", data, 3.0 + i)
    # Execute
    fig = tradeoff_figure(agg, "w.relative_error", [View("any_attack.leakage", "l", True, "t")])
    # Assert
    by_name = {t.name: t for t in fig.data if t.name != "Pareto front"}
    tight = "fedwad · digits, gaussian_measure_noise(calibration=tight)"
    worst = "fedwad · digits, gaussian_measure_noise(calibration=worst_case)"
    assert sorted(by_name) == sorted(["fedwad", tight, worst, "dp_jl_ot · digits"])
    for name in (tight, worst, "dp_jl_ot · digits"):
        tr = by_name[name]
        assert list(tr.text) == ["ε=0.5", "ε=2", "ε=16"], name
        assert "lines" in tr.mode and "text" in tr.mode
    assert list(by_name[tight].x) == [2.0, 3.0, 1.0]
    assert list(by_name["dp_jl_ot · digits"].x) == [4.0, 5.0, 3.0]
    assert by_name["fedwad"].mode == "markers" and list(by_name["fedwad"].x) == [0.5]


# ------------------------------------------------------------------ a report in a few screens
def test_the_observer_section_is_one_block_picked_in_a_selector(sweep_dir, sweep_report):
    """The settings' near-identical "what the observer saw" blocks are one drop-down with one
    block shown, not a heading and a table per setting; the Markdown keeps every setting's
    rows in one table."""
    html = sweep_report.html
    part = html.split(">What the observer saw</h", 1)[1].split("<h2", 1)[0]
    # Assert: one select, one option and one block per setting, the first alone shown
    settings = {
        json.loads(x)["label"] for x in (sweep_dir / "results.jsonl").read_text().splitlines()
    }
    assert part.count("<select") == 1 and "<h3" not in part
    assert part.count("<option") == part.count('class="sel-item"') == len(settings) >= 4
    assert part.count('class="sel-item" data-i=') - part.count(" hidden>") == 1
    md = (sweep_dir / "report.md").read_text()
    md_part = md.split("## What the observer saw", 1)[1].split("\n## ", 1)[0]
    assert md_part.count("| setting | message kind |") == 1 and "###" not in md_part


# re-renders the shared sweep (2 s): make test-slow; test_audit_above_claim_is_flagged keeps the
# claim and audit columns in make test
@pytest.mark.slow
def test_settings_without_a_claim_or_an_audit_share_one_line(sweep_dir, tmp_path):
    """Rows of "no claim, no audit" (38 of them in the demo) are one sentence naming the
    settings; parties alike in a setting share one row of the ε table."""
    # Prepare: the sweep's rows, each cell twice (alice and bob alike)
    rows = [json.loads(x) for x in (sweep_dir / "results.jsonl").read_text().splitlines()]
    work = tmp_path / "quiet"
    work.mkdir()
    (work / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # Execute
    html = write_report(work).read_text().replace("<wbr>", "")
    # Assert: no table row says "not applicable (no claim)"; the baseline is named on one line
    table = _eps_table(html)
    assert table and not any("no claim" in row[-1] for row in table)
    assert re.search(r"No claim \(ε = ∞\) and no audit, for any party, in 1 setting\(s\)", html)
    per_setting = [(row[0], row[1]) for row in table]
    assert len(per_setting) == len(set(per_setting))  # one row per setting: parties grouped


def test_a_relative_error_reads_as_a_percentage_everywhere(sweep_report):
    """The results table wrote 0.554 where the headline wrote 55.4 %: one format per quantity."""
    html = sweep_report.html
    part = html.split(">Results per protocol</h", 1)[1].split("<h2", 1)[0]
    # Assert: every error cell of the results table is a percentage with its interval
    head = re.findall(r"<th>(.*?)</th>", part.split("</thead>", 1)[0])
    col = next(i for i, h in enumerate(head) if "relative error" in h.replace("<wbr>", ""))
    body = part.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    cells = [re.findall(r"<td>(.*?)</td>", r)[col] for r in re.findall(r"<tr>(.*?)</tr>", body)]
    # (from 1000 % on in words with the factor, as the headline writes it)
    percent = r"[\d.e+]+ % \[[\d.e+]+, [\d.e+]+\]|over 1000 % \([\d.e+]+×\)"
    assert cells and all(re.fullmatch(percent, c) for c in cells), cells


def test_plot_file_names_are_safe_on_every_os(tmp_path):
    """A protocol series or setting in a figure's name (``fedwad(t=0.5,k=3)``) never reaches a
    file name: letters, digits, ``_`` and ``-`` only, two names that read alike kept apart."""
    from testbed.report.doc import Doc
    from testbed.report.files import safe_stem

    # Prepare
    doc = Doc()
    doc.static("leak_fedwad(t=0.5,k=3)_cloud", {"png": b"a"})
    doc.static("leak_fedwad(t=0.5,k=3)=cloud", {"png": b"b"})
    doc.img("x: y/z.png", b"c", "alt")
    doc.static("tradeoff_any_attack_leakage", {"png": b"d"})
    # Execute
    names = sorted(doc.files())
    # Assert
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+\.png", n) for n in names), names
    assert len(names) == 4 and "tradeoff_any_attack_leakage.png" in names  # plain names stay
    assert safe_stem("a(b)") != safe_stem("a_b") and safe_stem("ok_name-1") == "ok_name-1"


# renders the shared sweep again (3-6 s): make test-slow; the other report tests read it
@pytest.mark.slow
def test_the_report_says_what_it_renders_while_it_renders(
    sweep_dir, sweep_report, capsys, monkeypatch
):
    """It was silent for minutes after a sweep's last cell: a line per step on stderr when
    asked (testbed run and testbed report ask), nothing otherwise."""
    from testbed.report import writer

    # Execute: piped, a quick report is silent; past the threshold, a line per step; not asked
    # (the shared render, sweep_report), nothing
    write_report(sweep_dir, progress=True)
    quick = capsys.readouterr().err
    monkeypatch.setattr(writer, "PIPED_AFTER_S", 0.0)
    write_report(sweep_dir, progress=True)
    err = capsys.readouterr().err
    quiet = sweep_report.stderr
    # Assert: each step with its number and the seconds so far; the last one writes the files
    lines = err.strip().splitlines()
    assert len(lines) >= 10 and all(re.match(r"report: .+ \(\d+/\d+, \d+ s\)$", x) for x in lines)
    assert "headline" in err and "observer" in lines[-4] + lines[-3] + lines[-2]
    assert lines[-1].startswith("report: writing report.html") and quiet == ""
    assert quick == "" or all(x.startswith("report: ") for x in quick.splitlines())
