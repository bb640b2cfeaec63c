"""``testbed audit`` on a sweep audits every cell under its own setting (issue 22: the README's
first example is a sweep and must work with ``audit``), and says what it is doing while it runs."""

from __future__ import annotations

import re

import pytest

from testbed.cli.main import main
from tests.test_audit import BASE

SWEEP = BASE.replace(
    "DEFS",
    "[{name: gaussian_measure_noise, params: {clip_norm: 2.0, push_max: 0.5, "
    "noise_multiplier: 1.0}}]",
)
FLAGS = ["--party", "alice", "--canaries", "16", "--no-reconstruction"]


def _claims(out: str) -> dict[str, str]:
    """setting -> the claimed ε of its verdict line (the whole line for a single run: "")."""
    got = {}
    for line in out.splitlines():
        m = re.match(
            r"(?:(.+): )?alice: (?:holds|inconclusive|VIOLATION)(?::| —) the claim ε = (\S+) ", line
        )
        if m:
            got[m.group(1) or ""] = m.group(2)
    return got


def test_audit_of_a_sweep_audits_each_cell_as_its_own_single_run(tmp_path, capsys):
    # Prepare: the sweep, and each of its cells written out as a single-run scenario
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP + "sweep:\n  defenses[0].params.noise_multiplier: [1.0, 4.0]\n")
    single = {}
    for z in ("1.0", "4.0"):
        f = tmp_path / f"z{z}.yaml"
        f.write_text(SWEEP.replace("noise_multiplier: 1.0", f"noise_multiplier: {z}"))
        assert main(["audit", str(f), *FLAGS]) == 0
        single[z] = _claims(capsys.readouterr().out)[""]
    # Execute
    assert main(["audit", str(sweep), *FLAGS, "--out", str(tmp_path / "a")]) == 0
    io = capsys.readouterr()
    # Assert: one verdict per cell, named by its setting, with that cell's own claim
    claims = _claims(io.out)
    assert claims == {
        "noise_multiplier=1": single["1.0"],
        "noise_multiplier=4": single["4.0"],
    }, io.out
    assert single["1.0"] != single["4.0"]
    assert "privacy audit, 2 cells" in io.out
    rows = (tmp_path / "a" / "audit.csv").read_text().splitlines()
    assert rows[0].startswith("setting,") and len(rows) > 2
    # progress: off a terminal, one line per step naming the cell (never minutes of silence)
    assert "noise_multiplier=1: audit alice: one protocol run with 16 canaries" in io.err
    assert "noise_multiplier=4: audit alice: one protocol run with 16 canaries" in io.err


def test_audit_of_seeds_names_each_seed(tmp_path, capsys):
    f = tmp_path / "seeds.yaml"
    f.write_text(SWEEP.replace("seed: 0", "seeds: [0, 1]"))
    assert main(["audit", str(f), *FLAGS]) == 0
    assert set(_claims(capsys.readouterr().out)) == {"seed 0", "seed 1"}


# ~45 s on 2 busy cores; auditing a sweep's cells stays in make test
@pytest.mark.slow
def test_the_report_of_a_sweep_shows_each_cells_audit(tmp_path, capsys):
    # Prepare: the sweep's run directory, and its audit written there
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP + "sweep:\n  defenses[0].params.noise_multiplier: [1.0, 4.0]\n")
    run = tmp_path / "run"
    assert main(["run", str(sweep), "--out", str(run), "-q"]) == 0
    assert main(["audit", str(sweep), *FLAGS, "--out", str(run)]) == 0
    # Execute
    assert main(["report", str(run)]) == 0
    capsys.readouterr()
    # Assert: the audit table names each row's cell (rows of two cells are not merged unnamed)
    md = (run / "report.md").read_text()
    section = md[md.index("## Privacy audit") :]
    assert "| setting | party |" in section
    assert "| noise_multiplier=1 | alice |" in section
    assert "| noise_multiplier=4 | alice |" in section


def test_audit_into_a_signed_run_is_refused_before_it_runs(tmp_path, capsys):
    from testbed.run.manifest import keygen

    single = tmp_path / "s.yaml"
    single.write_text(SWEEP)
    key, _ = keygen(tmp_path / "key")
    run = tmp_path / "run"
    assert main(["run", str(single), "--out", str(run), "-q", "--sign", str(key)]) == 0
    capsys.readouterr()
    assert main(["audit", str(single), *FLAGS, "--out", str(run)]) == 2
    io = capsys.readouterr()
    assert "the run is signed" in io.err and "one protocol run" not in io.err
    assert not (run / "audit.json").exists()


# a sweep, an audit and a verification, 1.6 s on an idle core; the sweep's audit stays in make test
@pytest.mark.slow
def test_audit_out_into_one_cell_keeps_the_sweep_verifiable(tmp_path, capsys):
    """Auditing one cell (its resolved.yaml, --out the cell) refreshes the sweep's manifest too:
    before, the cell's new manifest made `testbed verify SWEEP` report it changed. A signed
    sweep is refused before any work (its signature would no longer cover the manifest)."""
    from testbed.run.manifest import keygen, write_manifest
    from testbed.run.rundir import finished_cells
    from testbed.run.verify import verify_run

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP + "sweep:\n  defenses[0].params.noise_multiplier: [1.0, 4.0]\n")
    run = tmp_path / "run"
    assert main(["run", str(sweep), "--out", str(run), "-q"]) == 0
    cell = finished_cells(run)[0]
    assert main(["audit", str(cell / "resolved.yaml"), *FLAGS, "--out", str(cell)]) == 0
    assert (cell / "audit.json").is_file()
    verify_run(run)  # the sweep, its cells and the new files all verify
    key, _ = keygen(tmp_path / "k")
    write_manifest(run, key)
    other = finished_cells(run)[1]
    capsys.readouterr()
    assert main(["audit", str(other / "resolved.yaml"), *FLAGS, "--out", str(other)]) == 2
    assert "a cell of the signed sweep" in capsys.readouterr().err
    assert not (other / "audit.json").exists()


# a sweep, an attack and a verification, 1.7 s on an idle core; testbed attack on a sweep stays in
# make test (test_verify_sweep_trust)
@pytest.mark.slow
def test_attack_on_one_cell_keeps_the_sweep_verifiable(tmp_path, capsys):
    """`testbed attack SWEEP/cells/<hash>` refreshes the sweep's manifest with the cell's, as
    attacking the whole sweep does: before, `testbed verify SWEEP` then said the cell's
    manifest.json had changed. A cell of a signed sweep needs --sign, as the sweep does."""
    from testbed.run.manifest import keygen, write_manifest
    from testbed.run.rundir import finished_cells
    from testbed.run.verify import verify_run

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP + "sweep:\n  defenses[0].params.noise_multiplier: [1.0, 4.0]\n")
    run = tmp_path / "run"
    assert main(["run", str(sweep), "--out", str(run), "-q"]) == 0
    cell, other = finished_cells(run)
    assert main(["attack", str(cell), "--attack", "sent_rows"]) == 0
    assert list(cell.glob("attacks-*.json"))
    verify_run(run)
    key, _ = keygen(tmp_path / "k")
    write_manifest(run, key)
    capsys.readouterr()
    assert main(["attack", str(other), "--attack", "sent_rows"]) == 2
    assert "the sweep is signed" in capsys.readouterr().err
    assert not list(other.glob("attacks-*.json"))
