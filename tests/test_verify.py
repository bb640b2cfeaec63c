"""`testbed verify RUN`: every digest of a run directory re-checked in one pass; each tampering
case of issue 21 (meta edited, payload bytes changed, results.json estimates or attack rows
edited, a file missing or added, every digest rewritten) fails with one line naming the file."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from _scenarios import gaussians

from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.exchange.payload import canonical_digest
from testbed.run.execute import execute
from testbed.run.manifest import write_manifest
from testbed.run.results import results_digests
from testbed.run.verify import verify_run
from testbed.scenario.loading import parse_scenario

TRIANGLE = gaussians(
    "verify_triangle",
    "attacks:\n  - {name: measure_inversion}",
    d=2,
    components=((30, 0.0), (20, 3.0)),
    protocol="triangle_wad",
    params="{support_size: 4, t: 0.5}",
    transform=None,
)


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify") / "run"
    execute(parse_scenario(TRIANGLE, "t.yaml", "."), out)
    return out


@pytest.fixture
def run(saved_run, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(saved_run, d)
    return d


def _fails(d, pattern: str, capsys=None, **kw) -> str:
    with pytest.raises(TestbedError, match=pattern) as info:
        verify_run(d, **kw)
    msg = str(info.value)
    assert "\n" not in msg
    if capsys is not None:  # the command: exit 2, one line on stderr, no traceback
        capsys.readouterr()
        args = ["verify", str(d)] + (["--pubkey", str(kw["pubkey"])] if "pubkey" in kw else [])
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    return msg


def _edit_lines(path, fn):
    lines = path.read_text().splitlines()
    path.write_text("\n".join(fn(i, json.loads(x)) for i, x in enumerate(lines)) + "\n")


def test_a_fresh_run_verifies(run, capsys):
    checked = verify_run(run)
    text = "\n".join(checked)
    assert "results.json" in text and "transcript:" in text and "manifest.json" in text
    assert main(["verify", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{run}: ok")


def test_meta_added_to_every_record_is_refused(run, capsys):
    """Issue 21, break 10: `t: 0.999` in each record's meta turned measure_inversion's leakage
    from 1 to 0 and kept the transcript digest."""
    _edit_lines(
        run / "envelopes.jsonl",
        lambda i, r: json.dumps({**r, "meta": {**r["meta"], "t": 0.999}}, sort_keys=True),
    )
    _fails(run, r"envelopes.jsonl:1: record digest mismatch for message #0", capsys)
    assert main(["attack", str(run)]) == 2  # on main 477c734 it attacked the edited messages
    assert "record digest mismatch" in capsys.readouterr().err


def test_meta_edit_with_its_record_digest_rewritten_is_refused(run, capsys):
    from testbed.exchange.envelope import envelope_record

    def edit(i, r):
        r["meta"] = {**r["meta"], "t": 0.999}
        rec = envelope_record(
            r["seq"],
            r["round"],
            r["sender"],
            r["receiver"],
            r["kind"],
            r["nbytes"],
            r["digest"],
            r["meta"],
        )
        r["record"] = canonical_digest(rec)
        return json.dumps(r, sort_keys=True)

    _edit_lines(run / "envelopes.jsonl", edit)
    _fails(run, r"envelopes.jsonl/payloads.npz do not belong to this run", capsys)


def test_changed_payload_bytes_are_refused(run, capsys):
    with np.load(run / "payloads.npz") as z:
        arrays = {k: z[k].copy() for k in z.files}
    key = sorted(k for k in arrays if arrays[k].dtype.kind == "f")[0]
    arrays[key].reshape(-1)[0] += 1000.0
    np.savez(run / "payloads.npz", **arrays)
    _fails(run, r"envelopes.jsonl:\d+: payload digest mismatch for message #\d+", capsys)


def test_edited_estimates_are_refused(run, capsys):
    res = json.loads((run / "results.json").read_text())
    k = next(iter(res["estimates"]))
    res["estimates"][k] = 0.0 if not isinstance(res["estimates"][k], list) else []
    (run / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True))
    _fails(run, r"results.json: estimates changed", capsys)


def test_edited_attack_row_is_refused(run, capsys):
    res = json.loads((run / "results.json").read_text())
    assert res["attacks"], "the scenario must produce attack rows"
    res["attacks"][0]["leakage"] = 0.0
    (run / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True))
    _fails(run, r"results.json: attack row 0 \(.*\) changed", capsys)


def test_edited_other_field_is_refused(run):
    res = json.loads((run / "results.json").read_text())
    res["privacy_epsilon"] = 1.0
    (run / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True))
    _fails(run, r"results.json: changed since the run wrote it")


@pytest.mark.parametrize(
    "name",
    [
        "results.json",
        "resolved.yaml",
        "config_hash",
        "manifest.json",
        "envelopes.jsonl",
        "payloads.npz",
    ],
)
def test_a_missing_file_is_refused(run, name, capsys):
    (run / name).unlink()
    _fails(run, rf"{name}(: | not found|: transcript file not found)", capsys)


def test_an_added_file_is_refused(run):
    (run / "attacks-deadbeef.json").write_text(json.dumps({"rows": []}))
    _fails(run, r"attacks-deadbeef.json: no digests")
    (run / "attacks-deadbeef.json").unlink()
    (run / "notes.txt").write_text("x")
    _fails(run, r"notes.txt: not listed in manifest.json")


def test_an_edited_resolved_yaml_is_refused(run):
    p = run / "resolved.yaml"
    p.write_text(p.read_text().replace("seed: 7", "seed: 8"))
    _fails(run, r"resolved.yaml: does not match config_hash \(edited since the run, or made by ")


def test_a_plugin_whose_params_changed_since_the_run_is_named(run, monkeypatch):
    """A plugin that gained a defaulted parameter after the run resolves the saved scenario to
    another one: the message names the new parameter, not an edit of the file."""
    from pydantic import create_model

    from testbed.registry import PROTOCOLS

    cls = PROTOCOLS.get("triangle_wad")
    grown = create_model("Grown", __base__=cls.Config, mistake=(str, "none"))
    monkeypatch.setattr(cls, "Config", grown)
    _fails(
        run,
        r"resolved.yaml: does not match config_hash \(resolving it with the plugins installed "
        r"now changes protocol.params.mistake \(new, 'none'\): a plugin's parameters",
    )


def _rewrite_every_digest(d):
    """An adversary who edits an attack row and then recomputes every unsigned digest."""
    res = json.loads((d / "results.json").read_text())
    res["attacks"][0]["leakage"] = 0.0
    res["digests"].update(results_digests(res))
    (d / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    write_manifest(d)


def test_rewritten_digests_pass_unsigned_but_fail_the_signature(run, tmp_path, capsys):
    from testbed.run.manifest import keygen

    key, pub = keygen(tmp_path / "keys" / "signer")
    write_manifest(run, key)  # what `testbed run --sign` does
    assert any("Ed25519" in c for c in verify_run(run, pubkey=pub))
    sig = (run / "manifest.sig").read_bytes()
    _rewrite_every_digest(run)
    verify_run(run)  # unsigned digests cannot show this (docs/reference/trust.md says so)
    (run / "manifest.sig").write_bytes(sig)  # the adversary cannot sign: the old signature
    _fails(run, r"manifest.json: the signature does not match", capsys, pubkey=pub)


def test_signature_by_another_key_or_no_signature_is_refused(run, tmp_path):
    from testbed.run.manifest import keygen

    key, _ = keygen(tmp_path / "k1")
    _, other = keygen(tmp_path / "k2")
    _fails(run, r"manifest.sig: missing", pubkey=other)
    write_manifest(run, key)
    _fails(run, r"manifest.sig: signed by another key", pubkey=other)


def test_a_changed_file_under_a_signed_manifest_is_refused(run, tmp_path):
    from testbed.run.manifest import keygen

    key, pub = keygen(tmp_path / "k")
    write_manifest(run, key)
    p = run / "run_info.json"  # no digest of its own: only the manifest covers it
    p.write_text(p.read_text().replace("seconds", "secondz"))
    _fails(run, r"run_info.json: changed since the run wrote it", pubkey=pub)


def test_keygen_writes_both_keys_or_neither(tmp_path, capsys):
    """KEYFILE.pub a dangling symlink (exists() says no; the write fails): the private key
    written first is removed, the symlink is untouched. Root or not."""
    key = tmp_path / "signer"
    pub = tmp_path / "signer.pub"
    pub.symlink_to(tmp_path / "no" / "such" / "dir")
    assert main(["keygen", str(key)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {key}.pub: exists; choose another key file name\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["signer.pub"] and pub.is_symlink()
    pub.unlink()
    assert main(["keygen", str(key)]) == 0 and key.is_file() and pub.is_file()


def test_keygen_refuses_a_name_whose_pub_is_too_long_in_one_line(tmp_path, capsys):
    key = tmp_path / ("k" * (255 - len(".pub") + 1))  # KEYFILE fits a file name, KEYFILE.pub not
    assert main(["keygen", str(key)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {key}: cannot write the key pair (") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


# slow (6 s: keygen, a signed TriangleWad run, verify): make test keeps signing and verifying in
# test_rewritten_digests_pass_unsigned_but_fail_the_signature and the tests after it
@pytest.mark.slow
def test_keygen_command_and_signed_run(tmp_path, capsys):
    key = tmp_path / "signer"
    assert main(["keygen", str(key)]) == 0
    assert (key.stat().st_mode & 0o777) == 0o600
    assert main(["keygen", str(key)]) == 2  # never overwritten
    f = tmp_path / "s.yaml"
    f.write_text(TRIANGLE)
    assert main(["run", str(f), "--out", str(tmp_path / "run"), "-q", "--sign", str(key)]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "run"), "--pubkey", f"{key}.pub"]) == 0
    assert "Ed25519 signature" in capsys.readouterr().out
    # testbed attack on a signed run: refused without the key, signs again with it
    assert main(["attack", str(tmp_path / "run")]) == 2
    assert "the run is signed" in capsys.readouterr().err
    assert main(["attack", str(tmp_path / "run"), "--sign", str(key)]) == 0
    assert main(["verify", str(tmp_path / "run"), "--pubkey", f"{key}.pub"]) == 0


def test_report_and_attack_refuse_a_run_that_does_not_verify(run, capsys):
    res = json.loads((run / "results.json").read_text())
    res["attacks"][0]["leakage"] = 0.0
    (run / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True))
    capsys.readouterr()
    for cmd in ("report", "attack"):
        assert main([cmd, str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "attack row 0" in err
    assert not (run / "report.html").exists()
    assert not list(run.glob("attacks-*.json"))


def test_attack_rows_file_is_verified(run, capsys):
    assert main(["attack", str(run), "--observer", "eavesdropper"]) == 0
    verify_run(run)
    f = next(run.glob("attacks-*.json"))
    doc = json.loads(f.read_text())
    doc["rows"][0]["leakage"] = 0.0
    f.write_text(json.dumps(doc, indent=2, sort_keys=True))
    _fails(run, rf"{f.name}: row 0 changed")


def test_rerun_compares_results_byte_for_byte(run, capsys):
    assert main(["verify", str(run), "--rerun", "-q"]) == 0
    assert "identical byte for byte" in capsys.readouterr().out
    _rewrite_every_digest(run)  # consistent digests, but not what the scenario computes
    assert main(["verify", str(run), "--rerun", "-q"]) == 2
    assert "differs from a fresh run" in capsys.readouterr().err


def test_the_runs_limits_and_engine_are_kept_for_its_reruns(tmp_path, capsys):
    """resolved.yaml keeps how the run was done (limits with the command line's overrides, the
    engine, save_transcript) outside the hash: `verify --rerun` and `testbed attack` run under
    the run's own limits. Before, `limits: {attack_sandbox: false}` recorded isolation
    'process' and its re-run (sandboxed) 'landlock': a false 'differs from a fresh run'."""
    import yaml

    from testbed.scenario.limits import set_cli_overrides
    from testbed.scenario.resolve import config_hash, resolve

    text = TRIANGLE + "limits: {attack_sandbox: false}\noutput: {save_transcript: true}\n"
    sc = parse_scenario(text, "t.yaml", ".")
    assert config_hash(resolve(sc)) == config_hash(resolve(parse_scenario(TRIANGLE, "t.yaml")))
    out = execute(sc, tmp_path / "run").out_dir
    kept = yaml.safe_load((out / "resolved.yaml").read_text())
    assert kept["limits"] == {"attack_sandbox": False}
    assert kept["output"] == {"save_transcript": True} and "engine" not in kept
    assert main(["verify", str(out), "--rerun", "-q"]) == 0
    assert "identical byte for byte" in capsys.readouterr().out
    assert main(["attack", str(out)]) == 0
    (rows,) = [f for f in out.iterdir() if f.name.startswith("attacks-")]
    assert {r["isolation"] for r in json.loads(rows.read_text())["rows"]} == {"process"}
    set_cli_overrides(allow_large=True)  # the command line's override is the run's limit too
    try:
        assert resolve(sc)["limits"] == {"attack_sandbox": False, "allow_large": True}
    finally:
        set_cli_overrides()
    ray = parse_scenario(TRIANGLE + "engine: ray\nengine_params: {actors: 2}\n", "t.yaml")
    assert resolve(ray)["engine_params"] == {"actors": 2}


def test_a_spilled_run_verifies_and_its_edits_are_refused(tmp_path, monkeypatch):
    import testbed.exchange.transcript as trmod

    monkeypatch.setattr(trmod, "DEFAULT_SPILL_THRESHOLD", 0)  # every envelope spills
    text = TRIANGLE + "output: {save_transcript: false}\n"
    out = execute(parse_scenario(text, "t.yaml", "."), tmp_path / "run").out_dir
    assert (out / "envelopes.spill").exists() and not (out / "envelopes.jsonl").exists()
    assert any("spill files" in c for c in verify_run(out))
    # an edited header (meta), its keyed hash left as it was: the records' digest differs
    path = out / "envelopes.spill"
    raw = path.read_bytes()
    i = raw.index(b'"meta":{}')
    path.write_bytes(raw[:i] + b'"meta":{"t":1}' + raw[i + len(b'"meta":{}') :])
    idx = out / "envelopes.spill.idx"
    ent = np.frombuffer(idx.read_bytes(), dtype="<i8").reshape(-1, 2).copy()
    k = int(np.searchsorted(ent[:, 0], i, side="right") - 1)
    ent[k, 1] += len(b'"meta":{"t":1}') - len(b'"meta":{}')
    ent[k + 1 :, 0] += len(b'"meta":{"t":1}') - len(b'"meta":{}')
    idx.write_bytes(ent.tobytes())
    write_manifest(out)  # even with the manifest rewritten
    _fails(out, r"envelopes.spill: spilled envelopes differ from the run's digest")


# a sweep, an attack and three verifications, 5 s on an idle core; sweeps are verified in make test
# by test_verify_sweep_trust and test_audit_sweep
@pytest.mark.slow
def test_a_sweep_verifies_cell_by_cell(tmp_path, capsys):
    """What the demo writes (a sweep): every cell, results.jsonl against the cells, the
    sweep's manifest; an edit anywhere is named."""
    f = tmp_path / "sweep.yaml"
    f.write_text(TRIANGLE + "seeds: [0, 1]\n")
    out = tmp_path / "sweep"
    assert main(["run", str(f), "--out", str(out), "-q"]) == 0
    assert main(["verify", str(out)]) == 0
    assert main(["attack", str(out), "--observer", "eavesdropper"]) == 0
    assert main(["verify", str(out)]) == 0
    capsys.readouterr()
    cell = sorted((out / "cells").iterdir())[0]
    res = json.loads((cell / "results.json").read_text())
    res["attacks"][0]["leakage"] = 0.0
    (cell / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True))
    _fails(out, rf"{cell.name}/results.json: attack row 0", capsys)
    assert main(["report", str(out)]) == 2


def test_a_sweep_row_edited_in_results_jsonl_is_refused(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text(
        TRIANGLE.replace("attacks:\n  - {name: measure_inversion}\n", "") + "seeds: [0, 1]\n"
    )
    out = tmp_path / "sweep"
    assert main(["run", str(f), "--out", str(out), "-q"]) == 0
    p = out / "results.jsonl"
    lines = p.read_text().splitlines()
    row = json.loads(lines[1])
    row["results"]["privacy_epsilon"] = 1.0
    lines[1] = json.dumps(row, sort_keys=True)
    p.write_text("\n".join(lines) + "\n")
    _fails(out, r"results.jsonl:2: row differs from .*results.json")


def test_an_edited_or_missing_leakage_npz_is_refused(run):
    p = run / "leakage.npz"
    assert p.is_file(), "measure_inversion draws its picture from leakage.npz"
    with np.load(p) as z:
        arrays = {k: z[k].copy() for k in z.files}
    k = next(k for k in sorted(arrays) if arrays[k].dtype.kind == "f")
    arrays[k] = arrays[k] + 1.0
    np.savez_compressed(p, **arrays)
    _fails(run, r"leakage.npz: changed since the run wrote it")
    p.unlink()
    _fails(run, r"leakage.npz: missing")
