"""The Ray engine's cluster options are checked when the scenario loads, without Ray (issue 50):
a party pinned by ``placement`` must exist, the private cluster's options are refused next to
a running cluster's address, and only the head's own address form is accepted."""

from __future__ import annotations

import pytest

from testbed.errors import ScenarioError, TestbedError
from testbed.exchange.engines.ray_cluster import cluster_address, plan_groups
from testbed.scenario.loading import parse_scenario

BASE = """\
name: t
seed: 1
data:
  dataset: {name: gaussians, params: {d: 2, components: [{n: 40, mean: 0.0}]}}
  partition: {name: iid, params: {sizes: [20, 20]}}
  parties: [client_1, client_2]
protocol: {name: fedbary, params: {iterations: 2, support_size: 4}}
threat_model: {observer: server}
engine: ray
"""


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            '{address: "10.0.0.5:6379", placement: {client_9: site_a}}',
            "engine_params.placement: 'client_9' is not a party; parties: client_1, client_2",
        ),
        (
            '{address: "10.0.0.5:6379", num_cpus: 2}',
            "num_cpus is for a private local cluster; the cluster at 10.0.0.5:6379 has its own",
        ),
        ('{address: "ray://10.0.0.5:10001"}', "Ray Client addresses (ray://) are not supported"),
        ('{address: "10.0.0.5"}', "expected HOST:PORT, 'auto' or 'local'"),
    ],
)
def test_cluster_options_are_checked_at_load_time(params, message):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(BASE + f"engine_params: {params}\n", "s.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("s.yaml:10: engine_params")


def test_a_valid_cluster_scenario_loads():
    sc = parse_scenario(
        BASE + 'engine_params: {address: "10.0.0.5:6379", placement: {client_2: site_b}}\n'
    )
    assert sc.engine_params["placement"] == {"client_2": "site_b"}


def test_address_comes_from_the_scenario_then_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster_address(None) is None  # the private cluster
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert cluster_address(None) == ("10.0.0.5:6379", "RAY_ADDRESS")
    assert cluster_address("10.0.0.6:1") == ("10.0.0.6:1", "engine_params.address")
    assert cluster_address("local") is None  # private, whatever RAY_ADDRESS says
    monkeypatch.setenv("RAY_ADDRESS", "ray://x:1")
    with pytest.raises(TestbedError, match="RAY_ADDRESS: 'ray://x:1'"):
        cluster_address(None)


def test_pinned_parties_share_an_actor_and_the_rest_are_spread():
    names = [f"c{i}" for i in range(7)]
    groups = plan_groups(names, {"c1": "a", "c4": "a", "c5": "b"}, k=2)
    assert groups == [
        ("a", ["c1", "c4"]),
        ("b", ["c5"]),
        (None, ["c0", "c3"]),
        (None, ["c2", "c6"]),
    ]
    assert plan_groups(names[:2], {}, k=8) == [(None, ["c0"]), (None, ["c1"])]
    with pytest.raises(TestbedError, match="engine_params.placement: 'zz' is not a party"):
        plan_groups(names, {"zz": "a"}, k=2)


class _Head:
    """What ``death_line`` asks of Ray: the head's node table (one node, alive)."""

    @staticmethod
    def nodes():
        return [{"NodeID": "ab" * 28, "Alive": True, "NodeManagerAddress": "10.0.0.5"}]


def test_an_actor_that_died_while_starting_is_no_dead_node():
    """An actor killed before it said where it runs (issue 48, fault 8): its node is alive,
    so the line names the actor, not "an unknown node died" (as it did)."""
    from testbed.exchange.engines.ray_cluster import death_line

    class ActorDiedError(Exception):
        actor_id = "a1"

    exc = ActorDiedError("The actor died unexpectedly.\n\tactor_id: a1\n\tpid: 27042\n")
    actors = {
        "a1": {"parties": ["client_1", "client_3"], "pid": None, "node": None, "ip": None},
        "a2": {"parties": ["client_2", "client_4"], "pid": None, "node": None, "ip": None},
    }
    assert str(death_line(_Head, exc, actors)) == (
        "ray engine: the actor process (pid 27042) holding client_1, client_3 died while starting"
    )
    # once it said where it runs, its pid and node are named
    actors["a1"].update(pid=27042, node="ab" * 28, ip="10.0.0.5")
    assert str(death_line(_Head, exc, actors)) == (
        "ray engine: the actor process (pid 27042 on node abababab at 10.0.0.5) holding "
        "client_1, client_3 died"
    )
