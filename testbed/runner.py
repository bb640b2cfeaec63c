"""Run one scenario along the single data path of DESIGN.md and write its run directory.

scenario -> data -> protocol.run(parties, bus, rng) -> result + reference -> accuracy
         -> view(observer) -> attacks -> scorer -> results.json (+ transcript, resolved.yaml)

``results.json`` holds only seed-determined values, so the same seed gives byte-identical files;
wall-clock times and versions go to ``run_info.json``.
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from testbed.bus import PrivacyGuard, PublicInfo, Transcript, atomic_write_bytes
from testbed.config import Scenario, config_hash, resolve
from testbed.data import NoiseSpec, PartyData, build_parties
from testbed.engines import open_bus
from testbed.errors import TestbedError
from testbed.ledger import PrivacyLedger
from testbed.metrics import detection_metrics, relative_error
from testbed.public import gaussian_prior
from testbed.registry import (
    DATASETS,
    DEFENSES,
    PARTITIONERS,
    PROTOCOLS,
    TRANSFORMS,
    plugin_phase,
)
from testbed.rundir import run_dir_lock
from testbed.seeding import component_rng

__all__ = [
    "RunOutput",
    "build_world",
    "jsonable",
    "package_versions",
    "run_scenario",
    "transcript_summary",
    "write_json",
]

DELTA = 1e-5


def jsonable(x: Any) -> Any:
    """Convert to JSON-safe values: arrays to lists, NaN to null, +-inf to the strings 'inf'/'-inf'."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer, int)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        f = float(x)
        if math.isnan(f):
            return None
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    return x


def write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(jsonable(obj), indent=2, sort_keys=True) + "\n").encode())


@dataclass
class World:
    """Everything a run needs, built from a scenario (no protocol output yet)."""

    scenario: Scenario
    resolved: dict
    config_hash: str
    parties: dict[str, PartyData]
    noise_masks: dict[str, np.ndarray]
    protocol: Any
    defenses: list
    ledger: PrivacyLedger
    public: PublicInfo
    meta: dict = field(default_factory=dict)


def build_world(sc: Scenario) -> World:
    """Load data, partition, inject noise, transform; instantiate protocol and defenses."""
    resolved = resolve(sc)
    h = config_hash(resolved)
    seed = sc.seed
    ds_cls = DATASETS.get(sc.data.dataset.name)
    dataset = ds_cls(ds_cls.Config(**resolved["data"]["dataset"]["params"])).load(
        component_rng(seed, "data")
    )
    held = keep = None
    if sc.membership is not None:  # held out before partitioning: no party holds these rows
        from testbed.membership import hold_out

        dataset, keep, held = hold_out(
            dataset, sc.membership.nonmembers, component_rng(seed, "membership", "holdout")
        )
    part_cls = PARTITIONERS.get(sc.data.partition.name)
    partitioner = part_cls(part_cls.Config(**resolved["data"]["partition"]["params"]))
    noise = [NoiseSpec.model_validate(n) for n in sc.data.noise]
    parties, masks = build_parties(
        dataset,
        partitioner,
        sc.data.party_names(),
        component_rng(seed, "partition"),
        noise,
        component_rng(seed, "noise"),
    )
    if keep is not None:
        from testbed.membership import reindex

        parties = reindex(parties, keep)
    if sc.data.transform is not None:
        tr_cls = TRANSFORMS.get(sc.data.transform.name)
        tr = tr_cls(tr_cls.Config(**resolved["data"]["transform"]["params"]))
        parties = {p: tr.apply(d) for p, d in parties.items()}
        if held is not None:
            held = tr.apply(PartyData("heldout", held)).X
    pool_meta: dict[str, Any] = {}
    cand_extra: dict[str, Any] = {}
    if held is not None:
        from testbed.membership import draw_candidates

        cp = draw_candidates(
            parties,
            np.asarray(held, dtype=np.float64),
            sc.membership.members,
            component_rng(seed, "membership", "candidates"),
            sc.membership.targets,
        )
        cand_extra = {"candidates": cp.candidates}
        pool_meta = {"membership": cp.labels}  # ground truth: the scorer only
    defenses = []
    overrides: dict[str, Any] = {}
    for i, spec in enumerate(sc.defenses):
        cls = DEFENSES.get(spec.name)
        dfn = cls(cls.Config(**resolved["defenses"][i]["params"]))
        defenses.append(dfn)
        overrides.update(dfn.protocol_overrides(sc.protocol.name))
    proto_cls = PROTOCOLS.get(sc.protocol.name)
    proto_params = {**resolved["protocol"]["params"], **overrides}
    protocol = proto_cls(proto_cls.Config(**proto_params))
    d = next(iter(parties.values())).X.shape[1]
    pool = np.vstack([v.X for v in parties.values()])
    prior_mean, prior_cov, prior = gaussian_prior(
        pool, component_rng(seed, "public_prior"), max(v.n for v in parties.values())
    )
    public = PublicInfo(
        protocol=sc.protocol.name,
        params=protocol.public_params(),
        parties=tuple(parties),
        dim=d,
        prior=prior,
        extra={
            "dataset": sc.data.dataset.name,
            "sizes": {p: v.n for p, v in parties.items()},
            "prior_mean": prior_mean,
            "prior_cov": prior_cov,
            **dict(dataset.meta.get("public", {})),
            **cand_extra,
        },
    )
    return World(
        sc,
        resolved,
        h,
        parties,
        masks,
        protocol,
        defenses,
        PrivacyLedger(),
        public,
        {"dataset_meta": dict(dataset.meta), **pool_meta},
    )


_REFERENCE_CACHE: dict[str, dict] = {}


def _reference(protocol, parties) -> dict:
    """``protocol.reference(parties)``, memoised in-process by protocol name, the protocol's
    ``reference_key()`` and a digest of the parties' data: sweep cells that share data (every
    defense setting and knob of a scenario) solve the central exact OT once. Exact POT solves are
    deterministic, so results are byte-identical with or without the cache."""
    import hashlib

    h = hashlib.sha256(f"{protocol.name}|{protocol.reference_key()}".encode())
    for name in sorted(parties):
        d = parties[name]
        h.update(name.encode())
        h.update(np.ascontiguousarray(d.X).tobytes())
        h.update(str(d.X.shape).encode())
        if d.y is not None:
            h.update(np.ascontiguousarray(d.y).tobytes())
    key = h.hexdigest()
    if key not in _REFERENCE_CACHE:
        if len(_REFERENCE_CACHE) >= 64:
            _REFERENCE_CACHE.pop(next(iter(_REFERENCE_CACHE)))
        _REFERENCE_CACHE[key] = protocol.reference(parties)
    return dict(_REFERENCE_CACHE[key])


def transcript_summary(envelopes) -> dict[str, dict[str, int]]:
    """Messages and bytes per message kind."""
    out: dict[str, dict[str, int]] = {}
    for e in envelopes:
        k = out.setdefault(e.kind, {"messages": 0, "bytes": 0})
        k["messages"] += 1
        k["bytes"] += e.nbytes
    return dict(sorted(out.items()))


def package_versions() -> dict:
    """Python and package versions (for run_info.json and the report)."""
    import importlib.metadata as md

    versions = {}
    for pkg in (
        "ot-testbed",
        "numpy",
        "POT",
        "torch",
        "scikit-learn",
        "opacus",
        "gensim",
        "pydantic",
        "matplotlib",
    ):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {"python": platform.python_version(), "versions": versions}


@dataclass
class RunOutput:
    out_dir: Path
    results: dict
    transcript: Transcript
    elapsed: float


class _Progress:
    """A tqdm bar over messages (only when stderr is a terminal and ``enabled``)."""

    def __init__(self, enabled: bool, desc: str):
        self.bar = None
        if enabled:
            import sys

            from tqdm import tqdm

            if sys.stderr.isatty():
                self.bar = tqdm(desc=desc, unit="msg", leave=False, dynamic_ncols=True)

    def __call__(self, env) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"round {env.round}", refresh=False)
            self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _accuracy(estimate, exact) -> dict:
    """Relative error of one estimate; arrays (e.g. a distance matrix) use the Frobenius norm and
    their signed error is that of the sum (the direction of an overall bias)."""
    if isinstance(estimate, np.ndarray) or isinstance(exact, np.ndarray):
        est, ex = np.asarray(estimate, dtype=np.float64), np.asarray(exact, dtype=np.float64)
        norm = float(np.linalg.norm(ex))
        return {
            "estimate": est,
            "exact": ex,
            "relative_error": float(np.linalg.norm(est - ex)) / norm if norm else math.nan,
            "signed_relative_error": float((est.sum() - ex.sum()) / ex.sum())
            if ex.sum()
            else math.nan,
        }
    return {
        "estimate": estimate,
        "exact": exact,
        "relative_error": relative_error(estimate, exact),
        # sign shows the direction of a bias (e.g. TriangleWad over-estimates for k > 1)
        "signed_relative_error": (estimate - exact) / exact if exact != 0 else math.nan,
    }


def score_detection(detection, noise_masks) -> dict:
    """Score a protocol's per-row detection scores against the noise masks (ground truth).

    ``{detector: {party: metrics}}``; a party without a noise mask counts as all clean. When a
    detector scores several parties, ``"pooled"`` scores all their rows together.
    """
    out: dict[str, dict] = {}
    for detector, per_party in detection.items():
        rows, scores, masks = {}, [], []
        for party, s in per_party.items():
            s = np.asarray(s, dtype=np.float64).reshape(-1)
            m = noise_masks.get(party)
            m = np.zeros(s.size, dtype=bool) if m is None else np.asarray(m, dtype=bool)
            if m.size != s.size:
                raise TestbedError(
                    f"detection {detector!r}: {s.size} scores for party {party!r} with {m.size} rows"
                )
            rows[party] = detection_metrics(s, m)
            scores.append(s)
            masks.append(m)
        if len(scores) > 1:
            rows["pooled"] = detection_metrics(np.concatenate(scores), np.concatenate(masks))
        out[detector] = rows
    return out


def run_world(
    world: World, progress: bool = False, spill_dir: Path | None = None
) -> tuple[dict, Transcript, float]:
    """Run the protocol on the bus; return (results, transcript, seconds). With ``spill_dir``
    (the run directory) payloads past the transcript's memory threshold go to a file there."""
    sc = world.scenario
    seed = sc.seed
    guard = (
        PrivacyGuard(
            world.protocol.private_arrays(world.parties),
            exempt=world.protocol.exempt_arrays(world.parties),
            rel_tol=sc.guard_rel_tol,
            mode=sc.guard_mode,
        )
        if sc.guard_mode != "off"
        else None
    )
    defs = [
        (dfn, component_rng(seed, "defense", i, dfn.name)) for i, dfn in enumerate(world.defenses)
    ]
    bar = _Progress(progress, sc.name)
    spilling = Transcript(spill_dir=spill_dir) if spill_dir is not None else None
    t0 = time.perf_counter()
    try:
        with open_bus(
            sc.engine,
            sc.engine_params,
            defenses=defs,
            guard=guard,
            ledger=world.ledger,
            on_send=bar,
            parties=world.parties,
            transcript=spilling,
        ) as bus:
            with plugin_phase("protocol", world.protocol.name, "run"):
                result = world.protocol.run(world.parties, bus, component_rng(seed, "protocol"))
    finally:
        bar.close()
        if spilling is not None:
            spilling.close()
    elapsed = time.perf_counter() - t0
    with plugin_phase("protocol", world.protocol.name, "reference"):
        reference = _reference(world.protocol, world.parties)
    # scoring side, like the reference: quantities of the run that need the pooled data
    evaluation = world.protocol.evaluate(result, world.parties)
    scored = {**result.estimates, **evaluation}
    accuracy = {k: _accuracy(scored[k], reference[k]) for k in scored if k in reference}
    detection = score_detection(result.detection, world.noise_masks)
    tr = bus.transcript
    tm = sc.threat_model
    seen = tr.view(tm.observer, tm.colluders).envelopes
    assumptions = []
    for dfn in world.defenses:
        check = getattr(dfn, "assumptions", None)
        if check is not None:  # testbed diagnostic: checked against the data, never sent
            assumptions.extend(
                check(world.parties, sc.protocol.name, world.protocol.config.model_dump())
            )
    from testbed.utility import task_utility

    senders = sorted({e.sender for e in tr} & set(world.parties))
    results = {
        "scenario": sc.name,
        "seed": seed,
        "config_hash": world.config_hash,
        "protocol": {
            "name": sc.protocol.name,
            "mode": result.mode,
            "deviations": list(result.deviations),
            "roles": world.protocol.roles(world.parties),
            "params": world.protocol.config.model_dump(mode="json"),
        },
        "defenses": [
            {"name": d.name, "params": d.config.model_dump(mode="json")} for d in world.defenses
        ],
        "parties": {p: {"rows": d.n, "dim": d.X.shape[1]} for p, d in world.parties.items()},
        "estimates": dict(result.estimates),
        "reference": reference,
        "accuracy": accuracy,
        "history": {k: list(v) for k, v in result.history.items()},
        "outputs": dict(result.outputs),
        "diagnostics": dict(result.diagnostics),
        "detection": detection,
        "transcript": {
            "messages": len(tr),
            "bytes": tr.nbytes,
            "rounds": max((e.round for e in tr), default=0),
            "digest": tr.digest(),
            "guard": "off" if guard is None else guard.mode,
            "by_kind": transcript_summary(tr),
        },
        "observer_view": {
            "observer": tm.observer,
            "colluders": list(tm.colluders),
            "messages": len(seen),
            "bytes": sum(e.nbytes for e in seen),
            "by_kind": transcript_summary(seen),
        },
        "privacy": world.ledger.summary(DELTA),
        # one epsilon axis: the worst claim over the parties that sent anything (inf = no claim)
        "privacy_epsilon": max((world.ledger.epsilon(p, DELTA) for p in senders), default=0.0),
        "utility": task_utility(world.protocol, scored, reference, result.outputs, detection),
        "privacy_assumptions": assumptions,
        **({"evaluation": evaluation} if evaluation else {}),
        "guard": {"mode": "off"} if guard is None else guard.summary(),
    }
    return results, tr, elapsed


def run_scenario(
    sc: Scenario, out_dir: str | Path | None = None, progress: bool = False
) -> RunOutput:
    """Run a validated scenario end to end and write its run directory."""
    from testbed.resources import cell_budget

    with cell_budget(sc):  # limits.cell_seconds, when set
        world = build_world(sc)
        out = Path(out_dir or sc.output.dir or Path("runs") / f"{sc.name}-{world.config_hash[:8]}")
        with run_dir_lock(out, write=True):
            return _write_run(sc, world, out, progress)


def _write_run(sc: Scenario, world: World, out: Path, progress: bool) -> RunOutput:
    atomic_write_bytes(
        out / "resolved.yaml", yaml.safe_dump(world.resolved, sort_keys=True).encode()
    )
    atomic_write_bytes(out / "config_hash", (world.config_hash + "\n").encode())
    results, tr, elapsed = run_world(world, progress=progress, spill_dir=out)
    from testbed.attacking import run_attacks

    evidence: dict = {}  # pictures of leakage for the report (leakage.npz)
    results["attacks"] = run_attacks(world, tr, released=results["estimates"], evidence=evidence)
    from testbed.evidence import write_evidence

    write_evidence(out, evidence)
    if sc.output.save_transcript:
        tr.save(out)
    write_json(out / "run_info.json", {"seconds": elapsed, **package_versions()})
    write_json(out / "results.json", results)  # last: a sweep treats it as "cell finished"
    return RunOutput(out, results, tr, elapsed)
