"""Membership inference against ``fedwad_coreset`` with the test party's rows as non-members.

Every digits row of the shipped scenario belongs to a client or to the held-out ``test`` party, so
the non-members of client c are ``test`` rows of c's classes (same distribution, never sent):
candidates = up to ``--k`` rows of c and as many such test rows. ``reconstruction_membership``
wrapping ``coreset_inversion`` scores them (server, then a curious client). Prints mean ROC-AUC and
advantage over the clients (``testbed.scoring.metrics.membership_metrics``).

    python scripts/coreset_membership.py scenarios/fedwad_coreset_digits.yaml [--k 40]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import numpy as np


def membership(scenario, k: int = 40, observers=("server", "c00")) -> dict[str, float]:
    """``{observer}.auc``, ``{observer}.advantage`` (means over the clients) and
    ``{observer}.targets`` of ``reconstruction_membership`` wrapping ``coreset_inversion``."""
    from attacks import ReconstructionMembership
    from testbed.run.execute import run_and_evaluate
    from testbed.run.roster import build_world
    from testbed.scenario.loading import load_scenario
    from testbed.scoring.metrics import membership_metrics

    world = build_world(load_scenario(scenario))
    _out = run_and_evaluate(world)
    results, tr = _out.results, _out.transcript
    test = world.parties.get("test")
    if test is None or test.y is None:
        raise SystemExit("error: the scenario needs a labelled `test` party")
    rng = np.random.default_rng(0)
    cand, truth = {}, {}
    for name, d in world.parties.items():
        if name == "test":
            continue
        pool = np.flatnonzero(np.isin(test.y, np.unique(d.y)))
        n = min(k, d.n, pool.size)
        mem = d.X[rng.choice(d.n, n, replace=False)]
        non = test.X[rng.choice(pool, n, replace=False)]
        cand[name] = np.vstack([mem, non])
        truth[name] = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    public = replace(
        world.public,
        extra={**world.public.extra, "candidates": cand, "released": results["estimates"]},
    )
    own = {p: v.X for p, v in world.parties.items()}
    att = ReconstructionMembership(
        ReconstructionMembership.Config(reconstruction="coreset_inversion")
    )
    out: dict[str, float] = {}
    for observer in observers:
        view = tr.view(observer, own_data=own, public=public)
        rows = [
            membership_metrics(o.scores, truth[o.target])
            for o in att.run(view, public, np.random.default_rng(1))
        ]
        out[f"{observer}.targets"] = float(len(rows))
        if rows:
            out[f"{observer}.auc"] = float(np.mean([r["auc"] for r in rows]))
            out[f"{observer}.advantage"] = float(np.mean([r["advantage"] for r in rows]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--k", type=int, default=40)
    ap.add_argument("--observers", default="server,c00")
    args = ap.parse_args(argv)
    observers = args.observers.split(",")
    out = membership(args.scenario, args.k, observers)
    for observer in observers:
        n = int(out[f"{observer}.targets"])
        if not n:
            print(f"{observer}: no output")
            continue
        auc, adv = out[f"{observer}.auc"], out[f"{observer}.advantage"]
        print(f"observer {observer}: {n} targets, mean AUC {auc:.3f}, advantage {adv:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
