"""Release counts the protocols declare (``Protocol.client_releases``): with a
``gaussian_measure_noise`` target epsilon, ``testbed validate`` refuses a ``releases`` below what
one defended party releases, and a run with exactly that count goes through."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed.cli.main import main
from testbed.run.execute import execute
from testbed.scenario.loading import parse_scenario

SCENARIOS = Path(__file__).parents[1] / "scenarios"

#: (id, contract scenario, protocol params set, defense params set, releases of the party that
#: releases most, that party, seed): the counts derived from each protocol's code (docstrings
#: of the ``client_releases`` methods)
CASES = [
    # only bob defended: its K + 1 = 5 distances (alice's supports are not counted)
    (
        "fedwad_one_sender",
        "contract_tiny",
        {"distances": "every_round"},
        {"senders": ["bob"], "kinds": ["fedwad.xi_mu", "fedwad.distance"]},
        5,
        "bob",
        7,
    ),
    # 4 parties, 3 pairs each, K = 3 supports + 1 distance per pair; seed 1 (at seed 7 the noisy
    # clusters trip the privacy guard, which has nothing to do with the count)
    ("fedwad_clustering", "contract_tiny_fedwad_clustering", {}, {}, 12, "client_0", 1),
    # only as the first of its pairs: 3 pairs x K = 3 supports
    (
        "fedwad_clustering_xi_mu",
        "contract_tiny_fedwad_clustering",
        {},
        {"kinds": ["fedwad.xi_mu"]},
        9,
        "client_0",
        1,
    ),
    # the distance step's releases; FedAvg sends arrays, which the defense refuses (kinds);
    # seed 1 as above
    (
        "fedwad_clustered_fl",
        "contract_tiny_fedwad_clustered_fl",
        {"rounds": 1},
        {"kinds": ["fedwad.*"]},
        12,
        "client_0",
        1,
    ),
    # every client every epoch: 2 epochs x (3 supports + 1 distance), global and local coreset
    (
        "fedwad_coreset",
        "contract_tiny_fedwad_coreset",
        {"clients_per_epoch": 4, "epochs": 2},
        {"kinds": ["*xi_client", "*distance"]},
        16,
        "alice",
        7,
    ),
    # K = 4 rounds and the final one, a support and a distance each
    ("fedbary", "contract_tiny_fedbary", {}, {}, 10, "client_1", 7),
    (
        "fedbary_supports_only",
        "contract_tiny_fedbary",
        {},
        {"noise_distances": False},
        5,
        "client_1",
        7,
    ),
    # unknown t: the buyer's eta only (gamma's announcement, seed and shape, is integers)
    (
        "triangle_wad_unknown_t",
        "contract_tiny_triangle_wad",
        {"setting": "unknown_t"},
        {"senders": ["alice"]},
        1,
        "alice",
        7,
    ),
    # two sellers: the buyer's eta to each
    (
        "triangle_wad_marketplace",
        "contract_tiny_triangle_wad_marketplace",
        {},
        {"senders": ["buyer"]},
        2,
        "buyer",
        7,
    ),
]


def _scenario(base: str, params: dict, defense: dict, releases: int, seed: int) -> tuple[str, int]:
    """The contract scenario with the defense; the text and the line of its ``releases``."""
    sc = yaml.safe_load((SCENARIOS / f"{base}.yaml").read_text())
    sc["seed"] = seed
    sc["protocol"]["params"].update(params)
    sc["defenses"] = [
        {
            "name": "gaussian_measure_noise",
            "params": {"target_epsilon": 5.0, "clip_norm": 10.0, **defense, "releases": releases},
        }
    ]
    text = yaml.safe_dump(sc, sort_keys=False)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.strip().startswith("releases:"))
    return text, line


@pytest.mark.parametrize(
    ("base", "params", "defense", "count", "party", "seed"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_the_declared_release_count_runs_and_one_less_is_refused_at_validate(
    tmp_path, capsys, base, params, defense, count, party, seed
):
    # Prepare
    exact, _ = _scenario(base, params, defense, count, seed)
    path = tmp_path / "s.yaml"
    # Execute
    out = execute(parse_scenario(exact), until="results", write=False)
    # Assert: one less is refused at the line of `releases`, naming the count (releases: 0 is
    # not a count); the count itself is exactly what the party released in the run
    if count > 1:
        below, line = _scenario(base, params, defense, count - 1, seed)
        path.write_text(below)
        code = main(["validate", str(path)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.startswith(
            f"error: {path}:{line}: defenses[0].params.releases: releases={count - 1}, but "
            f"party {party!r} of {parse_scenario(exact).protocol.name} makes {count} releases "
        ), err
    made = {}
    for e in out.world.ledger.events:
        made[e.party] = made.get(e.party, 0) + e.count
    assert max(made.values()) == made[party] == count, made
