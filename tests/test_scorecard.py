"""`testbed scorecard`: one run, every applicable attack under every threat model, one report;
the leaky toy protocol's scorecard shows its leak."""

from __future__ import annotations

import json

import pytest

from testbed.cli.main import main
from testbed.plugins.scorecard import scorecard, threat_models
from tests._toy_protocols import LeakyMean, PrivateMean, registered


@pytest.fixture(scope="module")
def toys():
    with registered(LeakyMean, PrivateMean):
        yield


def test_threat_models_cover_server_parties_eavesdropper_and_collusions():
    labels = [t["label"] for t in threat_models(["a", "b", "c"])]
    assert labels == ["server", "a", "b", "c", "eavesdropper", "server+a+b", "a+b"]
    assert [t["label"] for t in threat_models(["a", "b"])][-1] == "server+a"
    # collusions are among clients (by role): a test party is observed alone, never colludes
    labels = [t["label"] for t in threat_models(["a", "b", "c", "test"], ["a", "b", "c"])]
    assert labels[-2:] == ["server+a+b", "a+b"] and "test" in labels


def test_the_leaky_toy_scorecard_shows_the_leak(toys, tmp_path):
    # Execute
    card = scorecard("toy_leaky_mean", tmp_path / "sc")
    # Assert: the guard search finds both parties' rows in what the server and eavesdropper see
    assert {f["party"] for f in card.raw_rows["server"]} == {"alice", "bob"}
    assert {f["kind"] for f in card.raw_rows["eavesdropper"]} == {"toy_leaky_mean.sample"}
    assert card.raw_rows["alice"] == [] and card.raw_rows["bob"] == []
    # the any-protocol attack recovers rows exactly, from the server's view, not from a party's
    hits = {
        (r["threat"], r["target"]): r["metrics"] for r in card.attacks if r["attack"] == "sent_rows"
    }
    assert hits[("server", "alice")]["exact_recovery"] > 0
    assert ("alice", "bob") not in hits  # alice never sees bob's messages
    # the accuracy side: the estimate equals its reference
    assert card.accuracy["mean_distance"]["within"] is True
    # per threat model: the server sees near-copies of both parties' rows, a party none
    worst = card.worst()
    assert worst["server"]["near_copy_messages"] == 2 and worst["alice"]["near_copy_messages"] == 0
    # one report in three formats, saying what leaks to whom
    data = json.loads((tmp_path / "sc" / "scorecard.json").read_text())
    assert any(x.startswith("server: near-copies of private rows") for x in data["leaks"])
    md = (tmp_path / "sc" / "scorecard.md").read_text()
    assert "toy_leaky_mean.sample" in md and "What leaks, to whom" in md
    assert (tmp_path / "sc" / "scorecard.html").read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "sc" / "run" / "report.html").exists()


# a third scorecard, 3 s on an idle core; the leaky toy's scorecard stays in make test (the kit's
# no_private_rows check passes the private toys: test_protocol_contracts)
@pytest.mark.slow
def test_a_private_toy_scorecard_shows_no_row_leak(toys, tmp_path):
    card = scorecard("toy_private_mean", tmp_path / "sc")
    assert all(not fs for fs in card.raw_rows.values())
    assert not [r for r in card.attacks if r["attack"] == "sent_rows"]  # no row ever sent


def test_scorecard_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert main(["scorecard", "no_such_protocol", "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown protocol 'no_such_protocol'" in err[0]
    assert main(["scorecard", str(tmp_path / "missing.yaml")]) == 2


def _leaky_scenario(tmp_path, name: str, parties: list[str], n: int, **extra):
    """A scenario file: ``toy_leaky_mean`` on ``n`` Gaussian rows split iid among ``parties``,
    with ``extra`` top-level keys (e.g. ``defenses``)."""
    import yaml

    sc = {
        "name": name,
        "seed": 3,
        "data": {
            "dataset": {"name": "gaussians", "params": {"d": 2, "components": [{"n": n}]}},
            "partition": {"name": "iid"},
            "parties": parties,
        },
        "protocol": {"name": "toy_leaky_mean"},
        **extra,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


@pytest.mark.slow  # eight threat models, each re-running the attacks in their own process: ~25 s
def test_a_scenario_file_is_scored_as_written(toys, tmp_path):
    path = _leaky_scenario(tmp_path, "leaky_three", ["alice", "bob", "carol"], 45)
    card = scorecard(str(path), tmp_path / "sc")
    assert card.scenario == "leaky_three"
    assert [t["label"] for t in card.threats][-2:] == ["server+alice+bob", "alice+bob"]
    assert {f["party"] for f in card.raw_rows["server"]} == {"alice", "bob"}
    # a coalition's own rows are not a leak to it
    assert card.raw_rows["server+alice+bob"] == [] and card.raw_rows["carol"] == []


def test_a_protocol_with_its_own_membership_experiment_keeps_it():
    # distillation's audit rows are its membership candidates (30 here): a 10 + 10 pool added
    # by the scorecard made soft_label_membership's scores fail validation under every threat
    # model ("30 scores, 20 candidates"); protocols without one still get the pool
    from testbed.plugins.scorecard import _scenario

    assert _scenario("sinkhorn_distillation").membership is None
    assert _scenario("fedwad").membership is not None


# ~40 s on 2 busy cores; the toy scorecards stay in make test
@pytest.mark.slow
def test_distillation_scorecard_audits_membership_on_the_audit_target_without_errors(tmp_path):
    # before: the membership attack failed under every threat model (a pool over the audit
    # rows, then targets without members); now it is scored on the client the audit rows
    # were drawn from, by every threat model that does not include that client
    card = scorecard("sinkhorn_distillation", tmp_path / "sc")
    assert card.errors == []
    member = [r for r in card.attacks if r["attack"] == "soft_label_membership"]
    assert member and {r["target"] for r in member} == {"client_0"}
    assert all("client_0" not in (r["observer"], *r["colluders"]) for r in member)


def test_the_scorecard_says_which_defense_acted_on_the_leaking_messages(
    toys, tmp_path, monkeypatch
):
    # before: the scorecard listed the messages carrying private rows without the defenses that
    # had acted on them (each message's defended_by, in its hashed meta)
    from types import SimpleNamespace

    import testbed.plugins.scorecard as card_module
    from defenses._base import Defense
    from testbed.registry import DEFENSES

    # the attacks (one process per threat model), the disguise search (its own tests) and the
    # run's own report are not what this checks (40 s -> a few): one disguised finding stands
    # for the search's, on the message the defense acted on
    def one_disguised(run, coalitions):
        (env,) = [e for e in run.transcript if e.kind.endswith("sample") and e.sender == "alice"]
        keys = ("seq", "kind", "sender", "receiver")
        f = SimpleNamespace(**{k: getattr(env, k) for k in keys}, party="alice", transform="t")
        return {"server": [f]}

    monkeypatch.setattr(card_module, "_attack_rows", lambda *a, **k: [])
    monkeypatch.setattr("testbed.report.writer.write_report", lambda run_dir, **kw: None)
    monkeypatch.setattr("testbed.testing.disguise.disguise_findings", one_disguised)

    class Tag(Defense):
        """Changes nothing, names itself: the rows it lets through still leak."""

        name = "toy_tag"

        def on_send(self, env, rng, ledger):
            return self.marked(env, env.payload)

    tag = {"name": "toy_tag", "params": {"senders": ["alice"], "kinds": ["*.sample"]}}
    path = _leaky_scenario(tmp_path, "leaky_tagged", ["alice", "bob"], 30, defenses=[tag])
    DEFENSES.register(Tag)
    try:
        card = scorecard(str(path), tmp_path / "sc")
    finally:
        DEFENSES._items.pop(Tag.name, None)
        DEFENSES._origins.pop(Tag.name, None)
    by = {f["sender"]: f["defended_by"] for f in card.raw_rows["server"]}
    assert by == {"alice": ["toy_tag"], "bob": []}
    assert card.defenses == {"toy_tag": {"messages": 1, "kinds": ["toy_leaky_mean.sample"]}}
    assert "defenses: toy_tag acted on 1 of 4 messages" in card.summary_lines()
    data = json.loads((tmp_path / "sc" / "scorecard.json").read_text())
    assert data["defenses"] == card.defenses and data["messages"] == 4
    assert [f["defended_by"] for f in data["private_rows"]["server"]] in (
        [["toy_tag"], []],
        [[], ["toy_tag"]],
    )
    assert [f["defended_by"] for f in card.disguised["server"]] == [["toy_tag"]]
    md = (tmp_path / "sc" / "scorecard.md").read_text()
    assert "Defenses on the messages" in md and "| toy_tag | 1 of 4 | toy_leaky_mean.sample |" in md
    assert "| server | \\#1 toy_leaky_mean.sample | alice | t | toy_tag |" in md


def test_an_attack_that_cannot_be_built_costs_its_row_not_the_card(toys, tmp_path, capsys):
    # an installed attack whose config has a required field (or whose constructor raises)
    # stopped `testbed scorecard` for every protocol, in a line naming neither it nor its package
    from testbed.api import Attack, AttackConfig
    from testbed.registry import ATTACKS

    class NeedsK(AttackConfig):
        k: int

    class RequiredParam(Attack):
        name = "probe_required_param"
        Config = NeedsK

        def run(self, view, public, rng):
            return []

    with registered(RequiredParam, registry=ATTACKS):
        code = main(["scorecard", "toy_leaky_mean", "-o", str(tmp_path / "sc"), "-q"])
    out = capsys.readouterr().out
    assert code == 3  # as testbed run: an attack failed while the rest ran
    data = json.loads((tmp_path / "sc" / "scorecard.json").read_text())
    err = [e for e in data["errors"] if e["attack"] == "probe_required_param"]
    assert err and "could not be built with its default config: ValidationError" in err[0]["error"]
    assert any(r["attack"] == "sent_rows" for r in data["attacks"])  # the others still ran
    assert "scorecard:" in out


# fault injection: ~25 s on 2 busy cores
@pytest.mark.slow
def test_what_a_failed_scorecard_left_does_not_block_the_next(toys, tmp_path):
    # a scorecard that failed after its run (e.g. an attack that could not be built) left
    # out/run/ alone, and the next scorecard refused the folder ("holds no scorecard")
    import shutil

    out = tmp_path / "sc"
    scorecard("toy_private_mean", out)
    for p in out.iterdir():
        if p.name != "run":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    card = scorecard("toy_private_mean", out)
    assert (out / "scorecard.json").exists() and card.protocol == "toy_private_mean"
