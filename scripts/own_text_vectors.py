"""Write scenarios/own_text/vectors.txt: the small word2vec-format vectors that the example
scenario scenarios/own_text_words.yaml loads, trained once with gensim on
scenarios/own_text/corpus.txt (seeded, one worker, CRC32 word hashing: the same file on every
machine with the same gensim; values rounded to 4 decimals to keep the file small).

    python scripts/own_text_vectors.py
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1] / "scenarios" / "own_text"


def main() -> None:
    from gensim.models import Word2Vec
    from gensim.utils import simple_preprocess

    lines = (ROOT / "corpus.txt").read_text(encoding="utf-8").splitlines()
    docs = [simple_preprocess(line) for line in lines if line.strip()]
    model = Word2Vec(
        docs,
        vector_size=10,
        window=5,
        min_count=1,
        epochs=60,
        seed=1,
        workers=1,
        hashfxn=lambda s: zlib.crc32(s.encode()),
    )
    kv = model.wv
    kv.vectors = np.round(kv.vectors, 4)
    kv.save_word2vec_format(str(ROOT / "vectors.txt"), binary=False)
    print(f"wrote {ROOT / 'vectors.txt'}: {len(kv)} words x {kv.vector_size}")


if __name__ == "__main__":
    main()
