"""Attack chaining (issue 46): an entry with ``input: LABEL`` runs on the outputs of the attack
that label names (word2vec_retrieval on measure_inversion's reconstruction), in the sandbox, and
a bad ``input:`` is refused at validate with file:line; word2vec_retrieval attacks every party's
eta, one output per party."""

from __future__ import annotations

import pytest

from testbed.cli.main import main
from testbed.errors import TestbedError

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


def _run(text: str, tmp_path_factory):
    from testbed.run.execute import execute
    from testbed.scenario.loading import parse_scenario

    out = execute(parse_scenario(text, "tw_words.yaml"), tmp_path_factory.mktemp("run") / "r")
    return out.results["attacks"]


@pytest.fixture(scope="module")
def chained_rows(tmp_path_factory):
    return _run(WORDS, tmp_path_factory)


def _rows(rows, label):
    return {r["target"]: r for r in rows if r.get("label") == label}


# a second word-vector run, 5 s on an idle core; the chained run (the same retrieval and its chain)
# stays in make test
@pytest.mark.slow
def test_word2vec_retrieval_attacks_every_partys_eta(tmp_path_factory):
    # Prepare: no chained entry (the retrieval reads the messages only)
    plain = WORDS.split("  - name: word2vec_retrieval\n    label: words_inv", 1)[0]
    # Execute
    rows = _run(plain, tmp_path_factory)
    # Assert: the server saw both parties' eta; each is attacked for its sender (it kept the
    # last eta it saw: bob's only)
    words = _rows(rows, "words")
    assert set(words) == {"alice", "bob"}
    assert all(0 <= r["matching_rate"] <= 1 for r in words.values())


# 7 s (two Word2Vec retrieval runs): the chaining itself stays in make test (order, read-only
# inputs, a failed input); make test-slow
@pytest.mark.slow
def test_chained_word_retrieval_beats_the_unchained_one(chained_rows):
    # Assert: on the inverted eta the words come back; on eta itself few do (paper: 4 %)
    plain, chained = _rows(chained_rows, "words"), _rows(chained_rows, "words_inv")
    assert set(chained) == {"alice", "bob"}
    for t in ("alice", "bob"):
        assert chained[t]["matching_rate"] >= 0.6
        assert chained[t]["matching_rate"] > plain[t]["matching_rate"] + 0.3
        assert chained[t]["matching_rate"] > chained[t]["matching_rate_baseline"] + 0.3


def test_attack_order_runs_inputs_first_and_keeps_scenario_order_otherwise():
    from testbed.scenario.labels import attack_order

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
    from testbed.scenario.labels import attack_order

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


def test_the_upstream_outputs_cross_into_the_attack_process_read_only():
    # Prepare: a view whose upstream holds a reconstruction; a baseline one for the baseline
    import numpy as np

    from attacks._base import AttackOutput
    from testbed.exchange.bus import PublicInfo, View
    from testbed.sandbox.codec import pack_view, unpack_views

    public = PublicInfo(protocol="p", parties=("alice", "bob"), dim=2)
    run_out = AttackOutput(kind="points", target="bob", points=np.ones((3, 2)), meta={"t": 0.5})
    base_out = AttackOutput(kind="points", target="bob", points=np.zeros((3, 2)))
    view = View("server", (), (), {}, public, upstream=(run_out,))
    # Execute
    got, base, _ = unpack_views(pack_view(view, public, (base_out,)))
    # Assert: run sees the upstream run, baseline the upstream baseline, neither can write
    np.testing.assert_array_equal(got.upstream[0].points, np.ones((3, 2)))
    np.testing.assert_array_equal(base.upstream[0].points, np.zeros((3, 2)))
    assert got.upstream[0].meta["t"] == 0.5
    with pytest.raises(ValueError):
        got.upstream[0].points[0, 0] = 2.0
    with pytest.raises(TypeError):
        got.upstream[0].meta["t"] = 1.0


def test_a_failed_or_skipped_input_is_the_chained_attacks_failure():
    from testbed.run.attack import AttackRun, _upstream

    # Prepare: "inv" ran once per target (alice, bob); "bad" failed; "off" was skipped
    def run(i, label, target, outs=(), failure=None):
        return AttackRun(i, "a", label, target, "server", outs, outs, "", failure)

    labels = ["inv", "inv", "bad", "off"]
    done = {
        0: run(0, "inv", "alice", (_Out("alice"), _Out("bob"))),
        1: run(1, "inv", "bob", (_Out("alice"), _Out("bob"))),
        2: run(2, "bad", None, failure=("run", "ValueError: no")),
        3: None,
    }
    # Execute / Assert: each entry's outputs kept to its own target, in entry order
    (ups, base), why = _upstream("inv", labels, done)
    assert why == "" and [o.target for o in ups] == ["alice", "bob"] == [o.target for o in base]
    assert _upstream("bad", labels, done)[1] == "its input 'bad' failed in run: ValueError: no"
    assert "its input 'off' was skipped" in _upstream("off", labels, done)[1]
    assert _upstream(None, labels, done) == (((), ()), "")


class _Out:
    def __init__(self, target):
        self.target = target
