"""docs/guide/plugins.md: declared tolerances and scorecards."""

from __future__ import annotations

import sys

import numpy as np

from .common import ROOT


def plugins_tolerances() -> dict[str, float]:
    """docs/guide/plugins.md, "Declared tolerances" (``python scripts/protocol_tolerances.py --seeds
    20``): per protocol and compared key the largest and the median relative error over seeds
    0-19 of its contract scenario (``<protocol>.<key>.{max,median,seeds}``)."""
    import statistics

    from testbed.registry import PROTOCOLS

    mod = _tolerances_module()
    out = {}
    for name in PROTOCOLS.names():
        for k, v in mod.errors(name, 20).items():
            out[f"{name}.{k}.max"], out[f"{name}.{k}.median"] = max(v), statistics.median(v)
            out[f"{name}.{k}.seeds"] = float(len(v))
    return out


def _threat_kind(label: str, parties: list[str], clients: list[str]) -> str:
    if label in ("server", "eavesdropper"):
        return label
    if label in parties:
        return "client" if label in clients else "party"
    return "server_coalition" if label.startswith("server+") else "client_coalition"


def scorecards_fedwad_apps() -> dict[str, float]:
    """docs/guide/plugins.md, "Scorecards of the two FedWAD applications" (``testbed scorecard
    fedwad_coreset`` / ``fedwad_clustered_fl``: contract scenarios, seed 7): per accuracy key its
    estimate, exact value, relative error and tolerance; per kind of threat model (server,
    client, party = a non-client party, eavesdropper, server_coalition, client_coalition) the
    near-copy messages, the worst attack's value (``worst.<kind>.{min,max}`` over the threat
    models of that kind) and how many threat models each attack is the worst of
    (``worst_attack.<attack>``), and per attack and headline metric the range over threat
    models and targets (``<kind>.<attack>.<metric>.{min,max}``)."""
    import tempfile

    from testbed.plugins.scorecard import _scenario, scorecard
    from testbed.run.roster import build_world

    out: dict[str, float] = {}
    for name in ("fedwad_coreset", "fedwad_clustered_fl"):
        with tempfile.TemporaryDirectory(prefix="docs-scorecard-") as tmp:
            card = scorecard(name, tmp)
        for k, a in card.accuracy.items():
            for f in ("estimate", "exact", "relative_error", "tolerance"):
                if isinstance(a.get(f), (int, float)):
                    out[f"{name}.{k}.{f}"] = float(a[f])
        world = build_world(_scenario(name))
        parties = list(world.parties)
        roles = world.protocol.roles(world.parties)
        clients = [p for p in parties if "client" in roles.get(p, "")]
        kinds = {t["label"]: _threat_kind(t["label"], parties, clients) for t in card.threats}
        out[f"{name}.threats"] = float(len(kinds))
        for label, w in card.worst().items():
            kind = kinds[label]
            key = f"{name}.near_copies.{kind}"
            out[key] = out.get(key, 0.0) + w["near_copy_messages"]
            if w["value"] is None:
                continue
            key = f"{name}.worst_attack.{w['attack']}"
            out[key] = out.get(key, 0.0) + 1
            lo, hi = f"{name}.worst.{kind}.min", f"{name}.worst.{kind}.max"
            out[lo] = min(out.get(lo, np.inf), w["value"])
            out[hi] = max(out.get(hi, -np.inf), w["value"])
        for r in card.attacks:
            if r["value"] is None:
                continue
            key = f"{name}.{kinds[r['threat']]}.{r['attack']}.{r['metric']}"
            out[f"{key}.min"] = min(out.get(f"{key}.min", np.inf), r["value"])
            out[f"{key}.max"] = max(out.get(f"{key}.max", -np.inf), r["value"])
    return out


def _tolerances_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "protocol_tolerances", ROOT / "scripts" / "protocol_tolerances.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def plugins_loose_tolerances() -> dict[str, float]:
    """docs/guide/plugins.md, the paragraph after "Declared tolerances" (contract scenarios, seeds
    0-19): per key the ``dp_jl_ot`` seeds clamped to relative error 1, its largest error without noise
    (``noise_multiplier: 0``); ``fedwad_coreset``'s largest federated / central coreset W2; the
    scaffolded example's (``testbed new-protocol``) largest error."""
    import importlib
    import tempfile

    import yaml

    from testbed.plugins.scaffold import new_protocol
    from testbed.registry import PROTOCOLS
    from testbed.scenario.loading import parse_scenario
    from testbed.testing.protocol_checks import _run, protocol_scenario

    mod = _tolerances_module()
    out: dict[str, float] = {}
    for k, v in mod.errors("dp_jl_ot", 20).items():
        out[f"dp_jl_ot.{k}.clamped_seeds"] = float(sum(e >= 1 - 1e-12 for e in v))
    base = protocol_scenario(PROTOCOLS.get("dp_jl_ot"))
    noiseless = []
    ratios = []
    core = protocol_scenario(PROTOCOLS.get("fedwad_coreset"))
    for seed in range(20):
        raw = {**base._raw, "seed": seed}
        raw["protocol"] = {
            **raw["protocol"],
            "params": {**raw["protocol"]["params"], "noise_multiplier": 0.0},
        }
        run = _run(parse_scenario(yaml.safe_dump(raw), base._fname, base._base_dir))
        noiseless += [a["relative_error"] for a in run.results["accuracy"].values()]
        raw = {**core._raw, "seed": seed}
        run = _run(parse_scenario(yaml.safe_dump(raw), core._fname, core._base_dir))
        a = run.results["accuracy"]["coreset_wasserstein"]
        ratios.append(a["estimate"] / a["exact"])
    out["dp_jl_ot.noiseless.max"] = max(noiseless)
    out["fedwad_coreset.ratio.max"] = max(ratios)
    name = "docs_anchor_sketch"
    with tempfile.TemporaryDirectory(prefix="docs-scaffold-") as tmp:
        root = f"{tmp}/{name}"
        new_protocol(name, root)
        src = f"{root}/src"  # scaffolds use a src layout
        sys.path.insert(0, src)
        try:
            cls = importlib.import_module(f"{name}.protocol").DocsAnchorSketch
            PROTOCOLS.register(cls)
            errs = mod.errors(name, 20)
        finally:
            PROTOCOLS._items.pop(name, None)
            PROTOCOLS._origins.pop(name, None)
            sys.path.remove(src)
            for m in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[m]
    out["scaffold.max"] = max(max(v) for v in errs.values())
    return out


def scorecard_toy() -> dict[str, float]:
    """docs/guide/plugins.md, "The scorecard": ``testbed scorecard toy_leaky_mean`` (the leaky toy of
    ``tests/_toy_protocols.py``, registered for the call): per threat model the messages with
    near-copies of private rows (``<label>.near_copies``) and whose rows
    (``<label>.rows_of.<party>`` = 1); per target, ``sent_rows``'s exact recovery and recovered
    rate and rows under each threat model
    (``<label>.sent_rows.<target>.{exact_recovery,exact_rows}``)."""
    import tempfile

    root = str(ROOT)
    if root not in sys.path:
        sys.path.insert(0, root)
    from testbed.plugins.scorecard import _scenario, scorecard
    from testbed.run.roster import build_world
    from tests._toy_protocols import LeakyMean, registered

    out: dict[str, float] = {}
    with registered(LeakyMean), tempfile.TemporaryDirectory(prefix="docs-toy-card-") as tmp:
        card = scorecard("toy_leaky_mean", tmp)
        sizes = {p: d.n for p, d in build_world(_scenario("toy_leaky_mean")).parties.items()}
    for label, w in card.worst().items():
        out[f"{label}.near_copies"] = float(w["near_copy_messages"])
        for p in w["rows_of"]:
            out[f"{label}.rows_of.{p}"] = 1.0
    for r in card.attacks:
        if r["attack"] == "sent_rows" and "exact_recovery" in r["metrics"]:
            key = f"{r['threat']}.sent_rows.{r['target']}"
            out[f"{key}.exact_recovery"] = float(r["metrics"]["exact_recovery"])
            out[f"{key}.exact_rows"] = round(r["metrics"]["exact_recovery"] * sizes[r["target"]])
    return out
