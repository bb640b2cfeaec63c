"""Attack stage of a run: build each attack's view from the transcript, run it and its
prior-only baseline, and hand outputs plus ground truth to the scorer."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from testbed.bus import Transcript
from testbed.isolation import run_isolated
from testbed.registry import ATTACKS
from testbed.rundir import run_dir_lock
from testbed.seeding import component_rng
from testbed.truth import GroundTruth, PartyTruth

DELTA = 1e-5  # same delta as the run's privacy summary (testbed.runner.DELTA)

__all__ = ["attack_labels", "ground_truth", "rerun_attacks", "run_attacks", "saved_attack_rows"]


def ground_truth(world) -> GroundTruth:
    """The scorer's record of the truth for one run (built by the driver, given to no attack)."""
    tokens = world.meta.get("dataset_meta", {}).get("tokens")
    ledger = world.ledger
    return GroundTruth(
        parties={p: PartyTruth(d.X, d.y, d.source_index) for p, d in world.parties.items()},
        tokens=None if tokens is None else tuple(tokens),
        membership=dict(world.meta.get("membership", {})),
        candidates=dict(pool) if isinstance(pool := world.public.extra.get("candidates"), dict) else {},
        noise_masks=dict(world.noise_masks),
        claimed_epsilon={p: float(ledger.epsilon(p, DELTA)) for p in ledger.parties()},
        delta=DELTA,
    )


def attack_labels(specs: list[dict[str, Any]]) -> list[str]:
    """One label per attack configuration (``{name, params, label?}``), keying its columns in
    results.csv and the report: the explicit ``label``, else the name, plus a short digest of
    the params when another entry of the same attack has different params. Duplicate labels are
    refused."""
    import hashlib
    import json

    from testbed.errors import TestbedError

    def digest(p):
        blob = json.dumps(p.get("params") or {}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:6]

    variants: dict[str, set[str]] = {}
    for p in specs:
        variants.setdefault(p["name"], set()).add(digest(p))
    labels = []
    for p in specs:
        lab = p.get("label") or (
            p["name"] if len(variants[p["name"]]) == 1 else f"{p['name']}-{digest(p)}"
        )
        labels.append(lab)
    seen: dict[tuple, int] = {}
    for i, (lab, p) in enumerate(zip(labels, specs)):
        key = (lab, p.get("target"))  # one configuration aimed at two targets: rows differ
        if key in seen:
            raise TestbedError(
                f"attacks[{i}]: label {lab!r} already used by attacks[{seen[key]}]; give one "
                "of them an explicit `label:`"
            )
        seen[key] = i
    return labels


def run_attacks(
    world, transcript: Transcript, released=None, evidence: dict | None = None
) -> list[dict[str, Any]]:
    """Run every attack of the scenario on what its observer saw; return scored rows.

    Each attack runs in its own process (:mod:`testbed.isolation`) on a serialised copy of the
    observer's view and of the public information; outputs are validated, then scored against
    the :class:`~testbed.truth.GroundTruth`, which never leaves this process.

    ``released``: the protocol's final estimates, which the participants learn; attacks find
    them in ``public.extra["released"]``. ``evidence``: when a dict, it receives the small arrays
    the report draws for each row (:func:`testbed.evidence.leakage_evidence`, scoring side).
    """
    sc = world.scenario
    rows: list[dict[str, Any]] = []
    if not sc.attacks:
        return rows
    from testbed.metrics import score_attack

    tm = sc.threat_model
    who = {tm.observer, *tm.colluders}
    own = {p: d.X for p, d in world.parties.items() if p in who}
    public = world.public
    if released is not None:
        public = replace(public, extra={**public.extra, "released": dict(released)})
    view = transcript.view(tm.observer, tm.colluders, own_data=own, public=public)
    labels = attack_labels(
        [
            {**world.resolved["attacks"][i], "label": spec.label, "target": spec.target}
            for i, spec in enumerate(sc.attacks)
        ]
    )
    truth = ground_truth(world)
    for i, spec in enumerate(sc.attacks):
        cls = ATTACKS.get(spec.name)
        params = world.resolved["attacks"][i]["params"]
        if not cls(cls.Config(**params)).applies_to(sc.protocol.name):
            continue  # e.g. a sweep over protocols: each attack runs where it applies
        outputs, baseline = run_isolated(
            cls,
            params,
            view,
            public,
            component_rng(sc.seed, "attack", i, spec.name),
            component_rng(sc.seed, "baseline", i, spec.name),
        )
        _validate(spec.name, outputs, baseline, public, cls)
        for out in outputs:
            if spec.target is not None and out.target != spec.target:
                continue
            base = next(
                (b for b in baseline if b.target == out.target and b.kind == out.kind), None
            )
            rows.append(
                {
                    "attack": spec.name,
                    "label": labels[i],
                    "target": out.target,
                    "observer": tm.observer,
                    **score_attack(out, base, truth),
                }
            )
            if evidence is not None:
                from testbed.evidence import leakage_evidence

                evidence.update(leakage_evidence(len(rows) - 1, out, base, world))
            if out.kind == "scores" and world.ledger.parties():
                # the audit's empirical lower bound is shown beside the defense's claim
                rows[-1]["epsilon_claimed"] = truth.claimed(out.target)
    return rows


def _validate(name: str, outputs, baseline, public, cls) -> None:
    """Outputs and baseline follow the AttackOutput schema; else one line naming the plugin."""
    from attacks._base import OUTPUT_KINDS, AttackOutputError, validate_outputs

    for phase, outs in (("run", outputs), ("baseline", baseline)):
        try:
            validate_outputs(list(outs), public, getattr(cls, "output_kinds", None) or OUTPUT_KINDS)
        except AttackOutputError as exc:
            raise AttackOutputError(f"attack {name!r} ({phase} output): {exc}") from None


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

    from testbed.config import config_hash, parse_scenario, resolve
    from testbed.errors import TestbedError
    from testbed.runner import build_world

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
    world = build_world(sc)
    return run_attacks(world, transcript, released=saved.get("estimates")), sc


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
