"""Your own text: a corpus file or folder and pretrained word vectors from disk, offline
(testbed/data/own_text.py; the example scenarios/own_text_words.yaml)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from testbed.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "scenarios" / "own_text_words.yaml"


def _scenario(tmp_path: Path, **params) -> Path:
    """The example scenario in ``tmp_path`` with its dataset's params replaced by ``params``."""
    sc = yaml.safe_load(EXAMPLE.read_text())
    sc["data"]["dataset"]["params"] = params
    sc["attacks"] = []
    path = tmp_path / "own.yaml"
    path.write_text(yaml.safe_dump(sc, sort_keys=False))
    return path


def test_the_example_runs_and_the_attack_reads_the_given_vectors(tmp_path):
    from testbed.run.execute import execute
    from testbed.scenario.loading import load_scenario

    # Execute
    out = execute(load_scenario(str(EXAMPLE)), tmp_path / "run")
    # Assert: the vectors are the file's (10-d, its 238 words), and the retrieval, chained on
    # the inversion, finds the parties' words in them (the Lee model is 50-d: it could not)
    kv = out.world.public.extra["word_vectors"]
    first = (ROOT / "scenarios/own_text/vectors.txt").read_text().splitlines()
    assert first[0] == f"{len(kv['words'])} 10"
    word, *vals = first[1].split()
    np.testing.assert_allclose(kv["vectors"][kv["words"].index(word)], np.float32(vals))
    rows = {(r["label"], r["target"]): r for r in out.results["attacks"]}
    for target in ("alice", "bob"):
        row = rows[("words_inv", target)]
        assert row["matching_rate"] >= 0.9
        assert row["matching_rate"] > row["matching_rate_baseline"] + 0.5


def test_a_malformed_vectors_file_is_refused_at_validate(tmp_path, capsys):
    # Prepare: the third line of the vectors file loses a number
    shutil.copy(ROOT / "scenarios/own_text/corpus.txt", tmp_path / "corpus.txt")
    lines = (ROOT / "scenarios/own_text/vectors.txt").read_text().splitlines()
    lines[2] = lines[2].rsplit(" ", 1)[0]
    (tmp_path / "vectors.txt").write_text("\n".join(lines) + "\n")
    sc = _scenario(tmp_path, corpus="corpus.txt", vectors="vectors.txt")
    # Execute
    rc = main(["validate", str(sc)])
    err = capsys.readouterr().err
    # Assert: one line naming the scenario's line, the field and the file
    assert rc == 2
    assert err.count("\n") == 1
    assert "data.dataset.params.vectors" in err and "vectors.txt" in err
    assert "line 3 has 9 numbers after its word, the header says 10" in err


@pytest.mark.parametrize(
    "params, needle",
    [
        ({"corpus": "nowhere.txt"}, "corpus not found"),
        ({"corpus": "corpus.txt", "vectors": "nowhere.bin"}, "vectors file not found"),
        ({"corpus": "corpus.txt", "vectors": "corpus.txt"}, "is not '<number of words>"),
        ({"corpus": "corpus.txt", "vectors": "short.txt"}, "line 2 has 3 numbers after its word"),
        ({"corpus": "corpus.txt", "documents": [0, 99]}, "99 is out of range 0..17"),
        (
            {"corpus": "corpus.txt", "vectors": "v.txt", "vectors_format": "keyed_vectors"},
            "not a file written by KeyedVectors.save",
        ),
    ],
)
def test_bad_paths_and_formats_are_one_line_naming_the_field(tmp_path, capsys, params, needle):
    # Prepare
    shutil.copy(ROOT / "scenarios/own_text/corpus.txt", tmp_path / "corpus.txt")
    shutil.copy(ROOT / "scenarios/own_text/vectors.txt", tmp_path / "v.txt")
    (tmp_path / "short.txt").write_text("5 10\nthe 1 2 3\n")  # text, too few numbers
    sc = _scenario(tmp_path, **params)
    # Execute
    rc = main(["validate", str(sc)])
    err = capsys.readouterr().err
    # Assert
    assert rc == 2
    assert err.count("\n") == 1
    assert "data.dataset.params." in err and needle in err


def test_binary_and_saved_vectors_and_a_folder_corpus_load_alike(tmp_path):
    from gensim.models import KeyedVectors

    from testbed.data.own_text import TextDocuments, TextDocumentsConfig

    # Prepare: the example's vectors in the two other formats; the corpus as a folder
    kv = KeyedVectors.load_word2vec_format(str(ROOT / "scenarios/own_text/vectors.txt"))
    kv.save_word2vec_format(str(tmp_path / "v.bin"), binary=True)
    kv.save(str(tmp_path / "v.kv"))
    docs = (ROOT / "scenarios/own_text/corpus.txt").read_text().splitlines()
    (tmp_path / "docs").mkdir()
    for i, d in enumerate(docs[:3]):
        (tmp_path / "docs" / f"{i:02d}.txt").write_text(d)
    ctx = {"base_dir": str(tmp_path)}
    # Execute
    got = [
        TextDocuments(
            TextDocumentsConfig.model_validate(
                {"corpus": "docs", "vectors": v, "documents": [0, 2]}, context=ctx
            )
        ).load(np.random.default_rng(0))
        for v in ("v.bin", "v.kv", str(ROOT / "scenarios/own_text/vectors.txt"))
    ]
    # Assert
    for ds in got[1:]:
        np.testing.assert_allclose(ds.X, got[0].X)
        assert ds.meta["tokens"] == got[0].meta["tokens"]
    assert got[0].X.shape[1] == 10 and set(got[0].y) == {0, 1}


def test_without_vectors_a_word2vec_is_trained_on_the_corpus(tmp_path):
    from testbed.data.own_text import TextDocuments, TextDocumentsConfig

    # Prepare
    cfg = TextDocumentsConfig.model_validate(
        {
            "corpus": str(ROOT / "scenarios/own_text/corpus.txt"),
            "word2vec": {"vector_size": 8, "min_count": 1},
        }
    )
    # Execute
    ds = TextDocuments(cfg).load(np.random.default_rng(0))
    # Assert
    assert ds.X.shape[1] == 8
    assert ds.meta["public"]["word_vectors"]["vectors"].shape[1] == 8
