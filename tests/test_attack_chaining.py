"""Attack chaining (issue 46): an entry with ``input: LABEL`` runs on the outputs of the attack
that label names (word2vec_retrieval on measure_inversion's reconstruction), in the sandbox, and
a bad ``input:`` is refused at validate with file:line; word2vec_retrieval attacks every party's
eta, one output per party."""

from __future__ import annotations

import pytest

from testbed.cli.main import main
from testbed.errors import TestbedError
from testbed.scenario.labels import attack_order

WORDS = """\
name: tw_words
seed: 0
data:
  dataset:
    name: lee_documents
    params: {documents: [4, 5]}
  partition:
    name: class_subsets
    params: {classes: [[0], [1]]}
  parties: [alice, bob]
protocol:
  name: triangle_wad
  params: {support_size: 20}
threat_model:
  observer: server
attacks:
  - name: measure_inversion
    label: inv
  - name: word2vec_retrieval
    label: words
  - name: word2vec_retrieval
    label: words_inv
    input: inv
"""


@pytest.fixture(scope="module")
def chained_rows(tmp_path_factory):
    from testbed.run.execute import execute
    from testbed.scenario.loading import parse_scenario

    out = execute(parse_scenario(WORDS, "tw_words.yaml"), tmp_path_factory.mktemp("run") / "r")
    return out.results["attacks"]


def _rows(rows, label):
    return {r["target"]: r for r in rows if r.get("label") == label}


def test_word2vec_retrieval_attacks_every_partys_eta(chained_rows):
    # Assert: the server saw both parties' eta; each is attacked for its sender (main: bob only)
    words = _rows(chained_rows, "words")
    assert set(words) == {"alice", "bob"}
    assert all("matching_rate" in r for r in words.values())


def test_chained_word_retrieval_beats_the_unchained_one(chained_rows):
    # Assert: on the inverted eta the words come back; on eta itself few do (paper: 4 %)
    plain, chained = _rows(chained_rows, "words"), _rows(chained_rows, "words_inv")
    assert set(chained) == {"alice", "bob"}
    for t in ("alice", "bob"):
        assert chained[t]["matching_rate"] >= 0.6
        assert chained[t]["matching_rate"] > plain[t]["matching_rate"] + 0.3
        assert chained[t]["matching_rate"] > chained[t]["matching_rate_baseline"] + 0.3


def test_attack_order_runs_inputs_first_and_keeps_scenario_order_otherwise():
    # Execute / Assert: b runs on c, so c moves before b; the rest stay in place
    assert attack_order(["a", "b", "c"], [None, "c", None]) == [0, 2, 1]
    assert attack_order(["a", "b"], [None, None]) == [0, 1]


@pytest.mark.parametrize(
    ("inputs", "needle"),
    [
        ([None, "x"], "attacks[1].input 'x' names no attack"),
        (["a", None], "cycle: a -> a"),
        (["b", "a"], "cycle: a -> b -> a"),
    ],
)
def test_attack_order_refuses_unknown_labels_and_cycles(inputs, needle):
    with pytest.raises(TestbedError, match=r"^f:\d+: ") as err:
        attack_order(["a", "b"], inputs, lambda i: f"f:{10 + i}")
    assert needle in str(err.value)


@pytest.mark.parametrize(
    ("mutate", "line", "needle"),
    [
        (lambda s: s.replace("input: inv", "input: nope"), 23, "'nope' names no attack"),
        (
            lambda s: s.replace("label: inv\n", "label: inv\n    input: words_inv\n"),
            19,
            "cycle: inv -> words_inv -> inv",
        ),
    ],
)
def test_validate_refuses_a_bad_input_with_its_line(tmp_path, capsys, mutate, line, needle):
    # Prepare
    path = tmp_path / "bad.yaml"
    path.write_text(mutate(WORDS))
    # Execute
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    # Assert: one line, exit 2, naming the file and the input's line
    assert code == 2
    assert err.count("\n") == 1, err
    assert f"bad.yaml:{line}: " in err and needle in err
