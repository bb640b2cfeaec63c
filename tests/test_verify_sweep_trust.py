"""An auditor's attacks on a signed sweep and its cells (29 Nov 2026): a cell hidden under a
temporary name, a report rendered into a cell, a cell forged with its own manifest rewritten, a
manifest entry outside the run, corrupted binary files. Each test takes the attacker's steps on
a copy of one signed sweep and fails on the code before its fix."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import test_verify
from test_verify import TRIANGLE, _fails

from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.run.manifest import keygen, write_manifest
from testbed.run.results import results_digests
from testbed.run.rundir import finished_cells
from testbed.run.verify import verify_run

# test_verify's single-run fixtures (a copy of one saved run per test)
saved_run, run = test_verify.saved_run, test_verify.run


@pytest.fixture(scope="module")
def signed_sweep(tmp_path_factory):
    """A sweep of two seeds with an attack, signed: (its directory, private key, public key)."""
    tmp = tmp_path_factory.mktemp("signed_sweep")
    key, pub = keygen(tmp / "k")
    f = tmp / "sweep.yaml"
    f.write_text(TRIANGLE + "seeds: [0, 1]\n")
    out = tmp / "sweep"
    assert main(["run", str(f), "--out", str(out), "-q", "--sign", str(key)]) == 0
    return out, key, pub


@pytest.fixture
def sweep(signed_sweep, tmp_path):
    src, key, pub = signed_sweep
    d = tmp_path / "sweep"
    shutil.copytree(src, d)
    return d, key, pub


def _cells(d):
    return sorted(p for p in (d / "cells").iterdir() if not p.name.startswith("."))


def test_a_cell_hidden_under_a_temporary_name_is_no_cell(sweep, capsys):
    d, _, pub = sweep
    hidden = d / "cells" / ".c0ffee.testbed-zz99.tmp"
    shutil.copytree(_cells(d)[0], hidden)  # the manifest leaves temporary names out
    assert hidden not in finished_cells(d)
    capsys.readouterr()
    assert main(["verify", str(d), "--pubkey", str(pub), "--rerun", "-q"]) == 0
    assert "re-ran 2 scenario(s)" in capsys.readouterr().out  # not 3
    assert main(["transcript", str(d)]) == 2
    assert "a sweep of 2 cells" in capsys.readouterr().err


# ~35 s on 2 busy cores; verify's sweep tests stay in make test
@pytest.mark.slow
def test_a_report_rendered_into_a_cell_keeps_the_sweep_verifiable(sweep, capsys):
    d, _, pub = sweep
    cell = _cells(d)[0]
    assert main(["report", str(cell)]) == 0
    assert (cell / "report.html").is_file() and (cell / "plots").is_dir()
    capsys.readouterr()
    assert main(["verify", str(d), "--pubkey", str(pub)]) == 0


# signed and unsigned sweeps rendered: ~115 s on 2 busy cores; signing and verify's runs stay in
# make test (test_verify)
@pytest.mark.slow
def test_the_report_says_whether_the_run_is_signed_and_by_which_key(sweep, capsys):
    """`testbed report` showed no signature status: a forged run re-signed with another key
    rendered like any other."""
    from testbed.run.manifest import signing_key_id

    d, _, pub = sweep
    key = signing_key_id(d)
    assert key and len(key) == 16
    for target in (d, _cells(d)[0]):  # a cell names its sweep's key
        assert main(["report", str(target)]) == 0
        text = (target / "report.md").read_text()
        assert f"Signed with key {key} (manifest.sig)" in text, target
    (d / "manifest.sig").unlink()
    write_manifest(d)
    assert main(["report", str(d)]) == 0
    assert "Not signed: the run's digests show" in (d / "report.md").read_text()


def test_a_cell_is_verified_with_its_signed_sweep(sweep, capsys):
    """`verify CELL --pubkey` said the cell was not signed; the sweep's signature covers it."""
    d, _, pub = sweep
    cell = _cells(d)[0]
    capsys.readouterr()
    assert main(["verify", str(cell), "--pubkey", str(pub)]) == 0
    assert f"a cell of the sweep {d.resolve()}" in capsys.readouterr().out


def test_a_cell_forged_with_its_manifest_rewritten_is_refused(sweep, capsys):
    """The cell's own digests and manifest rewritten: checking the cell alone said ok and
    `report CELL` drew the forged numbers; the sweep's manifest, which lists the cell's, says
    otherwise."""
    d, _, pub = sweep
    cell = _cells(d)[0]
    res = json.loads((cell / "results.json").read_text())
    res["attacks"][0]["leakage"] = 0.0
    res["digests"].update(results_digests(res))
    (cell / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    write_manifest(cell)  # the cell's manifest agrees with the forged file
    caught = rf"row differs from \S*{cell.name}/results.json|{cell.name}/manifest.json: changed"
    _fails(d, caught, None)
    for cmd in (["verify", str(cell)], ["report", str(cell)]):
        capsys.readouterr()
        assert main(cmd) == 2, cmd
        err = capsys.readouterr().err
        assert re.search(caught, err) and err.count("\n") == 1, err
    assert not (cell / "report.html").exists()


def test_a_manifest_entry_outside_the_run_is_not_read(sweep, capsys):
    d, _, _ = sweep
    cell = _cells(d)[0]
    m = json.loads((cell / "manifest.json").read_text())
    m["files"]["/etc/hostname"] = next(iter(m["files"].values()))
    (cell / "manifest.json").write_text(json.dumps(m))
    (cell / "manifest.sig").unlink(missing_ok=True)
    from testbed.run.manifest import check_manifest

    with pytest.raises(Exception, match="lists '/etc/hostname', which is not an evidence file"):
        check_manifest(cell)


# ----------------------------------------------------------------------------- corrupt bytes


@pytest.mark.parametrize("name", ["payloads.npz", "leakage.npz", "envelopes.jsonl"])
def test_a_flipped_bit_anywhere_in_a_binary_file_is_one_line(run, name):
    """A one-bit flip in a zip's headers or members raised TokenError, NotImplementedError,
    struct.error, BadZipFile or zlib.error out of verify and report (exit 1, no file named)."""
    path = run / name
    if not path.is_file():
        pytest.skip(f"the fixture run wrote no {name}")
    data = path.read_bytes()
    for off in range(0, min(len(data), 2400), 23):
        b = bytearray(data)
        b[off] ^= 0x01
        path.write_bytes(bytes(b))
        with pytest.raises(TestbedError) as info:  # any other exception fails the test
            verify_run(run)
        msg = str(info.value)  # the file, or the transcript line whose payload it changed
        assert "\n" not in msg and (name in msg or "envelopes.jsonl:" in msg), (off, msg)
    path.write_bytes(data)
    verify_run(run)


def test_an_unknown_digest_name_in_the_transcript_is_one_line(run):
    path = run / "envelopes.jsonl"
    lines = path.read_text().splitlines()
    rec = json.loads(lines[0])
    rec["record"] = "blake3.w2:" + rec["record"].split(":", 1)[-1]
    path.write_text("\n".join([json.dumps(rec), *lines[1:]]) + "\n")
    with pytest.raises(TestbedError, match=r"envelopes.jsonl:1: corrupt transcript record"):
        verify_run(run)


def test_rerun_recomputes_the_rows_testbed_attack_added(run, tmp_path, capsys):
    """A signer's forged attacks file (a row's leakage lowered, its digests recomputed, the
    manifest signed again) passed `verify --pubkey --rerun`, which re-ran only the scenario; the
    report then showed the forged row."""
    from testbed.run.verify import attack_file_digests

    key, pub = keygen(tmp_path / "signer")
    write_manifest(run, key)
    assert main(["attack", str(run), "--observer", "eavesdropper", "--sign", str(key)]) == 0
    capsys.readouterr()
    assert main(["verify", str(run), "--pubkey", str(pub), "--rerun", "-q"]) == 0
    assert "re-ran the attacks of 1 attacks file(s)" in capsys.readouterr().out
    (f,) = run.glob("attacks-*.json")
    doc = json.loads(f.read_text())
    results = json.loads((run / "results.json").read_text())
    row = next(r for r in doc["rows"] if "leakage" in r)
    row["leakage"] = row["leakage"] / 2 + 0.001
    doc["digests"] = attack_file_digests(results, doc["rows"])
    f.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    write_manifest(run, key)
    verify_run(run, pubkey=pub)  # every digest agrees: only recomputing tells
    assert main(["verify", str(run), "--pubkey", str(pub), "--rerun", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{f.name}: row " in err and "differs from a fresh run of its attacks" in err, err
    assert err.count("\n") == 1


def test_ctrl_c_in_testbed_attack_on_a_sweep_keeps_it_verifiable(sweep, monkeypatch, capsys):
    """An interrupt after the first cell's rows: that cell's new file and manifest were left
    unlisted in the sweep's manifest, and the sweep failed verify for good (report and attack
    --sign refused it too)."""
    import testbed.run.rerun as rerun

    d, key, pub = sweep
    real, calls = rerun.attack_saved_run, []

    def interrupted_second(*args, **kw):
        calls.append(args[0])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(rerun, "attack_saved_run", interrupted_second)
    with pytest.raises(KeyboardInterrupt):
        rerun.attack_run_or_sweep(d, None, "eavesdropper", None, key)
    monkeypatch.undo()
    assert len(list(calls[0].glob("attacks-*.json"))) == 1
    verify_run(d, pubkey=pub)
    capsys.readouterr()
    assert main(["attack", str(d), "--observer", "eavesdropper", "--sign", str(key)]) == 0
    verify_run(d, pubkey=pub)
