"""Your own text: a corpus file (or folder) and, optionally, pretrained word vectors from disk.

The ``text_documents`` dataset gives each party one document of the corpus as a point cloud,
as ``lee_documents`` does for the Lee corpus: the vectors of its distinct in-vocabulary,
non-stop words (label = the document's position in ``documents``). The corpus is a UTF-8 file
with one document per line (blank lines skipped) or a folder of ``.txt`` files, one document
each (in name order), tokenised with gensim's ``simple_preprocess``. The vectors are
``vectors:`` (the word2vec text or binary format of ``KeyedVectors.load_word2vec_format``, or a
file written by ``KeyedVectors.save``), else a Word2Vec trained on the corpus itself (seeded,
one worker, as for Lee). Nothing is downloaded.

The embedding is public, like the Lee model: the vocabulary and its vectors travel to the
attacks in ``PublicInfo.extra["word_vectors"]`` (an attack's process cannot read the user's
files). ``testbed validate`` checks the paths and the vectors file's format without gensim
(the header, and the first records); the run loads the file with gensim and names the file on
any error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from testbed.data.datasets import Dataset, DatasetPlugin
from testbed.data.text import Word2VecParams, document_words, train_word2vec
from testbed.errors import DataError
from testbed.registry import DATASETS, PluginConfig

__all__ = ["TextDocuments", "TextDocumentsConfig", "corpus_documents", "vectors_format"]

VectorsFormat = Literal["auto", "word2vec_text", "word2vec_binary", "keyed_vectors"]

#: records of a word2vec file ``testbed validate`` reads (the run's gensim load reads them all)
_CHECKED_RECORDS = 1000
_HEADER = re.compile(rb"^\s*(\d+)\s+(\d+)\s*$")


def _resolve(v: str, info: ValidationInfo) -> Path:
    p = Path(v).expanduser()
    if not p.is_absolute():
        p = Path((info.context or {}).get("base_dir", ".")) / p
    return p


def corpus_documents(path: str | Path) -> list[str]:
    """The corpus's documents as raw text: the non-blank lines of a file, or the ``.txt`` files
    of a folder in name order."""
    p = Path(path)
    try:
        if p.is_dir():
            return [f.read_text(encoding="utf-8") for f in sorted(p.glob("*.txt")) if f.is_file()]
        return [line for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def _check_text_records(f, dim: int, count: int) -> None:
    for k in range(min(count, _CHECKED_RECORDS)):
        raw = f.readline()
        if not raw:
            raise ValueError(f"ends after {k} of the {count} words its header announces")
        try:
            fields = raw.decode("utf-8").rstrip().split(" ")
        except UnicodeDecodeError:
            raise ValueError(f"line {k + 2} is not UTF-8 text") from None
        if len(fields) != dim + 1:
            raise ValueError(
                f"line {k + 2} has {len(fields) - 1} numbers after its word, the header says {dim}"
            )
        try:
            [float(x) for x in fields[1:]]
        except ValueError:
            raise ValueError(f"line {k + 2} holds a value that is not a number") from None


def _check_binary_records(f, dim: int, count: int) -> None:
    for k in range(min(count, _CHECKED_RECORDS)):
        word = b""
        while (c := f.read(1)) != b" ":
            if not c:
                raise ValueError(f"ends after {k} of the {count} words its header announces")
            word += c
            if len(word) > 1000:
                raise ValueError(f"word {k + 1} is not followed by its vector")
        if len(f.read(4 * dim)) != 4 * dim:
            raise ValueError(f"ends inside the vector of word {k + 1}")


def _looks_like_text(raw: bytes) -> bool:
    """Whether a word2vec file's first record is a line of text: a word, then numbers (of any
    count: a wrong count is then reported as the text format's error, not as binary)."""
    try:
        fields = raw.decode("utf-8").split()
        [float(x) for x in fields[1:]]
    except (UnicodeDecodeError, ValueError):
        return False
    return len(fields) >= 2


def vectors_format(path: str | Path, fmt: str = "auto") -> str:
    """The format of a vectors file (``fmt``, or the one its bytes show when ``"auto"``);
    ValueError saying what is wrong with the file instead. Reads the header and at most the
    first 1000 records, without gensim."""
    with open(path, "rb") as f:
        head = f.read(2)
        if head[:1] == b"\x80":  # a pickle: what KeyedVectors.save writes
            if fmt not in ("auto", "keyed_vectors"):
                raise ValueError(f"a saved KeyedVectors file (pickle), not {fmt}")
            return "keyed_vectors"
        if fmt == "keyed_vectors":
            raise ValueError("not a file written by KeyedVectors.save (a pickle)")
        f.seek(0)
        m = _HEADER.match(f.readline(200))
        if m is None:
            raise ValueError(
                "its first line is not '<number of words> <dimensions>' (the word2vec format)"
            )
        count, dim = int(m.group(1)), int(m.group(2))
        if count == 0 or dim == 0:
            raise ValueError(f"its header announces {count} words of {dim} dimensions")
        start = f.tell()
        if fmt == "auto":
            fmt = "word2vec_text" if _looks_like_text(f.readline(1 << 16)) else "word2vec_binary"
            f.seek(start)
        check = _check_text_records if fmt == "word2vec_text" else _check_binary_records
        check(f, dim, count)
    return fmt


class TextDocumentsConfig(PluginConfig):
    corpus: str = Field(
        description="a UTF-8 file with one document per line (blank lines skipped) or a folder "
        "of .txt files (one document each, in name order); relative to the scenario's folder"
    )
    documents: list[int] = Field(
        default_factory=lambda: [0, 1],
        description="indices of the corpus's documents; label k = the k-th listed",
    )
    vectors_format: VectorsFormat = Field(
        "auto", description="format of `vectors` (auto: read from the file's bytes)"
    )
    limit: int | None = Field(
        None, gt=0, description="read only the first `limit` words of a word2vec-format file"
    )
    vectors: str | None = Field(
        None,
        description="pretrained word vectors (word2vec text or binary format, or a file "
        "written by KeyedVectors.save); null: a Word2Vec trained on the corpus",
    )
    word2vec: Word2VecParams = Field(
        default_factory=Word2VecParams,
        description="Word2Vec trained on the corpus when `vectors` is null (as lee_documents')",
    )

    @field_validator("corpus")
    @classmethod
    def _corpus(cls, v: str, info: ValidationInfo) -> str:
        p = _resolve(v, info)
        if not p.exists():
            raise ValueError(f"corpus not found: {p}")
        try:
            docs = corpus_documents(p)
        except OSError as exc:
            raise ValueError(f"{p}: cannot read it ({exc.strerror})") from None
        except ValueError as exc:
            raise ValueError(f"{p}: {exc}") from None
        if not docs:
            what = "no .txt file" if p.is_dir() else "no non-blank line"
            raise ValueError(f"{p}: {what}: the corpus has no document")
        return str(p.resolve())

    @field_validator("vectors")
    @classmethod
    def _vectors(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return v
        p = _resolve(v, info)
        if not p.is_file():
            raise ValueError(f"vectors file not found: {p}")
        try:
            vectors_format(p, info.data.get("vectors_format", "auto"))
        except (ValueError, OSError) as exc:
            raise ValueError(f"{p}: {exc}") from None
        return str(p.resolve())

    @field_validator("documents")
    @classmethod
    def _documents(cls, v: list[int], info: ValidationInfo) -> list[int]:
        if not v:
            raise ValueError("name at least one document")
        corpus = info.data.get("corpus")
        if corpus is None:
            return v  # the corpus's own error is reported
        n = len(corpus_documents(corpus))
        bad = [i for i in v if not 0 <= i < n]
        if bad:
            raise ValueError(f"{bad[0]} is out of range 0..{n - 1} of {corpus}")
        return v


def _load_vectors(path: str, fmt: str, limit: int | None):
    from gensim.models import KeyedVectors  # gensim: word data only

    try:
        fmt = vectors_format(path, fmt)
        if fmt == "keyed_vectors":
            return KeyedVectors.load(path)
        return KeyedVectors.load_word2vec_format(
            path, binary=fmt == "word2vec_binary", limit=limit, unicode_errors="replace"
        )
    except Exception as exc:  # gensim raises many kinds; one line naming the file
        msg = " ".join(str(exc).split())
        raise DataError(f"{path}: cannot load word vectors ({type(exc).__name__}: {msg})") from None


@DATASETS.register
class TextDocuments(DatasetPlugin):
    """Your own text corpus as point clouds of word vectors (pretrained, or trained on it).

    One document per label; the corpus and the vectors are read from disk (module docstring)."""

    name = "text_documents"
    Config = TextDocumentsConfig

    def load(self, rng):
        from gensim.utils import simple_preprocess  # gensim: word data only

        c = self.config
        docs = [tuple(simple_preprocess(d)) for d in corpus_documents(c.corpus)]
        if c.vectors is not None:
            wv = _load_vectors(c.vectors, c.vectors_format, c.limit)
        else:
            wv = train_word2vec(docs, c.word2vec)
        rows, labels, tokens = [], [], []
        for k, i in enumerate(c.documents):
            if not 0 <= i < len(docs):
                raise DataError(f"{c.corpus}: document {i} out of range 0..{len(docs) - 1}")
            words = document_words(docs[i], wv)
            if len(words) < 2:
                raise DataError(
                    f"{c.corpus}: document {i} has fewer than 2 words in the vectors' vocabulary"
                )
            rows.append(np.stack([wv[w] for w in words]).astype(np.float64))
            labels.append(np.full(len(words), k))
            tokens.extend(words)
        public = {
            "word_vectors": {
                "words": tuple(wv.index_to_key),
                "vectors": np.asarray(wv.vectors, dtype=np.float32),
            }
        }
        return Dataset(
            np.vstack(rows),
            np.concatenate(labels),
            "text_documents",
            {"tokens": tuple(tokens), "public": public},
        )
