"""``testbed attack``: attacks re-run on a saved run's transcript (the protocol is not run
again), under the run directory's lock, on a directory whose digests verify."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from testbed.errors import ScenarioError, TestbedError
from testbed.exchange.bus import Transcript, atomic_write_bytes
from testbed.registry import ATTACKS
from testbed.run.execute import Replay, execute
from testbed.run.journal import Journal, read_journal
from testbed.run.manifest import (
    check_signer,
    is_signed,
    load_private_key,
    sweep_of,
    write_manifest,
)
from testbed.run.results import json_form, jsonable
from testbed.run.rundir import attack_files, finished_cells, is_sweep, locked_temp_dir, run_dir_lock
from testbed.run.verify import attack_file_digests, load_json, verify_pending, verify_run
from testbed.scenario.labels import attack_labels
from testbed.scenario.loading import parse_scenario
from testbed.scenario.resolve import ResolvedScenario, config_hash
from testbed.scoring.results_models import AttackRowsFile
from testbed.scoring.results_schema import parse_row, read_attack_rows

__all__ = [
    "attack_run_or_sweep",
    "attack_saved_run",
    "complete_interrupted",
    "rerun_attack_file",
    "rerun_attacks",
    "rerun_compare",
    "saved_attack_rows",
    "threat_label",
    "why_no_rows",
]


def rerun_attacks(
    run_dir,
    attacks: list[dict[str, Any]] | None = None,
    observer: str | None = None,
    colluders: list[str] | None = None,
) -> tuple[list[dict[str, Any]], Any]:
    """Run attacks on a saved run's transcript without re-running the protocol.

    The run directory is read under its shared lock for the whole computation, and its digests
    must verify first (:func:`testbed.run.verify.verify_run`: resolved.yaml against its config
    hash, results.json against its digests, every payload and envelope record, the manifest).
    The data are rebuilt from the seed (only the scorer uses them), the transcript is loaded
    from ``envelopes.jsonl`` + ``payloads.npz``, and the released estimates come from
    ``results.json``. ``attacks`` (``[{name, params, target}]``) and ``observer``/``colluders``
    replace the scenario's own, so a new attack or another threat model can be tried on the same
    messages. Returns the scored rows and the scenario they were run under.
    """
    run_dir = Path(run_dir)
    with run_dir_lock(run_dir, write=False):
        rows, sc, _ = _attack(run_dir, attacks, observer, colluders)
    return rows, sc


def attack_saved_run(
    run_dir,
    attacks: list[dict[str, Any]] | None = None,
    observer: str | None = None,
    colluders: list[str] | None = None,
    sign_key=None,
    *,
    journal=None,
) -> tuple[list[dict[str, Any]], Any, Path]:
    """``testbed attack`` on one run directory: :func:`rerun_attacks`, then write the rows to
    ``attacks-<tag>.json`` beside the results (with their digests and the digests of the run
    they were computed on) and refresh the manifest (signed again with ``sign_key``). The
    directory's exclusive lock is held from the first read to the last write, so the rows can
    only land in the run they were computed on. A signed run is refused without ``sign_key``
    (the new file would not be covered by the signature). The file is announced in the journal
    before it is written (``journal``: the sweep's, for a cell; else the run's own, and an
    interrupted earlier ``testbed attack`` on the run is completed first,
    :func:`complete_interrupted`)."""
    run_dir = Path(run_dir)
    if sign_key is not None:
        load_private_key(sign_key)  # a bad key file stops before any work, not after the rows
    _need_run_dir(run_dir)
    with run_dir_lock(run_dir, write=True):
        if sign_key is None and is_signed(run_dir):
            raise TestbedError(
                f"{run_dir}: the run is signed; pass --sign KEYFILE to sign it again with the "
                "new rows (or attack a copy)"
            )
        if sign_key is not None:  # a signed run: only its signer signs it again, untampered
            check_signer(run_dir, sign_key)
        own = journal is None
        if own:
            complete_interrupted(run_dir, sign_key)
            journal = Journal(run_dir)
        rows, sc, saved = _attack(run_dir, attacks, observer, colluders)
        if not sc.attacks:  # nothing ran: say so, never write an empty attacks file
            raise TestbedError(
                f"{run_dir}: its scenario names no attack; give one with --attack NAME "
                "(`testbed plugins` lists them, e.g. --attack sent_rows)"
            )
        spec = {
            "attacks": [a.model_dump(mode="json") for a in sc.attacks],
            "threat_model": sc.threat_model.model_dump(mode="json"),
        }
        out = run_dir / f"attacks-{config_hash(spec)[:8]}.json"
        rows = file_rows(rows, sc, out.name)
        doc = jsonable({**spec, "rows": rows, "digests": attack_file_digests(saved, rows)})
        parse_row(AttackRowsFile, doc, out.name)  # the results schema's file, checked as made
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
        journal.intend(run_dir, out.name)  # a kill -9 from here on is not taken for tampering
        try:
            atomic_write_bytes(out, text.encode())
        finally:  # a Ctrl-C right after the file is in place must not leave it unlisted
            write_manifest(run_dir, sign_key)
            if own:
                journal.close()
    return rows, sc, out


def attack_run_or_sweep(run_dir, attacks=None, observer=None, colluders=None, sign_key=None):
    """:func:`attack_saved_run` on a run directory, or on every finished cell of a sweep
    directory, or on one cell of a sweep (the sweep's exclusive lock held throughout; its
    manifest, which lists its cells' files, refreshed and signed again with ``sign_key`` at the
    end). Returns ``[(rows, scenario, attacks file)]`` per cell."""
    run_dir = Path(run_dir)
    if sign_key is not None:
        load_private_key(sign_key)  # a bad key file stops before any work, not after the rows
    whole = is_sweep(run_dir)
    sweep = run_dir if whole else sweep_of(run_dir)
    if sweep is None:
        return [attack_saved_run(run_dir, attacks, observer, colluders, sign_key)]
    with run_dir_lock(sweep, write=True):
        if sign_key is None and is_signed(sweep):
            raise TestbedError(
                f"{sweep}: the sweep is signed; pass --sign KEYFILE to sign it again with the "
                "new rows (or attack a copy)"
            )
        if sign_key is not None:
            check_signer(sweep, sign_key)
        cells = finished_cells(sweep) if whole else [run_dir]
        if not cells:
            raise TestbedError(f"{sweep}: a sweep directory without finished cells")
        complete_interrupted(sweep, sign_key)
        verify_run(sweep)  # the sweep's own files too, not only each cell's
        out, journal = [], Journal(sweep)
        try:
            for c in cells:
                out.append(
                    attack_saved_run(c, attacks, observer, colluders, sign_key, journal=journal)
                )
        finally:
            # the cells done so far (a Ctrl-C or a failure in a later cell): the sweep's
            # manifest lists each cell's refreshed one, else the sweep no longer verifies
            if journal.cells:
                write_manifest(sweep, sign_key)
            journal.close()
    return out


def complete_interrupted(top: Path, sign_key=None) -> None:
    """Complete what an interrupted ``testbed attack`` left in ``top`` (a run, or a sweep), as
    its journal announced (testbed/run/journal.py): every other file must verify, each announced
    attacks file must hold the rows its attacks give when computed again on the saved messages
    (so a file a forger put there is refused, not listed), and then the manifests that were to
    list them are written (signed again with ``sign_key``). The caller holds ``top``'s
    exclusive lock."""
    pending = read_journal(top)
    if pending is None:
        return
    try:
        verify_run(top)  # killed after its last manifest: only the journal is left
    except TestbedError:
        verify_pending(top, pending)  # a change outside the announced files: refused as such
        for rel, name in pending.items():
            if (top / rel / name).is_file():
                _same_rows(top / rel, top / rel / name, verify=False)
        for rel in pending:
            if rel != ".":
                write_manifest(top / rel, sign_key)
        write_manifest(top, sign_key)
    Journal(top).close()


def file_rows(rows: list[dict], sc, source: str) -> list[dict]:
    """Rows as an attacks file holds them: each label carries the threat model it ran under
    (two threat models never share a column), and ``source`` names the file."""
    for r in rows:
        r["label"] = f"{r.get('label') or r['attack']}@{threat_label(sc)}"
        r["source"] = source
    return rows


def rerun_attack_file(run_dir: Path, path: Path, verify: bool = True) -> list[dict]:
    """The rows of the attacks file ``path`` computed again: its attacks under its threat model
    on the run's saved messages (nothing written). ``testbed verify --rerun`` compares them
    with the file's, so rows a forger wrote (their digests recomputed) are found. ``verify``:
    verify the run first (off only when the caller verified it otherwise)."""
    try:
        doc = json.loads(path.read_text())
        tm = doc["threat_model"]
        attacks, observer, colluders = doc["attacks"], tm["observer"], tm.get("colluders") or []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TestbedError(f"{path}: not an attacks file ({type(exc).__name__})") from None
    rows, sc, _ = _attack(run_dir, attacks, observer, colluders, verify)
    return file_rows(rows, sc, path.name)


def _need_run_dir(run_dir: Path) -> None:
    for name in ("resolved.yaml", "config_hash", "results.json", "envelopes.jsonl"):
        if not (run_dir / name).is_file():
            raise TestbedError(
                f"{run_dir}: {name} not found (a single run saved with save_transcript: true is needed)"
            )


def _attack(run_dir: Path, attacks, observer, colluders, verify: bool = True):
    """The attack re-run itself; the caller holds the lock."""
    _need_run_dir(run_dir)
    if verify:
        verify_run(run_dir)  # every digest; the first mismatch refuses the directory
    resolved_path = run_dir / "resolved.yaml"
    sc = parse_scenario(resolved_path.read_text(), str(resolved_path), str(run_dir))
    if attacks is not None or observer is not None or colluders is not None:
        raw = yaml.safe_load(resolved_path.read_text())
        if attacks is not None:
            raw["attacks"] = attacks
        tm = raw.get("threat_model") or {}
        raw["threat_model"] = {
            "observer": observer if observer is not None else tm.get("observer", "server"),
            "colluders": colluders if colluders is not None else tm.get("colluders", []),
        }
        where = f"{resolved_path} with the command line's attacks/threat model"
        try:
            sc = parse_scenario(yaml.safe_dump(raw, sort_keys=False), where, str(run_dir))
        except ScenarioError as exc:  # the line of a file written here means nothing to a user
            raise ScenarioError(_on_the_command_line(str(exc), where, attacks)) from None
    saved = _load_results(run_dir / "results.json")
    transcript = Transcript.load(run_dir)  # checks every envelope's payload and record digest
    _check_same_run(run_dir, saved, (run_dir / "config_hash").read_text().strip(), transcript)
    out = execute(sc, replay=Replay(transcript, released=saved.get("estimates")))
    return out.rows, sc, saved


def _on_the_command_line(msg: str, where: str, attacks) -> str:
    """A scenario error in what the command line added to a saved run, said in its terms:
    ``--attack 'NAME' (#2): params.x: unknown key`` instead of a line of a YAML text made here."""
    rest = msg[len(where) :].lstrip(":0123456789 ") if msg.startswith(where) else msg
    m = re.match(r"attacks\[(\d+)\]\.?", rest)
    if m and attacks is not None and int(m[1]) < len(attacks):
        i = int(m[1])
        return f"--attack {attacks[i]['name']!r} (#{i + 1}): {rest[m.end() :].lstrip(': ')}"
    return f"the command line (--attack, --observer, --colluders): {rest}"


def saved_attack_rows(run_dir) -> list[Any]:
    """Rows of every ``attacks-*.json`` that ``testbed attack`` wrote in ``run_dir`` (sorted by
    file name), parsed into the results schema's :class:`AttackRow`; a file that is not one
    is refused with its name and the field."""
    # attacks-<8 hex>.json only; other names refused
    return [row for f in attack_files(Path(run_dir)) for row in read_attack_rows(f).rows]


def _load_results(path) -> dict[str, Any]:
    try:
        saved = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TestbedError(f"{path}: not a readable results file ({type(exc).__name__})") from None
    if not isinstance(saved, dict):
        raise TestbedError(f"{path}: not a results object")
    return saved


def _check_same_run(run_dir, saved: dict[str, Any], want_hash: str, transcript) -> None:
    """Refuse a run directory whose files come from different runs: results.json must name the
    same config hash as ``config_hash``/``resolved.yaml``, and the loaded transcript must have
    the digest and length results.json recorded when the run wrote it."""
    if saved.get("config_hash") != want_hash:
        raise TestbedError(
            f"{run_dir}: results.json belongs to another run (config hash "
            f"{str(saved.get('config_hash'))[:12]} vs resolved.yaml's {want_hash[:12]})"
        )
    rec = saved.get("transcript") or {}
    if rec.get("digest") != transcript.digest() or rec.get("messages") != len(transcript):
        raise TestbedError(
            f"{run_dir}: envelopes.jsonl/payloads.npz do not belong to this run's results.json "
            f"(transcript digest {transcript.digest()[:12]} vs recorded "
            f"{str(rec.get('digest'))[:12]})"
        )


def threat_label(sc) -> str:
    """The threat model in a re-run row's label: ``server``, or ``server+alice`` for the server
    colluding with alice (two threat models never share a label)."""
    return "+".join((sc.threat_model.observer, *sc.threat_model.colluders))


def why_no_rows(sc, rows: list[dict[str, Any]], ran_only: bool = False) -> list[str]:
    """One line per attack of ``sc`` (a scenario run or re-run) that produced no scored row,
    saying why: it does not apply to the protocol (naming the protocols it applies to; left out
    with ``ran_only``, when the run already listed it as skipped), or it ran and returned no
    output for any target the observer could attack (or none for its ``target`` filter). Empty
    when every attack has a row."""
    rs = ResolvedScenario.of(sc)
    labels = attack_labels(rs.attack_entries())
    # rows of `testbed attack` carry the observer in their label (attack_saved_run)
    rerun = f"@{threat_label(sc)}"
    have = {(r.get("label") or r.get("attack") or "").removesuffix(rerun) for r in rows}
    observer = "+".join((sc.threat_model.observer, *sc.threat_model.colluders))
    out = []
    for i, (spec, label) in enumerate(zip(sc.attacks, labels)):
        if label in have:
            continue
        cls = ATTACKS.get(spec.name)
        if not cls(rs.configs.attacks[i]).applies_to(sc.protocol.name):
            if ran_only:
                continue
            out.append(
                f"{label}: does not apply to protocol {sc.protocol.name!r} (applies to: "
                f"{', '.join(cls.protocols)}); not run"
            )
        elif spec.target is not None:
            out.append(f"{label}: ran, but returned no output for target {spec.target!r}")
        else:
            out.append(
                f"{label}: ran as {observer}, but returned no output for any target (nothing it "
                "reads was in this observer's view)"
            )
    return out


# ----------------------------------------------------------------------------- --rerun
#: the temporary directories ``verify --rerun`` runs scenarios again in
RERUN_PREFIX = "testbed-rerun-"


def rerun_compare(run_dir: str | Path, progress: bool = False) -> list[str]:
    """Run each scenario of ``run_dir`` (a run, or every cell of a sweep) again into a temporary
    directory and compare ``results.json`` byte for byte, and the attacks of each of its
    ``attacks-*.json`` files (``testbed attack``) on its saved messages row by row; the first
    difference is one line."""
    run_dir = Path(run_dir)
    dirs = finished_cells(run_dir) if is_sweep(run_dir) else [run_dir]
    files = 0
    for d in dirs:
        sc = parse_scenario((d / "resolved.yaml").read_text(), str(d / "resolved.yaml"), str(d))
        # locked while in use: a `verify --rerun` killed outright leaves it to the next one
        with locked_temp_dir(RERUN_PREFIX) as tmp:
            out = execute(sc, tmp / "run", progress=progress).out_dir
            a, b = (d / "results.json").read_bytes(), (out / "results.json").read_bytes()
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            line = a[:at].count(b"\n") + 1
            raise TestbedError(
                f"{d / 'results.json'}:{line}: differs from a fresh run of its resolved.yaml"
            )
        files += _rerun_attack_files(d)
    out = [f"re-ran {len(dirs)} scenario(s): results.json identical byte for byte"]
    if files:
        out.append(
            f"re-ran the attacks of {files} attacks file(s) on the saved messages: same rows"
        )
    return out


def _rerun_attack_files(d: Path) -> int:
    """Each ``attacks-*.json`` of ``d`` computed again (:func:`rerun_attack_file`) and compared
    row by row with the file; returns how many."""
    files = attack_files(d)
    for f in files:
        _same_rows(d, f)
    return len(files)


def _same_rows(d: Path, f: Path, verify: bool = True) -> None:
    """The attacks file ``f`` of run ``d`` computed again (:func:`rerun_attack_file`) gives
    its rows, or the first difference is one line."""
    saved = load_json(f).get("rows") or []
    fresh = json.loads(json.dumps(jsonable(rerun_attack_file(d, f, verify)), sort_keys=True))
    if len(fresh) != len(saved):
        raise TestbedError(
            f"{f}: {len(saved)} row(s), a fresh run of its attacks on the saved messages "
            f"gives {len(fresh)}"
        )
    for i, (x, y) in enumerate(zip(saved, fresh)):
        if json_form(x) != json_form(y):
            key = next((k for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)), "?")
            raise TestbedError(
                f"{f}: row {i} ({y.get('label')}) differs from a fresh run of its attacks on "
                f"the saved messages (first in {key!r})"
            )
