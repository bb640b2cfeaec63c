"""Word retrieval from shared measures in embedding space (TriangleWad paper, Sec. 5.2, Fig. 3).

When the parties' data are word vectors, every support point a protocol shares can be mapped back
to its nearest vocabulary word with gensim's ``similar_by_vector``. The paper reports that the
top-1 words of FedWAD's :math:`\\xi^{(K)}` match the raw text 69 % of the time, against 4 % for
TriangleWad's :math:`\\eta_\\mu`. The embedding model is public (trained on the public Lee corpus;
its parameters come from ``public.extra["word2vec"]``), or, for your own text
(``text_documents``), the vectors you gave, which arrive in ``public.extra["word_vectors"]``.

Shared points read (those the observer sent or received): FedWAD's ``fedwad.xi_final``
(:math:`\\xi^{(K)}`); TriangleWad's ``triangle_wad.eta*`` /
``triangle_wad_marketplace.eta_buyer``; FedBary's ``fedbary.final`` (its ``gamma``). The words are
reported once per target party (every party other than the observer and its colluders), each
scored against that party's document by the text scorer (matching rate, precision@k): every
party's eta is attacked for that party (an eta carries only its sender's data), a measure that
mixes every party's data (xi, gamma) for each of them.

Chained (``input:`` in the scenario, docs/reference/attacks.md): it retrieves the words of the upstream
attack's reconstruction of each party instead (``view.upstream``, e.g. ``measure_inversion``'s
inverted eta), one output per party that reconstruction covers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from attacks._base import Attack, AttackConfig, AttackOutput, _targets, observed
from attacks.measure_inversion import _as_measure
from testbed.data.text import keyed_vectors
from testbed.exchange.bus import PublicInfo, View
from testbed.measure import Measure
from testbed.registry import ATTACKS

__all__ = ["Word2VecRetrieval", "Word2VecRetrievalConfig", "retrieve_words", "shared_points"]


def retrieve_words(points: np.ndarray, wv, topn: int = 10) -> tuple[tuple[str, ...], list]:
    """Top-1 word and the ranked top-``topn`` words for every point (``similar_by_vector``)."""
    top1, ranked = [], []
    for p in np.asarray(points, dtype=np.float32):
        hits = wv.similar_by_vector(p, topn=topn)
        ranked.append(tuple(w for w, _ in hits))
        top1.append(hits[0][0])
    return tuple(top1), ranked


def shared_points(view: View, kinds, targets) -> dict[str, tuple[str, Measure]]:
    """target -> ``(kind, measure)``: for each target party, the last Measure of the first of
    ``kinds`` (globs, in order) that carries its data. An ``eta`` (a push of its *sender's* data)
    carries only its sender's, so every party's eta is attacked for that party, and an eta of the
    observer or a colluder for none; any other shared measure (FedWAD's xi, FedBary's gamma)
    mixes every party's data and stands for each target."""
    out: dict[str, tuple[str, str, Measure]] = {}  # target -> (glob, kind, measure)
    for glob in kinds:
        for e in observed(view, glob):
            m = _as_measure(e.payload)
            if m is None:
                continue
            if e.kind.split(".", 1)[-1].startswith("eta"):
                whose = [e.sender] if e.sender in targets else []
            else:
                whose = targets
            for t in whose:
                if out.get(t, (glob,))[0] == glob:  # a later envelope of the same glob wins
                    out[t] = (glob, e.kind, m)
    return {t: (kind, m) for t, (_, kind, m) in out.items()}


class Word2VecRetrievalConfig(AttackConfig):
    kinds: list[str] = Field(
        default_factory=lambda: [
            "fedwad.xi_final",
            "triangle_wad.eta*",
            "triangle_wad_marketplace.eta_buyer",
            "fedbary.final",
        ],
        description="message kinds (globs) whose Measure payloads are the shared points",
    )
    topk: int = Field(10, gt=0, description="ranked words kept per point (precision@k)")


@ATTACKS.register
class Word2VecRetrieval(Attack):
    """Nearest Word2Vec words of every shared support point (paper Sec. 5.2, matching rate)."""

    name = "word2vec_retrieval"
    Config = Word2VecRetrievalConfig
    protocols = ("fedwad", "triangle_wad", "triangle_wad_marketplace", "fedbary")
    output_kinds = ("words",)
    contract_scenario = "contract_tiny_words.yaml"

    def run(self, view: View, public: PublicInfo, rng: np.random.Generator):
        wv = keyed_vectors(public.extra)
        if wv is None:
            return []  # not a text dataset: nothing to retrieve
        out = []
        for target, points, source in self._sources(view, public, wv.vector_size):
            words, ranked = retrieve_words(points, wv, self.config.topk)
            out.append(
                AttackOutput(
                    kind="words",
                    target=target,
                    words=words,
                    meta={"ranked": ranked, "source": source},
                )
            )
        return out

    def _sources(self, view: View, public: PublicInfo, dim: int) -> list[tuple[str, Any, str]]:
        """``(target, points, source)``, one per target party: the points of the upstream
        attack's reconstruction of it when chained (``input:``), else the shared points that
        carry its data."""
        targets = _targets(view, public)
        if view.upstream:
            got: dict[str, tuple[str, Any, str]] = {}
            for o in view.upstream:
                pts = getattr(o, "points", None)
                if o.kind == "points" and o.target in targets and pts is not None:
                    if np.ndim(pts) == 2 and np.shape(pts)[1] == dim and o.target not in got:
                        got[o.target] = (o.target, pts, "input")
            return [got[t] for t in targets if t in got]
        return [
            (t, m.support, kind)
            for t, (kind, m) in shared_points(view, self.config.kinds, targets).items()
            if m.d == dim
        ]

    def baseline(self, view: View, public: PublicInfo, rng: np.random.Generator):
        """Words nearest to points of the public Gaussian prior (no message used)."""
        wv = keyed_vectors(public.extra) if public.prior is not None else None
        if wv is None:
            return []
        words, ranked = retrieve_words(public.prior, wv, self.config.topk)
        return [
            AttackOutput(kind="words", target=t, words=words, meta={"ranked": ranked})
            for t in _targets(view, public)
        ]
