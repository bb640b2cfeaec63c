"""Trust defects an auditor found in run directories: files a reader uses that escape the
manifest, re-signing a tampered run, keys checked late, another scenario's run taken as --out,
symlinks. Each test takes the attacker's steps and expects one line naming the file (exit 2)."""

from __future__ import annotations

import json

import pytest
import test_verify
from test_verify import TRIANGLE, _fails

from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.run.manifest import keygen, write_manifest
from testbed.run.verify import attack_file_digests, verify_run

# the same run fixtures as test_verify's (a copy of one saved run per test), shared
saved_run, run = test_verify.saved_run, test_verify.run


def _forge_attacks_file(d, name: str):
    """Rows the attacker made up, with the unkeyed digests recomputed and the run's own
    transcript/results digests copied: a file testbed attack could have written."""
    results = json.loads((d / "results.json").read_text())
    rows = [{"attack": "forged", "label": "forged", "leakage": 0.0, "source": name}]
    doc = {"rows": rows, "digests": attack_file_digests(results, rows)}
    (d / name).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize("name", ["attacks-testbed-forged.json", "attacks-forged.json"])
def test_a_forged_attacks_file_with_a_temp_like_name_is_refused(run, tmp_path, capsys, name):
    key, pub = keygen(tmp_path / "k")
    write_manifest(run, key)  # a signed run
    _forge_attacks_file(run, name)
    _fails(run, rf"{name}: not a file testbed attack writes", capsys, pubkey=pub)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert name in err and err.count("\n") == 1
    assert not (run / "report.html").exists()


def test_a_file_named_like_a_temp_file_but_not_one_is_listed(run, tmp_path):
    key, pub = keygen(tmp_path / "k")
    write_manifest(run, key)
    (run / "notes-testbed-x.json").write_text("{}")
    _fails(run, r"notes-testbed-x.json: not listed in manifest.json", pubkey=pub)
    (run / "notes-testbed-x.json").unlink()
    (run / ".results.json.testbed-ab12_x9.tmp").write_text("half-written")  # a real temp name
    verify_run(run, pubkey=pub)


def _attack_ready(run, tmp_path):
    """The signed run of an honest signer (`testbed run --sign`), and the signer's key."""
    key, pub = keygen(tmp_path / "signer")
    write_manifest(run, key)
    return key, pub


def _attack_sign_refused(run, key, capsys, said: str) -> None:
    """`testbed attack RUN --sign KEY` ends with one line saying ``said`` (exit 2) and writes no
    attacks file."""
    capsys.readouterr()
    assert main(["attack", str(run), "--sign", str(key)]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
    assert not list(run.glob("attacks-*.json"))


def test_attack_sign_does_not_re_sign_a_tampered_run(run, tmp_path, capsys):
    key, pub = _attack_ready(run, tmp_path)
    (run / "notes.txt").write_text("added after signing")  # tampering the signer never saw
    _attack_sign_refused(run, key, capsys, "notes.txt: not listed in manifest.json")
    _fails(run, r"notes.txt: not listed", pubkey=pub)  # still detected: not signed over


def test_attack_sign_refuses_a_rewritten_manifest(run, tmp_path, capsys):
    key, pub = _attack_ready(run, tmp_path)
    sig = (run / "manifest.sig").read_bytes()
    (run / "notes.txt").write_text("added, and the unsigned manifest rewritten")
    write_manifest(run)
    (run / "manifest.sig").write_bytes(sig)  # the old signature left in place
    _attack_sign_refused(run, key, capsys, "the signature does not match")


def test_attack_sign_with_another_key_is_refused(run, tmp_path, capsys):
    _attack_ready(run, tmp_path)
    other, _ = keygen(tmp_path / "other")
    _attack_sign_refused(run, other, capsys, "manifest.sig: signed by another key than")


def test_audit_out_does_not_re_list_a_tampered_run(run, tmp_path, capsys):
    env = run / "envelopes.jsonl"
    env.write_text(env.read_text().replace('"round"', '"round" ', 1))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(TRIANGLE)
    capsys.readouterr()
    assert main(["audit", str(scenario), "--out", str(run), "--trials", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (run / "audit.csv").exists()
    with pytest.raises(TestbedError):
        verify_run(run)  # the tampering is still visible


def test_verify_without_pubkey_says_the_signature_was_not_checked(run, tmp_path, capsys):
    _, pub = _attack_ready(run, tmp_path)
    capsys.readouterr()
    assert main(["verify", str(run)]) == 0
    out = capsys.readouterr().out
    assert "the run is signed" in out and "--pubkey KEY.pub" in out
    (run / "manifest.sig").write_text("garbage")
    assert main(["verify", str(run)]) == 2
    assert "manifest.sig: not a signature file" in capsys.readouterr().err


def test_attack_with_a_bad_key_fails_before_writing(run, tmp_path, capsys):
    key, pub = _attack_ready(run, tmp_path)
    # the .pub given as the key
    _attack_sign_refused(run, pub, capsys, "not a readable unencrypted private key")
    verify_run(run, pubkey=pub)  # the run is untouched


def test_audit_out_refuses_a_run_of_another_scenario(run, tmp_path, capsys):
    other = tmp_path / "other.yaml"
    other.write_text(TRIANGLE.replace("verify_triangle", "another_scenario"))
    before = (run / "manifest.json").read_bytes()
    capsys.readouterr()
    assert main(["audit", str(other), "--out", str(run), "--trials", "4"]) == 2
    err = capsys.readouterr().err
    assert "a run of another scenario" in err and err.count("\n") == 1
    assert not (run / "audit.csv").exists() and (run / "manifest.json").read_bytes() == before


def test_report_does_not_write_through_a_symlinked_plots(run, tmp_path, capsys):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (run / "plots").symlink_to(target)
    capsys.readouterr()
    from testbed.report.writer import write_report

    with pytest.raises(TestbedError, match=r"plots: a symlink"):
        write_report(run)
    assert not list(target.iterdir())  # nothing written into the link's target
    assert main(["report", str(run)]) == 2
    assert "plots: a symlink" in capsys.readouterr().err
    assert not list(target.iterdir())


def test_an_added_symlinked_directory_is_flagged_by_verify(run, tmp_path):
    key, pub = keygen(tmp_path / "k")
    write_manifest(run, key)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "attacks-0badc0de.json").write_text("{}")
    (run / "extra").symlink_to(outside)
    _fails(run, r"extra: a symlink, not listed in manifest.json", pubkey=pub)


@pytest.mark.parametrize(
    "name, data, pattern",
    [
        ("resolved.yaml", b"name: \xff\xfe\n", r"resolved.yaml: not readable text"),
        ("config_hash", b"\xff\xfe\n", r"config_hash: not readable text"),
    ],
)
def test_bad_bytes_in_a_run_file_are_one_line_naming_it(run, capsys, name, data, pattern):
    (run / name).write_bytes(data)
    _fails(run, pattern, capsys)


def test_digests_attacks_not_a_list_is_one_line(run, capsys):
    res = json.loads((run / "results.json").read_text())
    res["digests"]["attacks"] = 5
    (run / "results.json").write_text(json.dumps(res))
    _fails(run, r"results.json: digests.attacks is not a list", capsys)


@pytest.mark.parametrize(
    "data, pattern",
    [(b"5\n", r"results.jsonl:1: not a results row"), (b"\xff\n", r"results.jsonl: not readable")],
)
def test_a_bad_sweep_results_jsonl_is_one_line(tmp_path, capsys, data, pattern):
    d = tmp_path / "sweep"
    d.mkdir()
    (d / "results.jsonl").write_bytes(data)
    _fails(d, pattern, capsys)


@pytest.mark.parametrize(
    "keyfile, pattern", [("", "not a key file name"), ("/proc/k.pem", "cannot write the key pair")]
)
def test_keygen_bad_path_is_one_line(capsys, keyfile, pattern):
    assert main(["keygen", keyfile]) == 2
    err = capsys.readouterr().err
    assert pattern in err and err.count("\n") == 1
