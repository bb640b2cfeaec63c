"""``testbed verify RUN``: re-check every digest of a run directory in one pass.

What is checked, in this order (the first mismatch ends the check with one line naming the file
and what differs):

1. the files a run writes are there (``results.json``, ``resolved.yaml``, ``config_hash``,
   ``manifest.json``; the transcript files when the scenario saved its transcript);
2. ``results.json`` against the ``digests`` it recorded: the estimates, each attack row, then
   the rest of the row;
3. ``config_hash`` against ``resolved.yaml`` (hashed again) and ``results.json``;
4. ``leakage.npz`` against its recorded digest;
5. the transcript: ``envelopes.jsonl`` + ``payloads.npz`` (each payload and each record
   re-hashed, meta included) against the transcript digest, and the spill files of a run that
   spilled against the digest of the spilled part;
6. each ``attacks-<8 hex>.json`` that ``testbed attack`` added: its rows against their digests,
   and that it was computed on this run's transcript and results (any other ``attacks-*`` entry
   is refused: the testbed never writes one);
7. ``manifest.json``: every evidence file against its digest, no file unlisted; with
   ``pubkey`` first its Ed25519 signature (:mod:`testbed.run.manifest`).

A sweep directory is checked cell by cell, plus ``results.jsonl`` against the cells and its own
manifest. ``rerun=True`` (``--rerun``) also runs each scenario again into a temporary directory
and compares ``results.json`` byte for byte. Nothing is unpickled: JSON, ``.npz`` read with
``allow_pickle=False`` and the spill files' JSON headers.
"""

from __future__ import annotations

import json
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from testbed.errors import TestbedError
from testbed.exchange.payload import canonical_digest
from testbed.exchange.spill import HEADER_NAME, SPILL_NAME
from testbed.exchange.transcript import Transcript, read_spilled, records_digest
from testbed.run.journal import interrupted_line, read_journal
from testbed.run.manifest import MANIFEST_NAME, SIGNATURE_NAME, check_manifest, sweep_of
from testbed.run.results import RESULTS_DIGESTS, evidence_digest, json_form, results_digests
from testbed.run.rundir import attack_files, is_sweep, run_dir_lock
from testbed.scenario.loading import parse_scenario
from testbed.scenario.resolve import UNHASHED, ResolvedScenario

__all__ = [
    "ATTACKS_DIGESTS",
    "attack_file_digests",
    "load_json",
    "verified_for_reading",
    "verify_in_sweep",
    "verify_pending",
    "verify_run",
]

#: the format of the ``digests`` section of an ``attacks-*.json`` file
ATTACKS_DIGESTS = "testbed-attacks/1"
_RUN_FILES = ("results.json", "resolved.yaml", "config_hash", MANIFEST_NAME)


def verify_run(run_dir: str | Path, pubkey: str | Path | None = None) -> list[str]:
    """Check every digest of a run (or sweep) directory; returns what was checked, one line
    each. The first mismatch is a :class:`TestbedError` of one line. The caller holds the
    directory's lock (shared) for the whole check."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise TestbedError(f"{run_dir}: run directory not found")
    pending = read_journal(run_dir)
    if pending is None:
        return _verify(run_dir, pubkey)
    try:
        return _verify(run_dir, pubkey)  # killed after its last manifest: only the journal left
    except TestbedError:
        pass
    verify_pending(run_dir, pending, pubkey)  # a change outside what it announced: tampering
    raise TestbedError(interrupted_line(run_dir, pending))


def verify_pending(run_dir: Path, pending: dict[str, str], pubkey=None) -> list[str]:
    """:func:`verify_run` of a directory that an interrupted ``testbed attack`` left, whose
    journal announced ``pending`` (cell -> attacks file): those files may be new or changed and
    the manifests that were to list them stale, but each such file must still hold rows whose
    digests match and that were computed on its run; every other file is checked as usual."""
    names = set()
    for rel, name in pending.items():
        if rel == ".":
            names.add(name)
        else:
            names |= {f"{rel}/{name}", f"{rel}/{MANIFEST_NAME}", f"{rel}/{SIGNATURE_NAME}"}
    return _verify(run_dir, pubkey, frozenset(names), frozenset(pending))


def _verify(d: Path, pubkey, pending=frozenset(), cells=frozenset()) -> list[str]:
    if is_sweep(d):
        return _verify_sweep(d, pubkey, pending, cells)
    return _verify_single(d, pubkey, pending=pending)


@contextmanager
def verified_for_reading(run_dir: str | Path, pubkey: str | Path | None = None):
    """Hold ``run_dir``'s shared lock (for a sweep's cell, the sweep's first, the order writers
    take them in) and yield :func:`verify_in_sweep`'s lines: a command reads the directory inside
    the block, so nothing changes between the check and the read."""
    sweep = sweep_of(run_dir)
    with (
        run_dir_lock(sweep, write=False) if sweep is not None else nullcontext(),
        run_dir_lock(run_dir, write=False),
    ):
        yield verify_in_sweep(run_dir, pubkey)


def verify_in_sweep(run_dir: str | Path, pubkey: str | Path | None = None) -> list[str]:
    """:func:`verify_run`, and for a cell of a sweep the whole sweep: a cell's own manifest is
    only as good as the sweep's, which lists it and is what a signature covers (a cell forged
    with its manifest rewritten passed a check of the cell alone; with ``--pubkey`` the cell had
    no signature of its own). The caller holds the sweep's lock, then the cell's
    (:func:`verified_for_reading`)."""
    sweep = sweep_of(run_dir) if not is_sweep(run_dir) else None
    if sweep is None:
        return verify_run(run_dir, pubkey)
    return [
        f"a cell of the sweep {sweep}: checked with the whole sweep",
        *verify_run(sweep, pubkey),
    ]


def load_json(path: Path) -> Any:
    """A run file's JSON; unreadable or malformed is one line naming the file."""
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TestbedError(f"{path}: not readable JSON ({type(exc).__name__})") from None


def _verify_single(d: Path, pubkey, manifest: bool = True, pending=frozenset()) -> list[str]:
    for name in _RUN_FILES if manifest else _RUN_FILES[:-1]:
        if not (d / name).is_file():
            raise TestbedError(f"{d / name}: missing")
    results = load_json(d / "results.json")
    if not isinstance(results, dict):
        raise TestbedError(f"{d / 'results.json'}: not a results object")
    checked = [_check_results(d, results)]
    checked.append(_check_config(d, results))
    checked.append(_check_leakage(d, results["digests"]))
    checked += _check_transcript(d, results)
    checked += _check_attack_files(d, results)
    if manifest:
        checked += check_manifest(d, pubkey, pending)
    return [c for c in checked if c]


def _check_results(d: Path, results: dict) -> str:
    path = d / "results.json"
    saved = results.get("digests")
    if not isinstance(saved, dict) or saved.get("format") != RESULTS_DIGESTS:
        raise TestbedError(
            f"{path}: no digests (written by a testbed before issue 21, or removed); re-run it"
        )
    now = results_digests(results)
    if now["estimates"] != saved.get("estimates"):
        raise TestbedError(f"{path}: estimates changed since the run wrote them (digest mismatch)")
    rows = results.get("attacks") or []
    want = saved.get("attacks") or []
    if not isinstance(want, list):
        raise TestbedError(f"{path}: digests.attacks is not a list (edited)")
    if len(now["attacks"]) != len(want):
        raise TestbedError(f"{path}: {len(now['attacks'])} attack rows, the run wrote {len(want)}")
    for i, (a, b) in enumerate(zip(now["attacks"], want)):
        if a != b:
            label = (
                rows[i].get("label") or rows[i].get("attack") if isinstance(rows[i], dict) else ""
            )
            raise TestbedError(f"{path}: attack row {i} ({label}) changed (digest mismatch)")
    if now["results"] != saved.get("results"):
        raise TestbedError(f"{path}: changed since the run wrote it (digest of the row differs)")
    return f"results.json: estimates, {len(rows)} attack row(s) and the whole row"


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TestbedError(f"{path}: not readable text ({type(exc).__name__})") from None


def _check_config(d: Path, results: dict) -> str:
    want = _read_text(d / "config_hash").strip()
    if results.get("config_hash") != want:
        raise TestbedError(
            f"{d / 'results.json'}: belongs to another run (config hash "
            f"{str(results.get('config_hash'))[:12]} vs config_hash's {want[:12]})"
        )
    path = d / "resolved.yaml"
    text = _read_text(path)
    sc = parse_scenario(text, str(path), str(d))
    rs = ResolvedScenario.of(sc)
    if rs.config_hash != want:
        raise TestbedError(f"{path}: does not match config_hash ({_why_not(text, rs.as_json())})")
    return f"resolved.yaml hashes to config_hash {want[:12]}"


def _why_not(text: str, now: dict) -> str:
    """Why a resolved.yaml no longer hashes to its run's config_hash: resolving it again with
    the plugins installed now fills in something it does not hold (a plugin's parameters
    changed since the run), or the file itself was changed."""
    try:
        saved = yaml.safe_load(text)
    except yaml.YAMLError:
        saved = None
    if isinstance(saved, dict):
        saved = {k: v for k, v in saved.items() if k not in UNHASHED}
        where = _first_difference(saved, {k: v for k, v in now.items() if k not in UNHASHED})
        if where:
            return (
                f"resolving it with the plugins installed now changes {where}: a plugin's "
                "parameters or defaults changed since the run; reinstall the version that made it"
            )
    return "edited since the run, or made by another version of the testbed"


def _first_difference(a, b, path: str = "") -> str:
    """The first path at which two YAML trees differ, with what each holds there ("" if none)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{k}" if path else str(k)
            if k not in a:
                return f"{sub} (new, {b[k]!r})"
            if k not in b:
                return f"{sub} (gone, was {a[k]!r})"
            found = _first_difference(a[k], b[k], sub)
            if found:
                return found
        return ""
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return ""
    return "" if a == b else f"{path} ({a!r} then, {b!r} now)"


def _check_leakage(d: Path, digests: dict) -> str:
    path = d / "leakage.npz"
    want = digests.get("leakage")
    if not path.is_file():
        if want is not None:
            raise TestbedError(f"{path}: missing")
        return ""
    try:
        with np.load(path, allow_pickle=False) as z:
            got = evidence_digest({k: z[k] for k in z.files})
    except Exception as exc:  # noqa: BLE001 - a corrupted zip or .npy header raises anything
        raise TestbedError(f"{path}: not a readable .npz ({type(exc).__name__}: {exc})") from None
    if got != want:
        raise TestbedError(f"{path}: changed since the run wrote it (digest mismatch)")
    return "leakage.npz"


def _check_transcript(d: Path, results: dict) -> list[str]:
    digests = results["digests"]
    rec = results.get("transcript") or {}
    if rec.get("digest") != digests.get("transcript"):
        raise TestbedError(f"{d / 'results.json'}: two different transcript digests recorded")
    checked = []
    saved = (d / "envelopes.jsonl").exists() or (d / "payloads.npz").exists()
    if saved or _saves_transcript(d):
        tr = Transcript.load(d)  # every payload and record digest, line by line
        if tr.digest() != rec.get("digest") or len(tr) != rec.get("messages"):
            raise TestbedError(
                f"{d}: envelopes.jsonl/payloads.npz do not belong to this run's results.json "
                f"(transcript digest {tr.digest()[:22]} vs recorded {str(rec.get('digest'))[:22]})"
            )
        checked.append(f"transcript: {len(tr)} envelopes against digest {tr.digest()[:22]}")
    spilled = (d / HEADER_NAME).exists()
    if digests.get("spill") is not None or spilled:
        if not spilled or not (d / SPILL_NAME).exists():
            raise TestbedError(f"{d / HEADER_NAME}: spill files missing")
        n, envs = read_spilled(d)
        got = records_digest((e.record() for e in envs), n)
        if got != digests.get("spill"):
            raise TestbedError(f"{d / HEADER_NAME}: spilled envelopes differ from the run's digest")
        checked.append(f"spill files: {n} envelopes re-hashed")
    if not checked:
        checked.append("transcript: not saved by this scenario (its digest is in results.json)")
    return checked


def _saves_transcript(d: Path) -> bool:
    try:
        raw = yaml.safe_load((d / "resolved.yaml").read_text()) or {}
        return bool((raw.get("output") or {}).get("save_transcript"))
    except (OSError, yaml.YAMLError, AttributeError):
        return False


def attack_file_digests(results: dict, rows: list[dict]) -> dict[str, Any]:
    """The ``digests`` section of an ``attacks-*.json`` file: the run it was computed on (its
    transcript and results digests) and each row as it reads back from the file."""
    return {
        "format": ATTACKS_DIGESTS,
        "transcript": (results.get("digests") or {}).get("transcript"),
        "results": (results.get("digests") or {}).get("results"),
        "rows": [canonical_digest(r) for r in json_form(rows)],
    }


def _check_attack_files(d: Path, results: dict) -> list[str]:
    checked = []
    for f in attack_files(d):  # any other attacks-* name is refused: the testbed never wrote it
        doc = load_json(f)
        dig = doc.get("digests") if isinstance(doc, dict) else None
        if not isinstance(dig, dict) or dig.get("format") != ATTACKS_DIGESTS:
            raise TestbedError(f"{f}: no digests (not written by testbed attack)")
        if dig.get("transcript") != results["digests"].get("transcript") or dig.get(
            "results"
        ) != results["digests"].get("results"):
            raise TestbedError(f"{f}: computed on another run (transcript or results differ)")
        rows = doc.get("rows")
        want = dig.get("rows") or []
        if not isinstance(rows, list) or len(rows) != len(want):
            raise TestbedError(f"{f}: rows do not match their digests (count)")
        for i, (r, w) in enumerate(zip(json_form(rows), want)):
            if canonical_digest(r) != w:
                raise TestbedError(f"{f}: row {i} changed (digest mismatch)")
        checked.append(f"{f.name}: {len(rows)} row(s)")
    return checked


def _verify_sweep(d: Path, pubkey, pending=frozenset(), cells=frozenset()) -> list[str]:
    rows = []
    path = d / "results.jsonl"
    for lineno, line in enumerate(_read_text(path).splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except (ValueError, RecursionError):
                raise TestbedError(f"{path}:{lineno}: not JSON") from None
            if not isinstance(rows[-1], dict):
                raise TestbedError(f"{path}:{lineno}: not a results row (a JSON object)")
    checked: list[str] = []
    for lineno, row in enumerate(rows, 1):
        cell = d / "cells" / str(row.get("cell"))
        if "/" in str(row.get("cell")) or not cell.is_dir():
            raise TestbedError(f"{path}:{lineno}: cell {row.get('cell')} missing")
        unfinished = f"cells/{cell.name}" in cells  # its manifest was not written again yet
        _verify_single(cell, None, manifest=(cell / MANIFEST_NAME).exists() and not unfinished)
        if json_form(row.get("results")) != load_json(cell / "results.json"):
            raise TestbedError(f"{path}:{lineno}: row differs from {cell / 'results.json'}")
    checked.append(f"results.jsonl: {len(rows)} row(s), each cell's digests")
    checked += check_manifest(d, pubkey, pending)
    return checked
