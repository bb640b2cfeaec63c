"""Audit benchmark (issue 25; ``testbed bench --audit``): the one-run audit beside the many-run
game, the null experiment at scale, miscalibrated defenses, and why the Gaussian defense's claim
on the scenario's own data is not reached.

Sections (each a list of rows in ``audit.json``):

- **one_vs_many**: on a calibrated Gaussian defense, the one-run bound (m canaries, one protocol
  run + one noiseless reference run) and the many-run Clopper–Pearson bound (the same mechanism:
  the party's data with the slots fixed, one more canary, ``trials`` runs per world), both at
  95 %, their ratio and their wall-time ratio, measured side by side;
- **null**: the one-run driver with the canaries never inserted, ``null_runs`` times, and the
  many-run game with ``D' = D``: the share of runs with a bound > 0 (must be <= α = 5 %);
- **miscalibrated**: a defense whose noise is halved (many-run game, the one-row worst-case
  dataset where the claim is tight) and one whose sensitivity is understated (one run): both
  must be reported as violations;
- **sensitivity**: the scenario-sized FedWAD client (20 rows, S = 3, K = 1, z = 1): the change of
  the noiseless released supports when one row is replaced by the canary, against the worst case
  Δ = 2·C·λ·√S the claim charges, and the many-run audit of the one-row dataset where the two
  coincide (ε of the μ-GDP estimate beside the claimed ε).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from testbed.exchange.bus import SERVER, Bus, atomic_write_bytes
from testbed.exchange.ledger import MechanismEvent, PrivacyLedger
from testbed.measure import Measure
from testbed.run.audit import canary_audit
from testbed.run.audit_one_run import canary_directions, one_run_audit
from testbed.run.roster import Roster, build_world
from testbed.scenario.loading import parse_scenario
from testbed.seeding import component_rng

__all__ = ["AuditBenchOptions", "run_audit_bench", "write_audit_bench"]

#: the one-run world: alice holds 10 rows in 64 dimensions; with m canary slots FedWAD's support
#: has one atom per row (S = 10 + m), so the OT plan is a permutation and a canary moves one atom
ONE_RUN_WORLD = """\
name: audit_bench
seed: 0
data:
  dataset:
    name: gaussians
    params: {{d: 64, components: [{{n: 10, mean: 0.0, std: 0.3}}, {{n: 20, mean: 1.0, std: 0.2}}]}}
  partition: {{name: class_subsets, params: {{classes: [[0], [1]]}}}}
  parties: [alice, bob]
protocol: {{name: fedwad, params: {{support_size: {S}, iterations: 1, init_scale: 0.3, trace: false}}}}
defenses: [{{name: gaussian_measure_noise, params: {{clip_norm: 4.0, push_max: {push}, noise_multiplier: {z}}}}}]
"""

#: the docs' audit world (docs/guide/scenarios.md): a 20-row FedWAD client, S = 3, K = 1
DOCS_WORLD = """\
name: audit_docs
seed: 0
data:
  dataset:
    name: gaussians
    params: {{d: 2, components: [{{n: {n}, mean: {mean}, std: {std}}}, {{n: 20, mean: 1.0, std: 0.2}}]}}
  partition: {{name: class_subsets, params: {{classes: [[0], [1]]}}}}
  parties: [alice, bob]
protocol: {{name: fedwad, params: {{support_size: 3, iterations: 1, init_scale: 0.3, trace: false}}}}
defenses: [{{name: gaussian_measure_noise, params: {{clip_norm: 2.0, push_max: 0.5, noise_multiplier: {z}}}}}]
"""


@dataclass
class AuditBenchOptions:
    canaries: int = 256
    trials: int = 200
    z: float = 0.01
    null_runs: int = 200
    null_many_runs: int = 10
    tight_trials: int = 800
    reach_trials: int = 4000  # the one-row dataset's audit against the claim (sensitivity)
    log: Callable[[str], None] = print

    @classmethod
    def quick(cls, **kw) -> AuditBenchOptions:
        return cls(
            **{"null_runs": 40, "null_many_runs": 2, "tight_trials": 400, "reach_trials": 400, **kw}
        )


def _world(text: str):
    return build_world(parse_scenario(text, "audit_bench.yaml", "."))


def _one_run_world(opts: AuditBenchOptions, z: float, push: float = 0.5):
    return _world(ONE_RUN_WORLD.format(S=10 + opts.canaries, z=z, push=push))


def _with_fixed_slots(world, party: str, m: int):
    """The many-run reference's world: the party's data with the one-run's m slots at fixed
    positions (each ±C·u_i, bits drawn once), so both audits see the same mechanism."""
    X = np.asarray(world.parties[party].X, float)
    clip = max(float(getattr(d.config, "clip_norm", 0.0)) for d in world.defenses)
    seed = world.scenario.seed
    U = canary_directions(X, m, component_rng(seed, "audit", "one_run", "directions"))
    bits = component_rng(seed, "audit", "bench", "fixed").random(m) < 0.5
    slots = clip * np.where(bits, 1.0, -1.0)[:, None] * U
    parties = {**world.parties, party: replace(world.parties[party], X=np.vstack([X, slots]))}
    return replace(world, parties=parties)


def one_vs_many(opts: AuditBenchOptions) -> dict:
    """One-run and many-run bounds on the same calibrated Gaussian defense, side by side."""
    world = _one_run_world(opts, opts.z)
    # import opacus (~10 s cold on this machine) outside both timings
    PrivacyLedger(events=[MechanismEvent("a", "gaussian", 1.0)]).epsilon("a", 1e-5)
    t0 = time.perf_counter()
    one = one_run_audit(world, "alice", opts.canaries, observers=[(SERVER,)])[0]
    t_one = time.perf_counter() - t0
    opts.log(f"audit bench: one run, {opts.canaries} canaries: {t_one:.1f} s")
    many_world = _with_fixed_slots(world, "alice", opts.canaries)
    t0 = time.perf_counter()
    many = canary_audit(many_world, "alice", trials=opts.trials)
    t_many = time.perf_counter() - t0
    opts.log(f"audit bench: many runs, {opts.trials} trials per world: {t_many:.1f} s")
    b = one.bound
    return {
        "z": opts.z,
        "canaries": opts.canaries,
        "trials": opts.trials,
        "confidence": b.confidence,
        "epsilon_claimed": one.claimed_epsilon,
        "mu_claimed": one.claimed_mu,
        "one_run_eps": b.epsilon,
        "one_run_mu": b.mu,
        "one_run_eps_gdp": b.epsilon_gdp,
        "one_run_rule": one.row()["rule"],
        "one_run_seconds": t_one,
        "many_run_eps": many.audited_epsilon,
        "many_run_mu": many.mu_lower,
        "many_run_eps_gdp": many.epsilon_gdp,
        "many_run_seconds": t_many,
        "eps_ratio": b.epsilon / many.audited_epsilon if many.audited_epsilon > 0 else math.nan,
        "eps_gdp_ratio": (b.epsilon_gdp / many.epsilon_gdp if many.epsilon_gdp > 0 else math.nan),
        "time_ratio": t_one / t_many,
    }


def null_rates(opts: AuditBenchOptions) -> dict:
    """Share of null runs (canaries never inserted) whose bound is > 0, for both audits."""
    world = _one_run_world(opts, opts.z)
    one_pos, eps_values = 0, []
    for r in range(opts.null_runs):
        row = one_run_audit(world, "alice", 32, observers=[(SERVER,)], null=True, run=r)[0]
        eps_values.append(row.bound.epsilon)
        one_pos += row.bound.epsilon > 0 or row.bound.mu > 0
        if (r + 1) % 20 == 0:
            opts.log(f"audit bench: null one-run {r + 1}/{opts.null_runs}")
    docs = _world(DOCS_WORLD.format(n=20, mean=0.5, std=0.2, z=1.0))
    many_pos = 0
    for r in range(opts.null_many_runs):
        res = canary_audit(docs, "alice", trials=100, null=True, run=r + 1)
        many_pos += res.audited_epsilon > 0 or res.mu_lower > 0
    return {
        "alpha": 0.05,
        "one_run_runs": opts.null_runs,
        "one_run_positive": one_pos,
        "one_run_rate": one_pos / opts.null_runs,
        "one_run_eps_values": eps_values,
        "many_run_runs": opts.null_many_runs,
        "many_run_positive": many_pos,
        "many_run_rate": many_pos / max(1, opts.null_many_runs),
    }


class _HalfNoise:
    """An rng whose normal() draws half the asked-for standard deviation (the ledger still
    records the full sigma): a defense that adds half the noise it claims."""

    def __init__(self, rng):
        self.rng = rng

    def normal(self, loc=0.0, scale=1.0, size=None):
        return self.rng.normal(loc, np.asarray(scale) / 2, size)

    def __getattr__(self, k):
        return getattr(self.rng, k)


def _tight_world(halve: bool):
    w = _world(DOCS_WORLD.format(n=1, mean="[1.4142, 1.4142]", std=1.0e-9, z=1.0))
    if halve:
        d = w.defenses[0]
        send = d.on_send
        object.__setattr__(d, "on_send", lambda env, rng, led: send(env, _HalfNoise(rng), led))
    return w


def miscalibrated(opts: AuditBenchOptions) -> list[dict]:
    """Halved noise (many runs, one-row dataset) and an understated sensitivity (one run)."""
    rows = []
    for halve in (False, True):
        r = canary_audit(_tight_world(halve), "alice", trials=opts.tight_trials)
        rows.append(
            {
                "case": "noise halved" if halve else "honest",
                "audit": f"many runs ({opts.tight_trials} trials per world)",
                "epsilon_claimed": r.claimed_epsilon,
                "mu_claimed": r.claimed_mu,
                "eps_lower": r.audited_epsilon,
                "mu_lower": r.mu_lower,
                "eps_gdp": r.epsilon_gdp,
                "violated": r.violated,
            }
        )
        opts.log(f"audit bench: tight world, {rows[-1]['case']}: violated={r.violated}")
    for push in (0.5, 0.002):
        w = _one_run_world(AuditBenchOptions(canaries=64), 5.0, push)
        one = one_run_audit(w, "alice", 64, observers=[(SERVER,)])[0]
        rows.append(
            {
                "case": "honest" if push == 0.5 else f"sensitivity understated {0.5 / push:g}x",
                "audit": "one run (64 canaries)",
                "epsilon_claimed": one.claimed_epsilon,
                "mu_claimed": one.claimed_mu,
                "eps_lower": one.bound.epsilon,
                "mu_lower": one.bound.mu,
                "eps_gdp": one.bound.epsilon_gdp,
                "violated": one.violated,
            }
        )
    return rows


def _supports(world, parties, party: str) -> list[np.ndarray]:
    """Noiseless supports ``party`` sends to the server (same protocol randomness)."""
    bus = Bus([], parties=parties)
    world.protocol.run(Roster.of(parties), bus, component_rng(world.scenario.seed, "sens"))
    return [
        e.payload.support
        for e in bus.transcript
        if e.sender == party and e.receiver == SERVER and isinstance(e.payload, Measure)
    ]


def sensitivity(opts: AuditBenchOptions) -> dict:
    """Measured sensitivity of the released supports to one row vs the claim's worst case, on
    the docs' 20-row client; and the one-row dataset where they coincide."""
    from testbed.run.audit import _canary

    w = _world(DOCS_WORLD.format(n=20, mean=0.5, std=0.2, z=1.0))
    d = w.defenses[0]
    X = np.asarray(w.parties["alice"].X, float)
    canary, _, _ = _canary(X, d.config.clip_norm)
    base = _supports(w, w.parties, "alice")
    worst = 0.0
    for row in range(len(X)):  # every row replaced by the canary: the largest change measured
        X1 = X.copy()
        X1[row] = canary
        moved = _supports(w, {**w.parties, "alice": replace(w.parties["alice"], X=X1)}, "alice")
        worst = max(worst, max(float(np.linalg.norm(a - b)) for a, b in zip(base, moved)))
    claimed = d.support_sensitivity(base[0].shape[0])
    tight = canary_audit(_tight_world(False), "alice", trials=opts.reach_trials)
    return {
        "rows": int(len(X)),
        "atoms": int(base[0].shape[0]),
        "measured_sensitivity": worst,
        "claimed_sensitivity": claimed,
        "ratio": worst / claimed,
        "tight_epsilon_claimed": tight.claimed_epsilon,
        "tight_mu_claimed": tight.claimed_mu,
        "tight_mu_lower": tight.mu_lower,
        "tight_eps_gdp": tight.epsilon_gdp,
        "tight_eps_lower_cp": tight.audited_epsilon,
        "tight_trials": opts.reach_trials,
    }


#: the scenario whose default ``testbed audit`` is timed: the README's first example (FedWAD,
#: 200 rows per client in 2-D, S = 20, K = 20, Gaussian defense), one cell
DEFAULT_AUDIT_SCENARIO = (
    Path(__file__).resolve().parents[1] / "scenarios" / "first_audit_curve.yaml"
)


def default_audit(opts: AuditBenchOptions) -> dict:
    """The default ``testbed audit`` (both scopes, every party) of one defended scenario, timed
    end to end as a command, with its verdicts."""
    import subprocess
    import sys
    import tempfile

    import yaml

    sc = yaml.safe_load(DEFAULT_AUDIT_SCENARIO.read_text())
    sc.pop("sweep", None)
    sc.pop("seeds", None)
    sc["seed"] = 0
    sc["defenses"][0]["params"]["noise_multiplier"] = 1.0
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "one_cell.yaml"
        f.write_text(yaml.safe_dump(sc))
        cmd = [sys.executable, "-m", "testbed", "audit", str(f), "--json", "--no-reconstruction"]
        t0 = time.perf_counter()  # as a user runs it: the command's start-up included
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - t0
    rc = done.returncode
    buf = done.stdout
    verdicts = json.loads(buf) if rc == 0 else []
    opts.log(f"default audit of {DEFAULT_AUDIT_SCENARIO.name} (one cell, z = 1): {seconds:.1f} s")
    return {
        "scenario": DEFAULT_AUDIT_SCENARIO.name,
        "cell": "seed 0, noise_multiplier 1",
        "seconds": seconds,
        "exit_code": rc,
        "verdicts": verdicts,
    }


def run_audit_bench(opts: AuditBenchOptions) -> dict:
    out = {"default_audit": default_audit(opts)}
    out["one_vs_many"] = one_vs_many(opts)
    out["miscalibrated"] = miscalibrated(opts)
    out["sensitivity"] = sensitivity(opts)
    out["null"] = null_rates(opts)
    return out


def write_audit_bench(res: dict, out_dir, command: str = "") -> list[Path]:
    """``audit.json`` (atomically) and the null experiment's figure ``audit_null.png``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "audit.json"
    atomic_write_bytes(
        path, (json.dumps({"command": command, **res}, indent=2, default=float) + "\n").encode()
    )
    paths = [path]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    null = res["null"]
    fig, ax = plt.subplots(figsize=(5, 3))
    vals = np.asarray(null["one_run_eps_values"])
    ax.hist(vals, bins=20, color="#4477aa")
    ax.set_xlabel("one-run ε̂ with the canaries never inserted")
    ax.set_ylabel("runs")
    ax.set_title(
        f"null: ε̂ > 0 in {null['one_run_positive']} of {null['one_run_runs']} runs (α = 5 %)",
        fontsize=9,
    )
    fig.tight_layout()
    png = out / "audit_null.png"
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return [*paths, png]
