"""Attack stage of a run: build each attack's view from the transcript, run it and its
prior-only baseline, and hand outputs plus ground truth to the scorer."""

from __future__ import annotations

from typing import Any

from testbed.exchange.bus import Transcript
from testbed.run.execute import Replay, execute
from testbed.run.rundir import run_dir_lock

__all__ = ["rerun_attacks", "saved_attack_rows"]


def rerun_attacks(
    run_dir,
    attacks: list[dict[str, Any]] | None = None,
    observer: str | None = None,
    colluders: list[str] | None = None,
) -> tuple[list[dict[str, Any]], Any]:
    """Run attacks on a saved run's transcript without re-running the protocol.

    The run's ``resolved.yaml`` is checked against its ``config_hash``; the data are rebuilt from
    the seed (only the scorer uses them), the transcript is loaded from ``envelopes.jsonl`` +
    ``payloads.npz``, and the released estimates come from ``results.json``. ``attacks``
    (``[{name, params, target}]``) and ``observer``/``colluders`` replace the scenario's own, so a
    new attack or another threat model can be tried on the same messages. Returns the scored rows
    and the scenario they were run under.
    """
    from pathlib import Path

    import yaml

    from testbed.errors import TestbedError
    from testbed.scenario.loading import parse_scenario
    from testbed.scenario.resolve import config_hash, resolve

    run_dir = Path(run_dir)
    for name in ("resolved.yaml", "config_hash", "results.json", "envelopes.jsonl"):
        if not (run_dir / name).is_file():
            raise TestbedError(
                f"{run_dir}: {name} not found (a single run saved with save_transcript: true is needed)"
            )
    resolved_path = run_dir / "resolved.yaml"
    original = parse_scenario(resolved_path.read_text(), str(resolved_path), str(run_dir))
    want = (run_dir / "config_hash").read_text().strip()
    if config_hash(resolve(original)) != want:
        raise TestbedError(
            f"{run_dir}: resolved.yaml does not match config_hash (edited, or made by another version)"
        )
    sc = original
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
        sc = parse_scenario(yaml.safe_dump(raw, sort_keys=False), where, str(run_dir))
    with run_dir_lock(run_dir, write=False):
        saved = _load_results(run_dir / "results.json")
        transcript = Transcript.load(run_dir)  # checks every envelope's payload digest
    _check_same_run(run_dir, saved, want, transcript)
    out = execute(sc, replay=Replay(transcript, released=saved.get("estimates")))
    return out.rows, sc


def saved_attack_rows(run_dir) -> list[dict[str, Any]]:
    """Rows of every ``attacks-*.json`` that ``testbed attack`` wrote in ``run_dir`` (sorted by
    file name); unreadable files are refused with their name."""
    import json
    from pathlib import Path

    from testbed.errors import TestbedError

    rows: list[dict[str, Any]] = []
    for f in sorted(Path(run_dir).glob("attacks-*.json")):
        try:
            data = json.loads(f.read_text())
            rows.extend(data["rows"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TestbedError(f"{f}: not an attack-rows file ({type(exc).__name__})") from None
    return rows


def _load_results(path) -> dict[str, Any]:
    import json

    from testbed.errors import TestbedError

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
    from testbed.errors import TestbedError

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
