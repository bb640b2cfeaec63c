"""The report's "Privacy audit" section: audited ε per observer and round beside the claimed ε,
and the reconstruction bound beside each reconstruction attack, from ``testbed audit --out``'s
audit.json; rendered in markdown and, when chromium is installed, drawn in a real browser."""

from __future__ import annotations

import pytest
from test_audit_one_run import BASE
from test_report_browser import _js, _open, browser  # noqa: F401  (browser: a fixture)

from testbed.cli.audit import write_audit_rows
from testbed.report.writer import write_report
from testbed.run import execute
from testbed.run.audit_one_run import one_run_audit
from testbed.run.audit_recon import reconstruction_checks
from testbed.scenario.loading import parse_scenario

DEFS = (
    "[{name: gaussian_measure_noise, params: {clip_norm: 4.0, push_max: 0.5, "
    "noise_multiplier: 0.01}}]\nattacks: [{name: fedwad_distributional}]\n"
)


@pytest.fixture(scope="module")
def audited_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("audited_run")
    sc = parse_scenario(BASE.replace("DEFS", DEFS), "audited.yaml", ".")
    run = execute(sc, out)
    rows = [
        {"method": "one-run", **r.row()}
        for r in one_run_audit(run.world, "alice", canaries=32, per_round=True)
    ]
    recon = reconstruction_checks(run.rows, run.exchange.ledger, run.world.parties)
    assert recon, "the defended run has a reconstruction attack under a mu-GDP claim"
    write_audit_rows(rows + [{"reconstruction": True, **c} for c in recon], out)
    return write_report(out)


# an audited run (6 s): the report's audit rows stay in make test (test_report's
# test_audit_above_claim_is_flagged, test_vocabulary's claimed-vs-audited); make test-slow
@pytest.mark.slow
def test_audit_section_renders_both_figures(audited_run):
    md = (audited_run.parent / "report.md").read_text()
    assert "## Privacy audit" in md
    assert "audit_eps_0.png" in md and "audit_reconstruction.png" in md
    assert (audited_run.parent / "plots" / "audit_eps_0.png").stat().st_size > 1000
    for obs in ("server", "bob", "eavesdropper"):
        assert f"| {obs} |" in md.replace("  ", " ")


# chromium, 3 s on an idle core; the section's figures and table stay in make test
# (test_audit_section_renders_both_figures), test_report_browser draws a report in make test
@pytest.mark.slow
def test_audit_figures_draw_in_a_browser(browser, audited_run):  # noqa: F811
    seen = _open(browser, audited_run)
    assert not seen["errors"], seen["errors"]
    titles = _js(
        browser,
        "Array.from(document.querySelectorAll('.plotly-graph-div .gtitle')).map(t => t.textContent)",
    )
    assert any("per observer and round" in t for t in titles), titles
    assert any("reconstruction" in t for t in titles), titles
    drawn = _js(
        browser,
        "Array.from(document.querySelectorAll('.plotly-graph-div')).map(d => "
        "d.querySelectorAll('.cartesianlayer .point, .cartesianlayer path.js-line, "
        ".cartesianlayer .bars path').length)",
    )
    assert drawn and all(n >= 1 for n in drawn), drawn
