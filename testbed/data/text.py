"""Text data that ships offline: gensim's Lee background corpus (300 news documents) and a
Word2Vec model trained on it, deterministically (seeded, one worker, a fixed hash function) and
cached on disk under a key derived from the training parameters.

The ``lee_documents`` dataset gives each party one document as a point cloud: the word vectors
of its distinct in-vocabulary, non-stop words (label = the document's position in ``documents``).
The tokens behind every row are ground truth for the text scorer (``meta["tokens"]``); the
Word2Vec parameters are public (``meta["public"]["word2vec"]``): the embedding model is trained
on a public corpus, so an attacker has it too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import zlib
from pathlib import Path

import numpy as np
from pydantic import Field

from testbed.data.datasets import Dataset, DatasetPlugin
from testbed.errors import DataError
from testbed.registry import DATASETS, PluginConfig

__all__ = [
    "LeeDocuments",
    "LeeDocumentsConfig",
    "Word2VecParams",
    "cache_dir",
    "keyed_vectors",
    "train_word2vec",
    "lee_corpus",
    "word2vec",
]


class Word2VecParams(PluginConfig):
    vector_size: int = Field(50, gt=0)
    window: int = Field(5, gt=0)
    min_count: int = Field(2, gt=0)
    epochs: int = Field(20, gt=0)
    seed: int = Field(1, ge=0)


def cache_dir() -> Path:
    """``$OT_TESTBED_CACHE`` or ``~/.cache/ot_testbed``."""
    root = os.environ.get("OT_TESTBED_CACHE") or Path.home() / ".cache" / "ot_testbed"
    return Path(root)


def _stable_hash(s: str) -> int:
    # gensim seeds each word vector with hashfxn(word + str(seed)); Python's hash() changes
    # between processes (PYTHONHASHSEED), so use CRC32 for byte-identical models
    return zlib.crc32(s.encode())


@functools.lru_cache(maxsize=1)
def lee_corpus() -> tuple[tuple[str, ...], ...]:
    """The Lee background corpus, tokenised with gensim's ``simple_preprocess``."""
    from gensim.test.utils import datapath  # gensim: word data only
    from gensim.utils import simple_preprocess  # gensim: word data only

    with open(datapath("lee_background.cor"), encoding="utf-8", errors="replace") as f:
        return tuple(tuple(simple_preprocess(line)) for line in f)


def _cache_path(key: str) -> Path:
    """Where the model for ``key`` is cached: named by its parameters and by gensim's version,
    since the vectors depend on gensim's training code too (a model an older install left in the
    cache gave figures a fresh machine did not reproduce: docs/findings/findings.md)."""
    import gensim  # gensim: word data only

    digest = hashlib.sha256(f"{key} gensim {gensim.__version__}".encode()).hexdigest()[:16]
    return cache_dir() / "word2vec" / f"lee-{digest}.kv"


@functools.lru_cache(maxsize=4)
def _word2vec(key: str):
    from gensim.models import KeyedVectors  # gensim: word data only

    params = Word2VecParams(**json.loads(key))
    path = _cache_path(key)
    if path.exists():
        return KeyedVectors.load(str(path))
    wv = train_word2vec(lee_corpus(), params)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    wv.save(str(tmp))
    os.replace(tmp, path)
    return wv


def train_word2vec(docs, params: Word2VecParams | dict | None = None):
    """gensim KeyedVectors of a Word2Vec trained on ``docs`` (token sequences), reproducibly:
    seeded, one worker, a fixed hash function."""
    from gensim.models import Word2Vec  # gensim: word data only

    p = params if isinstance(params, Word2VecParams) else Word2VecParams(**(params or {}))
    model = Word2Vec(
        [list(d) for d in docs],
        vector_size=p.vector_size,
        window=p.window,
        min_count=p.min_count,
        epochs=p.epochs,
        seed=p.seed,
        workers=1,
        hashfxn=_stable_hash,
    )
    return model.wv


def keyed_vectors(public_extra):
    """The public embedding of a text dataset, from ``PublicInfo.extra``: the vectors it carries
    (``word_vectors``: your own, :mod:`testbed.data.own_text`) or the Lee Word2Vec its
    parameters name (``word2vec``); None for a dataset that is not text."""
    own = public_extra.get("word_vectors")
    if own is not None:
        from gensim.models import KeyedVectors  # gensim: word data only

        vectors = np.asarray(own["vectors"], dtype=np.float32)
        kv = KeyedVectors(vector_size=vectors.shape[1], count=0, dtype=np.float32)
        kv.add_vectors(list(own["words"]), vectors)
        return kv
    params = public_extra.get("word2vec")
    return None if params is None else word2vec(params)


def word2vec(params: Word2VecParams | dict | None = None):
    """gensim KeyedVectors trained on the Lee corpus with ``params`` (cached in memory and disk)."""
    p = params if isinstance(params, Word2VecParams) else Word2VecParams(**(params or {}))
    return _word2vec(json.dumps(p.model_dump(), sort_keys=True))


def document_words(doc: tuple[str, ...], wv) -> list[str]:
    """Distinct in-vocabulary non-stop words of a document, in order of first appearance."""
    from gensim.parsing.preprocessing import STOPWORDS  # gensim: word data only

    seen: dict[str, None] = {}
    for w in doc:
        if w not in STOPWORDS and w in wv.key_to_index and len(w) > 1:
            seen.setdefault(w, None)
    return list(seen)


class LeeDocumentsConfig(PluginConfig):
    documents: list[int] = Field(
        default_factory=lambda: [0, 1],
        description="indices (0-299) of Lee background documents; label k = k-th listed",
    )
    word2vec: Word2VecParams = Field(default_factory=Word2VecParams)


@DATASETS.register
class LeeDocuments(DatasetPlugin):
    """Lee corpus documents as point clouds of Word2Vec vectors (one document per label)."""

    name = "lee_documents"
    Config = LeeDocumentsConfig

    def load(self, rng):
        corpus = lee_corpus()
        wv = word2vec(self.config.word2vec)
        rows, labels, tokens = [], [], []
        for k, i in enumerate(self.config.documents):
            if not 0 <= i < len(corpus):
                raise DataError(f"lee_documents: document {i} out of range 0..{len(corpus) - 1}")
            words = document_words(corpus[i], wv)
            if len(words) < 2:
                raise DataError(f"lee_documents: document {i} has fewer than 2 usable words")
            rows.append(np.stack([wv[w] for w in words]).astype(np.float64))
            labels.append(np.full(len(words), k))
            tokens.extend(words)
        return Dataset(
            np.vstack(rows),
            np.concatenate(labels),
            "lee_documents",
            {
                "tokens": tuple(tokens),
                "public": {"word2vec": self.config.word2vec.model_dump()},
            },
        )
