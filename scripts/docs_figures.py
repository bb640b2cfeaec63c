"""Regenerate the figures that README.md and docs/ quote, so they are computed, not typed.

``python scripts/docs_figures.py [NAME ...]`` prints each figure (all when no name is given) as
``NAME value`` lines. ``python scripts/docs_figures.py --write [NAME ...]`` recomputes them and
writes docs/findings/figures.json (each quoted figure's value, printed form and quote; see
``docfigs/figures_file.py``) and lists the quotes the docs must now print. ``make docs-check``
runs ``tests/test_docs_figures.py`` (slow), which recomputes each figure of figures.json and
compares it with the printed one within its tolerance (the rounding of the printed figure, or
the 95 % interval over seeds); the default test suite checks that the docs print each quote.

The frontier sweeps take tens of minutes on 2 cores; ``DOCS_FIGURES_SWEEPS=DIR`` keeps their run
directories in ``DIR/<scenario>`` and resumes them, so a rerun after a docs edit recomputes only
cells that are not finished there (use a fresh DIR after a code change).

Every figure is deterministic for its seed: data are scikit-learn's digits (no download) and the
Lee corpus that ships with gensim, Word2Vec is trained with a fixed seed and one worker.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the docfigs package beside this file
sys.path.append(str(Path(__file__).resolve().parents[1]))  # bench/: the checkout's, not installed

from docfigs import (  # noqa: E402
    applications,
    attacks,
    distill,
    figures_file,
    frontier,
    plugins,
    protocols,
    scenarios,
    trust,
)

FEDBARY = protocols.FEDBARY
CLIENTS = protocols.CLIENTS
distill_figures = distill.distill_figures

#: every figure by name, in the order ``python scripts/docs_figures.py`` prints them
FIGURES: dict[str, Callable[[], dict[str, float]]] = {
    "frontier_fedbary": frontier.frontier_fedbary,
    "xi_words": attacks.xi_words,
    "triangle_attacks": attacks.triangle_attacks,
    "fedbary_barycenter": protocols.fedbary_barycenter,
    "fedwad_clustering_settings": protocols.fedwad_clustering_settings,
    "fedwad_toy_attack": attacks.fedwad_toy_attack,
    "fedwad_modes": protocols.fedwad_modes,
    "triangle_scenarios": protocols.triangle_scenarios,
    "audit_canary": scenarios.audit_canary,
    "distill_diabetes": distill.distill_diabetes,
    "distill_sentiment": distill.distill_sentiment,
    "distill_privacy": distill.distill_privacy,
    "fedbary_tables": protocols.fedbary_tables,
    "fedbary_seeds": protocols.fedbary_seeds,
    "personalized_coreset": applications.personalized_coreset,
    "personalized_clustered": applications.personalized_clustered,
    "eta_words": attacks.eta_words,
    "eta_inversion": attacks.eta_inversion,
    "triangle_bias": protocols.triangle_bias,
    "frontier_main": frontier.frontier_main,
    "frontier_matrix": frontier.frontier_matrix,
    "mask_in_domain": frontier.mask_in_domain,
    "fedwad_applications_attacks": applications.fedwad_applications_attacks,
    "fedbary_duplication": protocols.fedbary_duplication,
    "fedwad_toy_starts": attacks.fedwad_toy_starts,
    "trust_renormalise": trust.trust_renormalise,
    "plugins_tolerances": plugins.plugins_tolerances,
    "coverage_cells": frontier.coverage_cells,
    "frontier_dp": frontier.frontier_dp,
    "scorecards_fedwad_apps": plugins.scorecards_fedwad_apps,
    "plugins_loose_tolerances": plugins.plugins_loose_tolerances,
    "scorecard_toy": plugins.scorecard_toy,
}


def write(values: dict[str, dict[str, float]]) -> list[str]:
    """figures.json with each figure of these generators recomputed; the quotes that changed."""
    figures = figures_file.load()
    changed = []
    for name, f in figures.items():
        if f["generator"] in values:
            figures[name] = figures_file.rewrite(f, values[f["generator"]])
            if figures[name]["quote"] != f["quote"]:
                changed.append(f"{f['doc']}: {f['quote']!r} -> {figures[name]['quote']!r}")
    figures_file.save(figures)
    return changed


def main(argv: list[str]) -> int:
    writing = "--write" in argv
    argv = [a for a in argv if a != "--write"]
    names = argv or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        print(
            f"docs_figures: unknown figure {unknown[0]!r}; known: {', '.join(FIGURES)}",
            file=sys.stderr,
        )
        return 2
    from testbed.threads import limit_blas_threads

    # as `testbed` and the test suite do: BLAS single-threaded, so the figures are the same
    # bits from this script and from `make docs-check` (a 2-thread OpenBLAS sums in another
    # order: FedBary's duplication figures moved in their last digits)
    limit_blas_threads()
    values = {}
    for n in names:
        values[n] = FIGURES[n]()
        for k, v in values[n].items():
            print(f"{k} {v:.6g}")
    if writing:
        changed = write(values)
        print(f"wrote {figures_file.PATH.relative_to(figures_file.ROOT)}", file=sys.stderr)
        for line in changed:  # the prose must follow: tests/test_figures_file.py fails until then
            print(f"now printed: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
