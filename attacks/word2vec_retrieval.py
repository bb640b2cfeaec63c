"""Word retrieval from shared measures in embedding space (TriangleWad paper, Sec. 5.2, Fig. 3).

When the parties' data are word vectors, every support point a protocol shares can be mapped back
to its nearest vocabulary word with gensim's ``similar_by_vector``. The paper reports that the
top-1 words of FedWAD's :math:`\\xi^{(K)}` match the raw text 69 % of the time, against 4 % for
TriangleWad's :math:`\\eta_\\mu`. The embedding model is public (trained on the public Lee corpus;
its parameters come from ``public.extra["word2vec"]``).

Shared points read (those the observer sent or received): FedWAD's ``fedwad.xi_final``
(:math:`\\xi^{(K)}`); TriangleWad's ``triangle_wad.eta*`` /
``triangle_wad_marketplace.eta_buyer``; FedBary's ``fedbary.final`` (its ``gamma``). The words are
reported once per target party (every party other than the observer), each scored against that
party's document by the text scorer (matching rate, precision@k).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from attacks._base import Attack, AttackConfig, AttackOutput, _targets, observed
from attacks.measure_inversion import _as_measure
from testbed.exchange.bus import PublicInfo, View
from testbed.registry import ATTACKS

__all__ = ["Word2VecRetrieval", "Word2VecRetrievalConfig", "retrieve_words"]


def retrieve_words(points: np.ndarray, wv, topn: int = 10) -> tuple[tuple[str, ...], list]:
    """Top-1 word and the ranked top-``topn`` words for every point (``similar_by_vector``)."""
    top1, ranked = [], []
    for p in np.asarray(points, dtype=np.float32):
        hits = wv.similar_by_vector(p, topn=topn)
        ranked.append(tuple(w for w, _ in hits))
        top1.append(hits[0][0])
    return tuple(top1), ranked


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
        from testbed.data.text import word2vec

        params = public.extra.get("word2vec")
        if params is None:
            return []  # not a text dataset: nothing to retrieve
        shared = None
        for kind in self.config.kinds:
            found = [e for e in observed(view, kind) if _as_measure(e.payload) is not None]
            if found:
                shared = found[-1]
                break
        if shared is None:
            return []
        m = _as_measure(shared.payload)
        wv = word2vec(params)
        if m.d != wv.vector_size:
            return []
        words, ranked = retrieve_words(m.support, wv, self.config.topk)
        targets = _targets(view, public)
        if shared.kind.split(".", 1)[-1].startswith("eta") and shared.sender in targets:
            targets = [shared.sender]  # an eta carries only its sender's data
        return [
            AttackOutput(
                kind="words",
                target=t,
                words=words,
                meta={"ranked": ranked, "source": shared.kind},
            )
            for t in targets
        ]

    def baseline(self, view: View, public: PublicInfo, rng: np.random.Generator):
        """Words nearest to points of the public Gaussian prior (no message used)."""
        from testbed.data.text import word2vec

        params = public.extra.get("word2vec")
        if params is None or public.prior is None:
            return []
        wv = word2vec(params)
        words, ranked = retrieve_words(public.prior, wv, self.config.topk)
        return [
            AttackOutput(kind="words", target=t, words=words, meta={"ranked": ranked})
            for t in _targets(view, public)
        ]
