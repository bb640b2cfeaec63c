"""Malformed scenarios end in one line naming the file/line/field, exit code 2, no traceback,
and nothing from the file is ever executed."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.cli.main import main
from testbed.report.fmt import fmt

# written out (not tests/_scenarios.gaussians): the malformed-scenario cases assert line numbers
GOOD = """\
name: tiny
seed: 3
data:
  dataset:
    name: gaussians
    params:
      d: 2
      components:
        - {n: 20, mean: 0.0}
        - {n: 15, mean: 3.0}
  partition: {name: class_subsets, params: {classes: [[0], [1]]}}
  parties: [alice, bob]
protocol:
  name: fedwad
  params: {support_size: 4, iterations: 3}
"""


def _with_dataset(spec: str) -> str:
    """GOOD with its dataset (and class partition) replaced by ``dataset: <spec>``."""
    start = GOOD.index("  dataset:")
    end = GOOD.index("  parties:")
    return GOOD[:start] + f"  dataset: {spec}\n" + GOOD[end:]


def _run(tmp_path: Path, text: str, capsys, *extra: str, command: str = "validate"):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    code = main([command, str(f), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_good_scenario_validates(tmp_path, capsys):
    code, out, err = _run(tmp_path, GOOD, capsys)
    assert code == 0, err
    assert "ok" in out


@pytest.mark.parametrize(
    ("mutate", "line", "needle"),
    [
        (lambda s: s.replace("seed: 3", "seed: 3\ncolour: red"), 3, "colour: unknown key"),
        (
            lambda s: s.replace("support_size: 4", "support_size: four"),
            15,
            "protocol.params.support_size",
        ),
        (
            lambda s: s.replace("name: fedwad", "name: fedwat"),
            14,
            "unknown protocol 'fedwat'; did you mean 'fedwad'?",
        ),
        (
            lambda s: s.replace("{n: 15, mean: 3.0}", "{n: -15, mean: 3.0}"),
            10,
            "data.dataset.params.components[1].n",
        ),
        (
            lambda s: s.replace("iterations: 3}", "iterations: 3, bogus: 1}"),
            15,
            "protocol.params.bogus: unknown key",
        ),
        (
            lambda s: s.replace("parties: [alice, bob]", "parties: [alice, alice]"),
            12,
            "data.parties",
        ),
        (
            lambda s: s.replace("  name: fedwad\n", ""),
            13,
            "protocol.name: required field is missing",
        ),
        (
            lambda s: s + "threat_model: {observer: carol}\n",
            16,
            "threat_model.observer: unknown party 'carol'",
        ),
        (lambda s: s.replace("seed: 3", "seed: [3"), 3, "YAML syntax error"),
    ],
    ids=[
        "unknown-key",
        "wrong-type",
        "unknown-plugin",
        "negative-size",
        "unknown-param",
        "duplicate-party",
        "missing-field",
        "unknown-observer",
        "yaml-syntax",
    ],
)
def test_malformed_scenarios_fail_with_one_line(tmp_path, capsys, mutate, line, needle):
    code, out, err = _run(tmp_path, mutate(GOOD), capsys)
    assert code == 2
    assert err.count("\n") == 1, err  # exactly one line
    assert err.startswith("error: ")
    assert f"s.yaml:{line}:" in err, err
    assert needle in err, err
    assert "Traceback" not in err


# ----------------------------------------------------------------------------- validate = run
def _protocol(spec: str) -> callable:
    """GOOD with ``protocol:`` replaced by ``spec`` (the lines after line 13)."""
    return lambda s: s[: s.index("protocol:")] + f"protocol: {spec}\n"


#: protocols whose configuration reads labels (Protocol.needs_labels), as validate names them
_NEEDS_LABELS = [
    (
        "fedwad_clustering",
        "{name: fedwad_clustering, params: {n_clusters: 2}}",
        "the ARI score against the label sets the clients hold",
    ),
    (
        "fedwad_clustered_fl",
        "{name: fedwad_clustered_fl, params: {clustering: {n_clusters: 2}}}",
        "the OTDD class statistics and each cluster's local training",
    ),
    (
        "fedwad_coreset",
        "{name: fedwad_coreset, params: {test: null}}",
        "the 1-NN classifier's atom labels; local_coreset_size: 0 skips it",
    ),
]


def _partition(spec: str) -> callable:
    """GOOD with line 11's ``partition:`` replaced by ``spec``."""
    return lambda s: s.replace("{name: class_subsets, params: {classes: [[0], [1]]}}", spec)


_SINKHORN_5 = """\
name: tiny
seed: 3
data:
  dataset:
    name: gaussians
    params:
      d: 2
      components: [{n: 20, mean: 0.0}, {n: 20, mean: 3.0}, {n: 20, mean: 6.0}, {n: 20, mean: 9.0}, {n: 20, mean: 12.0}]
  partition: {name: distill_split}
  parties: [transfer, test, alice, bob]
protocol:
  name: sinkhorn_distillation
"""
_SINKHORN_DATA = _SINKHORN_5[_SINKHORN_5.index("  dataset:") : _SINKHORN_5.index("  partition:")]
_CSV_DATA = "  dataset: {name: csv, params: {path: pts.csv}}\n"


@pytest.mark.parametrize(
    ("mutate", "line", "needle"),
    [
        (
            lambda s: s.replace("classes: [[0], [1]]", "classes: [[0, 1], []]"),
            11,
            "data.partition.params.classes[1]: empty class list: every party holds at least one "
            "class",
        ),
        (
            lambda s: s.replace("classes: [[0], [1]]", "classes: [[0], [1], [0]]"),
            11,
            "data.partition.params.classes: 3 class lists for 2 parties (alice, bob); give one "
            "per party, in data.parties' order",
        ),
        (
            lambda s: s.replace("classes: [[0], [1]]", "classes: [[0], [-1]]"),
            11,
            "data.partition.params.classes[1][0]: Input should be greater than or equal to 0 "
            "(got -1)",
        ),
        (
            lambda s: s.replace("classes: [[0], [1]]", "classes: [[0], [5]]"),
            11,
            "data.partition.params.classes: class 5 (list 1) is not a label of the dataset (its "
            "labels: 0..1)",
        ),
        (
            lambda s: s.replace("[[0], [1]]", "[[0, 1]]").replace("[alice, bob]", "[alice]"),
            12,
            "data.parties: protocol 'fedwad' needs at least 2 parties, the scenario has 1 (alice)",
        ),
        (
            lambda s: _protocol("{name: dp_jl_ot}")(
                s.replace("[[0], [1]]", "[[0, 1]]").replace("[alice, bob]", "[alice]")
            ),
            12,
            "data.parties: protocol 'dp_jl_ot' needs at least 2 parties, the scenario has 1",
        ),
        (
            lambda s: s.replace("{support_size: 4", "{clients: [alice, carol], support_size: 4"),
            15,
            "protocol.params.clients: 'carol' is not a party; parties: alice, bob",
        ),
        (
            _protocol("{name: fedwad_clustering}"),
            13,
            "protocol.params.n_clusters: 5 clusters asked of 2 parties",
        ),
        (
            _protocol("{name: fedwad_coreset}"),
            13,
            "protocol.params.test: 'test' is not a party; parties: alice, bob (test: null skips",
        ),
        (
            lambda s: _with_dataset(
                "{name: csv, params: {path: pts.csv, label_column: label}}"
            ).replace("  parties:", "  partition: {name: iid}\n  parties:"),
            4,
            "data.dataset.params.label_column: 'label' is not in the header of pts.csv (x, y, c)",
        ),
        (
            lambda s: _with_dataset(
                "{name: csv, params: {path: raw.csv, label_column: 3}}"
            ).replace("  parties:", "  partition: {name: iid}\n  parties:"),
            4,
            "data.dataset.params.label_column: 3 is out of range for the 3 columns of raw.csv",
        ),
        (
            lambda s: _with_dataset(
                "{name: npy, params: {path: pts.npy, label_column: c}}"
            ).replace("  parties:", "  partition: {name: iid}\n  parties:"),
            4,
            "data.dataset.params.label_column: must be a column index for .npy files",
        ),
        (
            _partition("{name: iid, params: {sizes: [10, 10, 10]}}"),
            11,
            "data.partition.params.sizes: 3 sizes for 2 parties (alice, bob)",
        ),
        (
            _partition("{name: quantity_skew, params: {fractions: [0.5]}}"),
            11,
            "data.partition.params.fractions: 1 fractions for 2 parties (alice, bob)",
        ),
        (
            _partition("{name: shared_base, params: {base_size: 10, holdout: {carol: 5}}}"),
            11,
            "data.partition.params.holdout: 'carol' is not a party; parties: alice, bob",
        ),
        (
            _partition("{name: distill_split}"),
            11,
            "data.partition.params: 'transfer' is not a party; parties: alice, bob",
        ),
        (
            lambda s: s.replace("{support_size: 4", "{clients: [alice], support_size: 4"),
            15,
            "protocol.params.clients: names the two parties holding mu and nu, got 1",
        ),
        (
            _protocol("{name: triangle_wad, params: {clients: [alice]}}"),
            13,
            "protocol.params.clients: names at least two parties, got 1",
        ),
        (
            lambda s: _protocol(
                "{name: triangle_wad, params: {setting: unknown_t, clients: [alice, bob, carol]}}"
            )(_partition("{name: iid}")(s).replace("[alice, bob]", "[alice, bob, carol]")),
            13,
            "protocol.params: clients: setting 'unknown_t' takes exactly two parties, got 3 (only "
            "known_t takes more)",
        ),
        (
            _protocol("{name: triangle_wad_marketplace, params: {buyer: carol}}"),
            13,
            "protocol.params.buyer: 'carol' is not a party; parties: alice, bob",
        ),
        (
            _protocol("{name: dp_gaussian_moments, params: {clients: [alice, carol]}}"),
            13,
            "protocol.params.clients: 'carol' is not a party; parties: alice, bob",
        ),
        (
            _protocol("{name: fedbary, params: {validation: carol}}"),
            13,
            "protocol.params.validation: 'carol' is not a party; parties: alice, bob",
        ),
        (
            _protocol("{name: fedbary, params: {clients: [alice, bob], validation: bob}}"),
            13,
            "protocol.params.validation: 'bob' is also one of the clients",
        ),
        (
            lambda s: _protocol("{name: fedbary, params: {validation: alice}}")(
                s.replace("[[0], [1]]", "[[0, 1]]").replace("[alice, bob]", "[alice]")
            ),
            13,
            "protocol.params.validation: 'alice' is the only party: none is left to be a client",
        ),
        (
            _protocol("{name: fedwad_clustered_fl}"),
            13,
            "protocol.params.clustering: n_clusters: 5 clusters asked of 2 parties",
        ),
        (
            _protocol("{name: sinkhorn_distillation}"),
            13,
            "protocol.params.transfer: 'transfer' is not a party; parties: alice, bob",
        ),
        (
            _protocol("{name: sinkhorn_distillation, params: {transfer: alice, test: bob}}"),
            13,
            "protocol.params: no client party: every party (alice, bob) holds server data",
        ),
        (
            lambda s: _with_dataset("{name: digits}").replace(
                "  parties:",
                "  partition: {name: class_subsets, params: {classes: [[0], [10]]}}\n  parties:",
            ),
            5,
            "data.partition.params.classes: class 10 (list 1) is not a label of the dataset (its "
            "labels: 0..9)",
        ),
        (
            _protocol("{name: triangle_wad, params: {clients: [alice, carol]}}"),
            13,
            "protocol.params.clients: 'carol' is not a party; parties: alice, bob",
        ),
        (
            _protocol("{name: dp_jl_ot, params: {clients: [alice]}}"),
            13,
            "protocol.params.clients: names at least two parties, got 1",
        ),
        (
            _protocol("{name: fedbary, params: {clients: [alice, carol]}}"),
            13,
            "protocol.params.clients: 'carol' is not a party; parties: alice, bob",
        ),
        (
            _protocol("{name: fedwad_coreset, params: {clients: [carol], test: null}}"),
            13,
            "protocol.params.clients: 'carol' is not a party; parties: alice, bob",
        ),
        (
            lambda s: _protocol("{name: fedwad_coreset, params: {test: alice}}")(
                s.replace("[[0], [1]]", "[[0, 1]]").replace("[alice, bob]", "[alice]")
            ),
            13,
            "protocol.params.test: 'alice' is the only party: none is left to be a client",
        ),
        (
            lambda s: _partition("{name: distill_split}")(s).replace(
                "[alice, bob]", "[transfer, test]"
            ),
            11,
            "data.partition.params: no client party: transfer, test all hold server data",
        ),
        (
            lambda s: _partition(
                "{name: distill_split, params: {audit_target: audit, audit_rows: 2}}"
            )(s).replace("[alice, bob]", "[alice, transfer, test, audit]"),
            11,
            "data.partition.params: audit_target 'audit' is not a client party",
        ),
        (
            lambda s: _with_dataset(
                "{name: csv, params: {path: raw.csv, label_column: c}}"
            ).replace("  parties:", "  partition: {name: iid}\n  parties:"),
            4,
            "data.dataset.params.label_column: 'c': raw.csv has no header row (give the column's "
            "index)",
        ),
        (
            lambda s: _with_dataset(
                "{name: npy, params: {path: pts.npy, label_column: 3}}"
            ).replace("  parties:", "  partition: {name: iid}\n  parties:"),
            4,
            "data.dataset.params.label_column: 3 is out of range for the 3 columns of pts.npy",
        ),
        (
            lambda s: s + "defenses: [{name: pate_aggregation, params: {sigma: 1.0}}]\n",
            16,
            "defenses[0] 'pate_aggregation' does not apply to protocol 'fedwad' (it applies to: "
            "sinkhorn_distillation); there it would run and change nothing",
        ),
        (  # params fedwad's defenses have: refused as not applying, not as an unknown key
            lambda s: s + "defenses: [{name: dp_sgd_teachers, params: {senders: [alice]}}]\n",
            16,
            "defenses[0] 'dp_sgd_teachers' does not apply to protocol 'fedwad' (it applies to: "
            "sinkhorn_distillation)",
        ),
        (
            lambda s: (
                _SINKHORN_5 + "defenses:\n  - name: gaussian_measure_noise\n"
                "    params: {releases: 3, temperature: 2.0}\n"
            ),
            14,
            "defenses[0] 'gaussian_measure_noise' does not apply to protocol "
            "'sinkhorn_distillation' (it applies to: fedwad, ",
        ),
        (
            lambda s: (
                _protocol("{name: dp_sliced_wasserstein}")(s)
                + "defenses: [{name: subsample_support}]\n"
            ),
            14,
            "defenses[0] 'subsample_support' does not apply to protocol 'dp_sliced_wasserstein' "
            "(it applies to: fedwad, fedwad_clustering",
        ),
        (
            lambda s: _SINKHORN_5 + "  params: {label_coords: [[0], [1], [2], [3]]}\n",
            13,
            "protocol.params.label_coords: 4 rows (one per class), but the dataset's labels go "
            "up to 4 (5 classes): give 5",
        ),
        (
            lambda s: _SINKHORN_5 + "  params: {n_classes: 3}\n",
            13,
            "protocol.params.n_classes: 3 classes, but the dataset's labels go up to 4 (5 "
            "classes): give 5",
        ),
        (
            lambda s: _SINKHORN_5 + "  params: {label_coords: [[0], [1], [2], [3], [4, 1]]}\n",
            13,
            "protocol.params.label_coords: every class needs a coordinate of the same length, "
            "got lengths 1, 2",
        ),
        (
            lambda s: s.replace("d: 2", "d: 3").replace("mean: 0.0}", "mean: [0.0, 1.0]}"),
            8,
            "data.dataset.params.components: component 0: mean has 2 entries, d = 3",
        ),
        (
            lambda s: s.replace("mean: 3.0}", "mean: 3.0, cov: [[1.0, 0.0], [0.0]]}"),
            8,
            "data.dataset.params.components: component 1: cov must be 2 x 2, got 2 rows of "
            "lengths [1, 2]",
        ),
        (
            lambda s: _with_dataset("{name: csv, params: {path: pts.csv}}").replace(
                "  parties:",
                "  partition: {name: class_subsets, params: {classes: [[0], [1]]}}\n  parties:",
            ),
            5,
            "data.partition.name: partition 'class_subsets' needs labels, but dataset 'csv' has "
            "none (give data.dataset.params.label_column)",
        ),
        (
            lambda s: _with_dataset("{name: csv, params: {path: pts.csv}}").replace(
                "  parties:",
                "  partition: {name: iid}\n  transform: {name: otdd_augment}\n  parties:",
            ),
            6,
            "data.transform.name: transform 'otdd_augment' needs labels, but dataset 'csv' has "
            "none (give data.dataset.params.label_column)",
        ),
        *[
            (
                lambda s, spec=spec: _protocol(spec)(
                    _with_dataset("{name: csv, params: {path: pts.csv}}")
                ),
                6,
                f"protocol.name: protocol {name!r} needs labels ({why}), but dataset 'csv' has "
                "none (give data.dataset.params.label_column)",
            )
            for name, spec, why in _NEEDS_LABELS
        ],
        (
            lambda s: _SINKHORN_5.replace(_SINKHORN_DATA, _CSV_DATA).replace(
                "distill_split", "iid"
            ),
            8,
            "protocol.name: protocol 'sinkhorn_distillation' needs labels (the teachers' "
            "training and the student's test accuracy), but dataset 'csv' has none (give "
            "data.dataset.params.label_column)",
        ),
        (
            lambda s: (
                s + "defenses: [{name: gaussian_measure_noise, params: {target_epsilon: 1.0, "
                "releases: 3, clip_norm: 10.0}}]\n"
            ),
            16,
            "defenses[0].params.releases: releases=3, but party 'alice' of fedwad makes 4 releases "
            "this defense noises in a run (its params); the run would stop at release #4: give "
            "releases: 4",
        ),
        (
            lambda s: s + "attacks: [{name: fedwad_distributional, target: carol}]\n",
            16,
            "attacks[0].target: unknown party 'carol'; parties: alice, bob",
        ),
    ],
    ids=[
        "empty-class-list",
        "class-lists-vs-parties",
        "negative-class",
        "class-not-in-dataset",
        "fedwad-one-party",
        "dp-one-party",
        "clients-not-parties",
        "n-clusters-above-parties",
        "coreset-test-party-missing",
        "csv-label-column-not-in-header",
        "csv-label-index-out-of-range",
        "npy-label-column-name",
        "iid-sizes-vs-parties",
        "quantity-skew-fractions-vs-parties",
        "shared-base-holdout-not-a-party",
        "distill-split-server-party-missing",
        "fedwad-one-client",
        "triangle-one-client",
        "triangle-unknown-t-three-clients",
        "marketplace-buyer-not-a-party",
        "dp-moments-clients-not-parties",
        "fedbary-validation-not-a-party",
        "fedbary-validation-is-a-client",
        "fedbary-no-client-left",
        "clustered-fl-default-n-clusters",
        "sinkhorn-transfer-party-missing",
        "sinkhorn-no-client-party",
        "digits-class-not-in-dataset",
        "triangle-clients-not-parties",
        "dp-one-client",
        "fedbary-clients-not-parties",
        "coreset-clients-not-parties",
        "coreset-no-client-left",
        "distill-split-no-client-party",
        "distill-split-audit-target-not-a-client",
        "csv-label-name-without-header",
        "npy-label-index-out-of-range",
        "pate-on-fedwad",
        "dp-sgd-on-fedwad-with-a-measure-defense-param",
        "gaussian-noise-on-sinkhorn-with-unknown-params",
        "subsample-on-dp-sliced",
        "sinkhorn-label-coords-fewer-than-classes",
        "sinkhorn-n-classes-fewer-than-labels",
        "sinkhorn-label-coords-ragged",
        "gaussians-mean-vs-d",
        "gaussians-cov-vs-d",
        "csv-without-labels-class-subsets",
        "csv-without-labels-otdd-augment",
        *[f"csv-without-labels-{name}" for name, _, _ in _NEEDS_LABELS],
        "csv-without-labels-sinkhorn_distillation",
        "gaussian-noise-releases-below-fedwad-count",
        "attack-target-not-a-party",
    ],
)
def test_validate_refuses_what_run_would_refuse(tmp_path, capsys, mutate, line, needle):
    """Scenarios `testbed run` refused after validate had passed them (the party count, the
    partition against the parties and the dataset's labels, a CSV label column): validate names
    field and line, and run stops with the same line before it creates its directory."""
    import numpy as np

    (tmp_path / "pts.csv").write_text("x,y,c\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n")
    (tmp_path / "raw.csv").write_text("1,2,0\n3,4,1\n5,6,0\n7,8,1\n")
    np.save(tmp_path / "pts.npy", np.arange(12.0).reshape(4, 3))
    text = mutate(GOOD)
    code, out, err = _run(tmp_path, text, capsys)
    assert code == 2, out
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {tmp_path / 's.yaml'}:{line}: {needle}"), err
    assert "Traceback" not in err
    run_dir = tmp_path / "run"
    code, _, run_err = _run(tmp_path, text, capsys, "--out", str(run_dir), "-q", command="run")
    assert (code, run_err) == (2, err)
    assert not run_dir.exists()


def test_a_protocol_that_reads_no_labels_runs_on_a_dataset_without(tmp_path, capsys):
    """fedwad_coreset reads labels only for its 1-NN classifier: with ``local_coreset_size: 0``
    a CSV without a label column validates and runs."""
    (tmp_path / "pts.csv").write_text("x,y\n1,2\n3,4\n5,6\n7,8\n2,1\n4,3\n")
    text = _protocol(
        "{name: fedwad_coreset, params: {test: null, local_coreset_size: 0, coreset_size: 2, "
        "epochs: 1}}"
    )(_with_dataset("{name: csv, params: {path: pts.csv}}"))
    code, _, err = _run(tmp_path, text, capsys)
    assert code == 0, err
    code, _, err = _run(tmp_path, text, capsys, "--out", str(tmp_path / "run"), "-q", command="run")
    assert code == 0, err
    assert (tmp_path / "run" / "results.json").exists()


@pytest.mark.parametrize("protocol", ["fedwad", "triangle_wad", "dp_jl_ot"])
def test_an_empty_clients_list_is_the_default(tmp_path, capsys, protocol):
    """``clients: []`` means what null does (the protocols read it so): not an error."""
    code, _, err = _run(
        tmp_path, _protocol(f"{{name: {protocol}, params: {{clients: []}}}}")(GOOD), capsys
    )
    assert code == 0, err


@pytest.mark.parametrize(
    ("protocol", "needle"),
    [
        ("fedwad", "data.parties: protocol 'fedwad' needs at least 2 parties"),
        ("triangle_wad", "data.parties: protocol 'triangle_wad' needs at least 2 parties"),
        (
            "triangle_wad_marketplace",
            "data.parties: protocol 'triangle_wad_marketplace' needs at least 2 parties",
        ),
        ("dp_jl_ot", "data.parties: protocol 'dp_jl_ot' needs at least 2 parties"),
        (
            "dp_sliced_wasserstein",
            "data.parties: protocol 'dp_sliced_wasserstein' needs at least 2 parties",
        ),
        ("dp_gaussian_moments", "data.parties: protocol 'dp_gaussian_moments' needs at least 2"),
        ("fedwad_clustering", "protocol.params.n_clusters: 5 clusters asked of 1 party"),
        ("fedwad_clustered_fl", "protocol.params.clustering: n_clusters: 5 clusters asked of 1"),
        ("sinkhorn_distillation", "protocol.params.transfer: 'transfer' is not a party"),
    ],
)
def test_a_protocol_given_one_party_too_few_is_refused_by_validate(
    tmp_path, capsys, protocol, needle
):
    """Every built-in protocol that cannot run with one party says so at validate, naming the
    field and its line (the count is ``Protocol.min_parties``; named roles their Config)."""
    text = _protocol(f"{{name: {protocol}}}")(
        GOOD.replace("[[0], [1]]", "[[0, 1]]").replace("[alice, bob]", "[alice]")
    )
    code, _, err = _run(tmp_path, text, capsys)
    assert code == 2 and err.count("\n") == 1, err
    line = 12 if needle.startswith("data.parties") else 13
    assert err.startswith(f"error: {tmp_path / 's.yaml'}:{line}: {needle}"), err


@pytest.mark.parametrize(("low", "need"), [(1, "at most 2"), (2, "exactly 2")])
def test_a_protocols_max_parties_is_checked(tmp_path, capsys, monkeypatch, low, need):
    """``Protocol.max_parties`` (no built-in sets one): a third party is refused at validate."""
    from protocols.fedwad import FedWAD

    monkeypatch.setattr(FedWAD, "min_parties", low)
    monkeypatch.setattr(FedWAD, "max_parties", 2)
    text = _partition("{name: iid}")(GOOD).replace("[alice, bob]", "[alice, bob, carol]")
    code, _, err = _run(tmp_path, text, capsys)
    assert code == 2
    assert err == (
        f"error: {tmp_path / 's.yaml'}:12: data.parties: protocol 'fedwad' needs {need} "
        "parties, the scenario has 3 (alice, bob, carol)\n"
    )


def test_a_sweep_cell_that_run_would_refuse_is_refused_by_validate(tmp_path, capsys):
    """A sweep whose first cell has one party for a two-party protocol: validate names the line
    of the swept value; run stops with the same line and leaves no run directory behind."""
    text = GOOD.replace("class_subsets, params: {classes: [[0], [1]]}", "iid") + (
        "sweep:\n  data.parties: [[alice], [alice, bob]]\n"
    )
    code, _, err = _run(tmp_path, text, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "s.yaml:17: data.parties: protocol 'fedwad' needs at least 2 parties" in err, err
    assert "(in sweep cell data.parties=alice)" in err
    run_dir = tmp_path / "run"
    code, _, run_err = _run(tmp_path, text, capsys, "--out", str(run_dir), "-q", command="run")
    assert (code, run_err) == (2, err)
    assert not run_dir.exists()


def test_a_sweep_whose_first_cell_fails_leaves_no_directory(tmp_path, capsys):
    """A failure validate cannot see (a NaN in row 21 of a CSV file: validate reads its first
    row and counts the rows, the run reads the values) in the first cell: run exits 2 with one
    line and removes the directory it made, since no cell finished. (Sizes beyond the rows,
    this test's failure before, are now refused by validate.)"""
    rows = "".join(f"{i}.0,{i % 3}.5\n" for i in range(35)).replace("20.0,2.5", "20.0,nan")
    (tmp_path / "d.csv").write_text(rows)
    text = _with_dataset("{name: csv, params: {path: d.csv}}").replace(
        "parties: [alice, bob]", "partition: {name: iid}\n  parties: [alice, bob]"
    ) + ("sweep:\n  data.partition.params.sizes: [[15, 15], [5, 5]]\n")
    assert _run(tmp_path, text, capsys)[0] == 0
    run_dir = tmp_path / "run"
    code, _, err = _run(tmp_path, text, capsys, "--out", str(run_dir), "-q", command="run")
    assert code == 2 and err.count("\n") == 1, err
    assert err.endswith("d.csv:21: NaN or inf in column 1\n"), err
    assert not run_dir.exists()


def test_python_tag_is_refused_and_never_executed(tmp_path, capsys):
    marker = tmp_path / "pwned"
    text = GOOD.replace("seed: 3", f'seed: !!python/object/apply:os.system ["touch {marker}"]')
    code, _, err = _run(tmp_path, text, capsys)
    assert code == 2
    assert "not allowed" in err and "s.yaml:2:" in err
    assert not marker.exists()


def test_missing_data_file_names_the_field(tmp_path, capsys):
    text = _with_dataset("{name: csv, params: {path: nowhere.csv}}")
    code, _, err = _run(tmp_path, text, capsys)
    assert code == 2
    assert "data.dataset.params.path: data file not found" in err
    assert "s.yaml:4:" in err


def test_nan_in_data_names_file_and_line(tmp_path, capsys):
    csv = tmp_path / "pts.csv"
    csv.write_text("x,y\n1,2\n3,nan\n5,6\n")
    text = _with_dataset("{name: csv, params: {path: pts.csv}}")
    code, _, err = _run(tmp_path, text, capsys, "--out", str(tmp_path / "run"), "-q", command="run")
    assert code == 2
    assert "pts.csv:3: NaN or inf in column 1" in err
    assert err.count("\n") == 1


def test_missing_scenario_file(capsys, tmp_path):
    code = main(["validate", str(tmp_path / "nope.yaml")])
    assert code == 2
    assert "scenario file not found" in capsys.readouterr().err


def test_process_exit_code_and_no_traceback(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(GOOD.replace("seed: 3", "seed: -1"))
    proc = subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(f)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "bad.yaml:2: seed" in proc.stderr


def test_run_writes_run_directory_and_transcript_command(tmp_path, capsys):
    code, out, err = _run(
        tmp_path, GOOD, capsys, "--out", str(tmp_path / "run"), "-q", command="run"
    )
    assert code == 0, err
    run = tmp_path / "run"
    for f in [
        "results.json",
        "resolved.yaml",
        "config_hash",
        "envelopes.jsonl",
        "payloads.npz",
        "run_info.json",
    ]:
        assert (run / f).exists(), f
    assert "rel. error" in out and "results:" in out
    assert main(["transcript", str(run)]) == 0
    shown = capsys.readouterr().out
    assert "fedwad.xi_mu" in shown and "server -> alice" in shown
    assert main(["plugins"]) == 0
    assert "fedwad" in capsys.readouterr().out


def test_transcript_command_shows_which_defenses_acted_on_each_message(tmp_path, capsys):
    # before: neither table said which defense had changed a message, though each built-in
    # defense names itself in the message's meta (defended_by, hashed with the transcript)
    defenses = (
        "defenses:\n"
        "  - {name: gaussian_measure_noise, params: {clip_norm: 6.0, push_max: 0.5, "
        "noise_multiplier: 0.1, senders: [alice]}}\n"
        "  - {name: subsample_support, params: {fraction: 0.5}}\n"
        "output: {save_transcript: true}\n"
    )
    run = tmp_path / "run"
    code, _, err = _run(tmp_path, GOOD + defenses, capsys, "--out", str(run), "-q", command="run")
    assert code == 0, err
    assert main(["transcript", str(run), "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-2:] == ["defended", "by"]
    both = "gaussian_measure_noise, subsample_support"
    rows = [ln for ln in lines if "fedwad.xi_mu" in ln or "fedwad.xi_nu" in ln]
    assert rows and all(
        ln.rstrip().endswith(both if "alice" in ln else " subsample_support") for ln in rows
    ), rows
    assert all(ln.rstrip().endswith("-") for ln in lines if "server -> " in ln), lines
    assert lines[-1].startswith("defenses: gaussian_measure_noise acted on ")
    assert ", subsample_support acted on " in lines[-1]


def test_run_prints_the_tasks_own_metrics(tmp_path, capsys):
    """FedBary's pinned task metrics (contribution Spearman, detection AUC) are printed under
    the quantities, as results.json has them; a distance protocol prints no such line (its
    distance_accuracy is only 1 - the error above it)."""
    import json

    scenario = Path(__file__).parents[1] / "scenarios" / "contract_tiny_fedbary.yaml"
    assert main(["run", str(scenario), "--out", str(tmp_path / "fb"), "-q"]) == 0
    out = capsys.readouterr().out
    util = json.loads((tmp_path / "fb" / "results.json").read_text())["utility"]
    line = next(x for x in out.splitlines() if x.startswith("task utility:"))
    assert line == (
        f"task utility: contribution_spearman {util['contribution_spearman']:.3f}, "
        f"contribution_top_k {util['contribution_top_k']:.3f}, "
        f"detection_auc {util['detection_auc']:.3f}"
    )
    code, out, err = _run(tmp_path, GOOD, capsys, "--out", str(tmp_path / "w"), "-q", command="run")
    assert code == 0 and "task utility" not in out, err


def test_a_single_run_says_its_claimed_epsilon_and_failed_assumptions(tmp_path, capsys):
    """The run's summary: the claimed epsilon (``none`` without a DP defense) and the assumptions
    behind it that fail, worded as the report words them; those that hold are not listed: the
    norm bound (rows clipped at the party) and the push (t = 0.5 is a private share above
    push_max = 0.1, so the defense clips every atom and charges 2 C sqrt(S): issue 47) hold."""
    dp = GOOD + (
        "defenses: [{name: gaussian_measure_noise, params: {target_epsilon: 1.0, releases: 4, "
        "clip_norm: 1.0, push_max: 0.1}}]\n"
    )
    code, out, err = _run(tmp_path, dp, capsys, "--out", str(tmp_path / "dp"), "-q", command="run")
    assert code == 0, err
    res = json.loads((tmp_path / "dp" / "results.json").read_text())
    lines = [x for x in out.splitlines() if x.startswith(("claimed eps", "assumption"))]
    assert [x for x in res["privacy_assumptions"] if not x["holds"]] == []
    assert lines == [f"claimed eps: {fmt(res['privacy_epsilon'])}"]
    (push,) = [x for x in res["privacy_assumptions"] if "barycentric" in x["assumption"]]
    assert "exceeds push_max=0.1" in push["detail"] and "clipped to norm 1" in push["detail"]
    clipped = [x for x in res["privacy_assumptions"] if "L2 norm" in x["assumption"]]
    assert all(x["holds"] and "rows clipped at the party" in x["detail"] for x in clipped)
    code, out, err = _run(tmp_path, GOOD, capsys, "--out", str(tmp_path / "n"), "-q", command="run")
    assert code == 0, err
    assert [x for x in out.splitlines() if x.startswith(("claimed eps", "assumption"))] == [
        "claimed eps: ∞ (no DP defense)"
    ]


def test_failed_assumptions_name_three_parties_and_count_the_rest():
    from testbed.cli.summary import privacy_lines

    res = {
        "privacy_epsilon": "inf",
        "privacy": {"p0": {"epsilon": 1.0}},
        "privacy_assumptions": [
            {"party": f"p{i}", "assumption": "a", "holds": False, "detail": f"d{i}"}
            for i in range(5)
        ]
        + [{"party": "*", "assumption": "b", "holds": True, "detail": "fine"}],
    }
    assert privacy_lines(res) == [
        "claimed eps: ∞ (a party that sent has no DP claim; see the report)",
        "assumption failed, the claim does not hold: a (p0: d0; p1: d1; p2: d2; 2 more in the "
        "report)",
    ]


def _modules_after(code: str) -> set[str]:
    """The heavy modules a fresh interpreter has loaded after running ``code``."""
    names = ("torch", "ot", "matplotlib", "testbed.report.writer", "testbed.run.execute")
    probe = f"import sys\n{code}\nprint('\\nloaded:', *(m for m in {names!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=Path.cwd()
    )
    return set(out.stdout.rsplit("loaded:", 1)[1].split())


def test_help_lists_debug_exit_codes_and_the_transcript_options(capsys):
    for argv in (["--help"], ["transcript", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
    out = " ".join(capsys.readouterr().out.split())
    assert "--debug print the traceback of an error" in out
    assert "Exit codes: 0 done; 1 a plugin" in out and "130 interrupted" in out
    assert "--limit LIMIT messages listed (default 40)" in out and "--all list every message" in out


def test_help_imports_no_command(tmp_path):
    """`testbed --help` builds the parser only: no command module, so no torch, POT, report."""
    code = (
        "from testbed.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
    )
    assert _modules_after(code) == set()


def test_validate_does_not_load_the_report_or_the_runner(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(GOOD)
    code = f"from testbed.cli.main import main\nassert main(['validate', {str(f)!r}]) == 0\n"
    loaded = _modules_after(code)
    assert not loaded & {"testbed.report.writer", "testbed.run.execute", "matplotlib"}


# slow (4.3 s: a fresh interpreter per command): make test keeps the same rule for validate in
# tests/test_registry_lazy.py (test_validate_imports_no_numerical_library_for_any_shipped_scenario)
@pytest.mark.slow
def test_bad_input_to_computing_commands_is_refused_before_pot_and_torch_load(tmp_path):
    """`run`, `bench` and `audit` refuse bad input before POT (and the torch it imports) load:
    a missing file, a bad param, an unknown bench case answer in about a second, not after the
    seconds of those imports. POT loads where a run's time budget starts or at its first solve."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("support_size: 4", "support_size: -1"))
    assert "support_size: -1" in bad.read_text()
    for argv in (
        ["run", str(tmp_path / "missing.yaml")],
        ["run", str(bad)],
        ["audit", str(bad)],
        ["bench", "--cases", "nope"],
        ["bench", "--scenario", str(bad)],
    ):
        code = f"from testbed.cli.main import main\nassert main({argv!r}) == 2\n"
        assert not _modules_after(code) & {"ot", "torch"}, argv


# ----------------------------------------------------------------------------- a new user's path
def test_a_scenario_elsewhere_announces_its_run_directory(tmp_path, monkeypatch, capsys):
    """Issue 24, user's list 1 and 2: the run of a scenario kept in another folder goes under
    ./runs/ and the first line says so; report/attack/transcript take the scenario (file or
    name) and use its latest run, saying which; two runs given at once are one clear line."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    scenario = elsewhere / "tiny.yaml"
    scenario.write_text(GOOD)
    monkeypatch.chdir(work)
    assert main(["run", str(scenario), "-q"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    (run1,) = (work / "runs").iterdir()
    assert first.startswith(f"run directory: runs/{run1.name}/ (under the current directory")
    assert "not beside the scenario" in first
    # a second run of the edited scenario: a new hash, a second directory
    scenario.write_text(GOOD.replace("seed: 3", "seed: 4"))
    assert main(["run", str(scenario), "-q"]) == 0
    capsys.readouterr()
    (run2,) = set((work / "runs").iterdir()) - {run1}
    os.utime(run1 / "results.json", (1, 1))  # run1 finished long ago
    # a name: its latest run; the file: the run of its settings as they are now, said on stderr
    assert main(["transcript", "tiny", "--limit", "1"]) == 0
    cap = capsys.readouterr()
    assert cap.err.splitlines() == [
        f"using runs/{run2.name}/ (the latest of 2 runs of scenario 'tiny')"
    ]
    assert "using" not in cap.out
    os.utime(run2 / "results.json", (1, 1))  # now run1 is the latest, but not the file's
    os.utime(run1 / "results.json", (2, 2))
    assert main(["transcript", str(scenario), "--limit", "1"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"using runs/{run2.name}/ (the run of {scenario} as it is now, one of 2 runs)"
    ]
    scenario.write_text(GOOD.replace("seed: 3", "seed: 5"))  # edited, not run again
    assert main(["transcript", str(scenario), "--limit", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"using runs/{run1.name}/ (the latest of 2 runs of scenario 'tiny'; none was made with "
        f"{scenario} as it is now ("
    )
    assert err[0].endswith(f"`testbed run {scenario}` makes one)")
    # a run copied into the name of another config hash is not taken for that run (an auditor
    # found "the run of FILE as it is now" said of another scenario's run put under its name)
    import shutil

    aside = tmp_path / "aside"
    aside.mkdir()
    for d in (run1, run2):
        shutil.move(d, aside / d.name)
    shutil.copytree(aside / run1.name, work / "runs" / "tiny-00000000")
    assert main(["transcript", "tiny", "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert "tiny-00000000: its name says config hash 00000000, but it holds a run of" in err
    shutil.rmtree(work / "runs" / "tiny-00000000")
    for d in (run1, run2):
        shutil.move(aside / d.name, d)
    # what the README's old glob gave: two run directories
    assert main(["report", "runs/" + run1.name, "runs/" + run2.name]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 run directories given" in err[0]
    assert "testbed report SCENARIO.yaml" in err[0] and "unrecognized" not in err[0]
    # a run directory given as such is used without a word
    assert main(["transcript", str(run1), "--limit", "1"]) == 0
    assert "using" not in str(capsys.readouterr())
    # nothing to use: one line, exit 2
    assert main(["attack", "no_such_scenario"]) == 2
    assert "no finished run of scenario 'no_such_scenario'" in capsys.readouterr().err


def test_out_onto_another_scenarios_run_is_refused_before_running(tmp_path, capsys):
    """`--out` onto a directory holding another scenario's run: one line, exit 2, that run kept
    (a rerun of the same scenario with other settings replaces its own run)."""
    (tmp_path / "tiny.yaml").write_text(GOOD)
    (tmp_path / "other.yaml").write_text(GOOD.replace("name: tiny", "name: other"))
    out = str(tmp_path / "here")
    assert main(["run", str(tmp_path / "tiny.yaml"), "-q", "--out", out]) == 0
    before = (tmp_path / "here" / "results.json").read_bytes()
    capsys.readouterr()
    assert main(["run", str(tmp_path / "other.yaml"), "-q", "--out", out]) == 2
    cap = capsys.readouterr()
    assert cap.err.strip() == (
        f"error: {out}: holds a run of scenario 'tiny', not 'other'; choose another --out, "
        "or delete that directory to replace it"
    )
    assert cap.out == "" and (tmp_path / "here" / "results.json").read_bytes() == before
    (tmp_path / "tiny.yaml").write_text(GOOD.replace("seed: 3", "seed: 4"))
    assert main(["run", str(tmp_path / "tiny.yaml"), "-q", "--out", out]) == 0
    assert (tmp_path / "here" / "results.json").read_bytes() != before


def test_a_scenario_in_the_current_directory_is_announced_plainly(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(GOOD)
    assert main(["run", "tiny.yaml", "-q", "--out", "here"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "run directory: here/"


SWEPT = (
    GOOD
    + """\
defenses:
  - {name: gaussian_measure_noise, params: {clip_norm: 6.0, noise_multiplier: 1.0}}
sweep:
  - defenses[0].params.noise_multiplier: [1.0, 0.1]
  - defenses: [[]]
"""
)


def test_sweep_summary_names_fields_and_puts_the_baseline_first(tmp_path, capsys):
    f = tmp_path / "swept.yaml"
    f.write_text(SWEPT)
    assert main(["run", str(f), "-q", "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("protocol"))
    cols = [re.split(r"\s{2,}", line.strip()) for line in lines[head : head + 5]]
    assert cols[0] == ["protocol", "setting", "seeds", "rel. error", "claimed eps"]
    # the baseline first, then the sweep's own order (1.0 before 0.1, not alphabetical)
    assert [c[1] for c in cols[2:]] == ["no defense", "noise_multiplier=1", "noise_multiplier=0.1"]
    # the report's number format (testbed.report.fmt): three significant figures, a relative
    # error from 1000 % on in words; no "120770.24 %"
    errors = [c[3] for c in cols[2:]]
    assert all(re.fullmatch(r"\d{1,3}(\.\d+)? %|over 1000 % \(.+×\)", e) for e in errors)
    assert errors[1].startswith("over 1000 %")  # sigma = 1 on 20 points: the estimate is lost
    assert all(re.fullmatch(r"\d{1,3}(\.\d+)?|∞", c[4]) for c in cols[2:]), cols
    assert "rel. error: relative error of wasserstein, mean over seeds" in lines
    # a sweep has one transcript per cell: `testbed transcript SWEEP` says so and names one
    assert main(["transcript", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a sweep of 3 cells" in err[0], err
    cell = err[0].rsplit("testbed transcript ", 1)[1]
    assert main(["transcript", cell, "--limit", "1"]) == 0


def test_run_summary_folds_long_per_party_groups():
    """One quantity per party and kind (FedBary with 100 clients: 200 rows) would fill a screen:
    a group of more than five shows its first three, in natural order, and one row with how many
    more and the largest error among them; short groups and single quantities stay whole."""
    from testbed.cli.run import quantity_rows
    from testbed.run.evaluate import accuracy_of

    parties = {f"client_{i}": {} for i in range(12)} | {"server": {}}
    acc = {}
    for i in reversed(range(12)):  # the stored order is not the natural one
        acc[f"distance_client_{i}"] = accuracy_of(1.0 + i / 100, 1.0)
    acc["contribution_client_1"] = accuracy_of(0.5, 0.5)
    acc["contribution_client_2"] = accuracy_of(0.5, 0.4)
    acc["wasserstein"] = accuracy_of(2.0, 1.0)
    rows, hidden = quantity_rows(acc, parties)
    names = [r[0] for r in rows]
    assert names == [
        "distance_client_0",
        "distance_client_1",
        "distance_client_2",
        "... 9 more distance_*",
        "contribution_client_1",
        "contribution_client_2",
        "wasserstein",
    ]
    assert hidden == 9
    assert rows[3][3] == "max 11 %"  # client_11's error, the largest of those folded
    assert rows[1][3] == "1 %" and rows[-1][3] == "100 %"


def test_attack_on_a_run_whose_scenario_names_no_attack_says_how_to_give_one(tmp_path, capsys):
    f = tmp_path / "t.yaml"
    f.write_text(GOOD + "output: {save_transcript: true}\n")
    assert main(["run", str(f), "-q", "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    assert main(["attack", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {tmp_path / 'r'}: its scenario names no attack; give one with --attack NAME "
        "(`testbed plugins` lists them, e.g. --attack sent_rows)"
    ]
    assert not list((tmp_path / "r").glob("attacks-*.json"))  # no empty rows file
    assert main(["attack", str(tmp_path / "r"), "--attack", "sent_rows"]) == 0


@pytest.mark.parametrize("sweep", [False, True], ids=["single", "sweep"])
def test_validate_names_the_run_directory_that_run_writes(tmp_path, monkeypatch, capsys, sweep):
    """The hash validate prints is the one the run directory is named by (for a sweep: the
    sweep's hash over its cells, not the base scenario's)."""
    monkeypatch.chdir(tmp_path)
    text = GOOD + ("sweep:\n  protocol.params.support_size: [3, 4]\n" if sweep else "")
    (tmp_path / "s.yaml").write_text(text)
    assert main(["validate", "s.yaml"]) == 0
    said = capsys.readouterr().out.splitlines()[0]
    assert main(["run", "s.yaml", "-q"]) == 0
    capsys.readouterr()
    (made,) = (tmp_path / "runs").iterdir()
    assert said.endswith(f"testbed run writes runs/{made.name}/)"), said
    assert f"hash {made.name.rsplit('-', 1)[1]}" in said, said


def test_sweep_summary_keeps_apart_settings_that_read_alike_and_claims_of_senders(tmp_path, capsys):
    """Two grids setting different fields to the same values are four settings, not two
    averaged as seeds; a party that sends nothing (carol) does not make the claimed ε ∞."""
    f = tmp_path / "g.yaml"
    f.write_text(
        GOOD.replace("parties: [alice, bob]", "parties: [alice, bob, carol]")
        .replace("class_subsets, params: {classes: [[0], [1]]}", "iid")
        .replace("params: {support_size: 4, iterations: 3}", "params: {clients: [alice, bob]}")
        + "defenses:\n  - {name: gaussian_measure_noise, params: {clip_norm: 6.0, "
        "noise_multiplier: 1.0}}\n" + "sweep:\n  - protocol.params.support_size: [3, 4]\n"
        "  - protocol.params.iterations: [3, 4]\n"
    )
    out = tmp_path / "out"
    assert main(["run", str(f), "-q", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("protocol"))
    cols = [re.split(r"\s{2,}", line.strip()) for line in lines[head + 2 : head + 6]]
    assert [c[1] for c in cols] == [
        "support_size=3",
        "support_size=4",
        "iterations=3",
        "iterations=4",
    ], lines
    assert all(c[2] == "1" for c in cols)  # one seed each, nothing averaged together
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    claims = {r["results"]["privacy_epsilon"] for r in rows}  # the ledger's, over senders
    assert all(math.isfinite(c) for c in claims)
    assert {c[-1] for c in cols} == {fmt(c) for c in claims}, cols  # no ∞ from carol
    with open(out / "summary.csv") as fh:
        settings = {r["setting"] for r in csv.DictReader(fh)}
    assert settings == {"support_size=3", "support_size=4", "iterations=3", "iterations=4"}


def test_nested_list_values_keep_their_structure_in_labels():
    from testbed.scenario.cells import value_label

    assert value_label([[0], [1, 2]]) != value_label([[0, 1], [2]])
    assert value_label([[0], [1, 2]]) == "[0]+[1+2]" and value_label([0, 1]) == "0+1"


def test_sweep_summary_does_not_cut_names_into_lookalikes(tmp_path, capsys):
    from testbed.cli.summary import sweep_rows

    f = tmp_path / "s.yaml"
    f.write_text(GOOD + "sweep:\n  protocol.params.support_size: [3, 4]\n")
    assert main(["run", str(f), "-q", "--out", str(tmp_path / "o")]) == 0
    rows = [json.loads(x) for x in (tmp_path / "o" / "results.jsonl").read_text().splitlines()]
    for r, tail in zip(rows, ("a", "b")):  # two series alike in their first 30 characters
        r["labels"] = {"protocol": "p" * 40 + tail}
    _, table, _ = sweep_rows(rows)
    assert sorted(t[0] for t in table) == ["p" * 40 + "a", "p" * 40 + "b"]
    # names that differ early are not cut either (issue 51: "fedwad(interpolation=exact,ite")
    for r, head in zip(rows, ("a", "b")):
        r["labels"] = {"protocol": head + "q" * 40}
    _, table, _ = sweep_rows(rows)
    assert sorted(t[0] for t in table) == ["a" + "q" * 40, "b" + "q" * 40]


def test_fedbary_support_size_above_the_pooled_rows_is_bad_input(tmp_path, capsys):
    """fedbary without a validation party: the reference barycenter starts from support_size
    distinct pooled client rows; more than the 35 rows is bad input (exit 2, the param named).
    The partition tells the rows before loading, so validate refuses it at its line as run
    does, before the run directory; a run that gets past (execute) refuses it at its start."""
    from testbed.errors import DataError
    from testbed.run import execute
    from testbed.scenario.loading import load_scenario

    text = _protocol("{name: fedbary, params: {support_size: 50, iterations: 1}}")(GOOD)
    why = (
        "protocol.params.support_size: 50 is more than the 35 rows the clients hold together "
        "(alice, bob); with no validation party the reference barycenter starts from "
        "support_size of their rows: give at most 35"
    )
    line = text.splitlines().index(
        "protocol: {name: fedbary, params: {support_size: 50, iterations: 1}}"
    )
    code, _, err = _run(tmp_path, text, capsys)
    assert (code, err) == (2, f"error: {tmp_path / 's.yaml'}:{line + 1}: {why}\n")
    code, _, run_err = _run(tmp_path, text, capsys, "--out", str(tmp_path / "run"), command="run")
    assert (code, run_err) == (2, err) and not (tmp_path / "run").exists()
    with pytest.raises(DataError, match=re.escape(f"fedbary: {why}")):
        execute(load_scenario(tmp_path / "s.yaml"), tmp_path / "run")
    # 35 rows: valid; a random split (an upper bound of the rows) is not refused below it
    assert _run(tmp_path, text.replace("support_size: 50", "support_size: 35"), capsys)[0] == 0
    random = _partition("{name: dirichlet, params: {alpha: 0.5}}")(text)
    assert _run(tmp_path, random.replace("size: 50", "size: 35"), capsys)[0] == 0
    assert _run(tmp_path, random, capsys)[0] == 2


def test_csv_rows_count_a_last_line_without_its_newline(tmp_path):
    from testbed.scenario.resources import _csv_shape

    for text in ("1,2\n3,4\n5,6", "1,2\n3,4\n5,6\n"):
        (tmp_path / "d.csv").write_text(text)
        assert _csv_shape(tmp_path / "d.csv") == (3, 2)


def test_distill_split_too_few_rows_names_distill_split(tmp_path, capsys):
    """distill_split on too little data: the message names distill_split, its 10-row minimum per
    client and its params, not the inner 'partition dirichlet' the scenario never used. The
    dataset's size tells it before loading: validate refuses it at the partition's line, as
    run does, and no run directory is made; a run that gets past (execute) refuses it when it
    splits the data, with the same words."""
    from testbed.errors import DataError
    from testbed.run import execute
    from testbed.scenario.loading import load_scenario

    text = _partition("{name: distill_split}")(GOOD).replace(
        "[alice, bob]", "[transfer, test, alice, bob]"
    )
    text = _protocol("{name: sinkhorn_distillation}")(text)
    why = (
        "partition distill_split: could not give each of the 2 clients (alice, bob) 10 rows (the "
        "minimum) from the 18 of 35 rows left after test_fraction=0.2 and transfer_fraction=0.3, "
        "with label skew alpha=0.5; use more rows, fewer clients, smaller fractions or a larger "
        "alpha"
    )
    line = text.splitlines().index("  partition: {name: distill_split}") + 1
    code, _, err = _run(tmp_path, text, capsys)
    assert (code, err) == (2, f"error: {tmp_path / 's.yaml'}:{line}: data.partition.name: {why}\n")
    code, _, err = _run(tmp_path, text, capsys, "--out", str(tmp_path / "run"), "-q", command="run")
    assert code == 2 and "dirichlet" not in err and "Traceback" not in err
    assert err.strip().endswith(why) and not (tmp_path / "run").exists(), err
    with pytest.raises(DataError, match=re.escape(why)):
        execute(load_scenario(tmp_path / "s.yaml"), tmp_path / "run")
    # 20 client rows (40 in all): enough for the check; the split itself may still redraw
    roomy = text.replace("{n: 15, mean: 3.0}", "{n: 20, mean: 3.0}")
    assert _run(tmp_path, roomy, capsys)[0] == 0


def test_distill_split_audit_rows_beyond_the_target_s_largest_share(tmp_path, capsys):
    """audit_rows needs 3x as many rows in the audited client; more than the most that client
    can get (the client rows less the other clients' 10-row minimum) is refused at its line."""
    text = _partition("{name: distill_split, params: {audit_target: alice, audit_rows: AUDIT}}")(
        GOOD.replace("{n: 15, mean: 3.0}", "{n: 80, mean: 3.0}")
    ).replace("[alice, bob]", "[transfer, test, audit, alice, bob]")
    text = _protocol("{name: sinkhorn_distillation}")(text)
    # 100 rows: 20 test, 30 transfer, 50 for the clients; alice gets at most 40
    code, _, err = _run(tmp_path, text.replace("AUDIT", "14"), capsys)
    assert code == 2 and "data.partition.params.audit_rows: partition distill_split: " in err
    assert err.strip().endswith(
        "audit_rows=14 needs 3x as many rows in 'alice', which gets at most 40 of the 50 client "
        "rows"
    ), err
    assert _run(tmp_path, text.replace("AUDIT", "13"), capsys)[0] == 0


def test_dirichlet_min_size_beyond_the_rows_is_bad_input(tmp_path, capsys):
    """dirichlet's min_size for every party needs parties x min_size rows: more than the dataset
    has is refused at min_size's line; the default min_size, at the partition's."""
    text = _partition("{name: dirichlet, params: {min_size: 18}}")(GOOD)
    line = text.splitlines().index("  partition: {name: dirichlet, params: {min_size: 18}}") + 1
    code, _, err = _run(tmp_path, text, capsys)
    assert (code, err) == (
        2,
        f"error: {tmp_path / 's.yaml'}:{line}: data.partition.params.min_size: partition "
        "dirichlet: 2 parties of at least min_size=18 rows need 36 rows; the dataset has 35\n",
    )
    assert _run(tmp_path, text.replace("min_size: 18", "min_size: 17"), capsys)[0] == 0
    many = _partition("{name: dirichlet}")(GOOD).replace(
        "[alice, bob]", "[" + ", ".join(f"p{i}" for i in range(36)) + "]"
    )
    code, _, err = _run(tmp_path, many, capsys)
    assert code == 2 and ": data.partition.name: partition dirichlet: 36 parties" in err, err


def test_iid_beyond_the_rows_is_bad_input(tmp_path, capsys):
    """More parties than rows, or sizes asking for more rows than the dataset has: refused at
    validate (before: the run failed with 'party ... received no rows', no file or line)."""
    many = _partition("{name: iid}")(GOOD).replace(
        "[alice, bob]", "[" + ", ".join(f"p{i}" for i in range(36)) + "]"
    )
    code, _, err = _run(tmp_path, many, capsys)
    assert code == 2 and err.endswith(
        ": data.partition.name: partition iid: 36 parties cannot each get a row of the "
        "dataset's 35; use fewer parties or more rows\n"
    ), err
    assert _run(tmp_path, many.replace(", p35]", "]"), capsys)[0] == 0
    sized = _partition("{name: iid, params: {sizes: [20, 16]}}")(GOOD)
    code, _, err = _run(tmp_path, sized, capsys)
    assert (
        code == 2 and "params.sizes: partition iid: the sizes ask for 36 rows; the dataset " in err
    )
    assert _run(tmp_path, sized.replace("16]", "15]"), capsys)[0] == 0


def test_a_seed_beside_seeds_is_named_as_unused(tmp_path, capsys, scenarios_dir):
    text = (scenarios_dir / "contract_tiny.yaml").read_text()
    assert "seed: 7" in text
    f = tmp_path / "s.yaml"
    f.write_text(text + "seeds: [0, 1]\n")
    assert main(["validate", str(f)]) == 0
    err = capsys.readouterr().err
    assert err == f"note: {f}:3: seed is not used: seeds: gives every run's seed\n"
    f.write_text(text.replace("seed: 7\n", "") + "seeds: [0, 1]\n")
    assert main(["validate", str(f)]) == 0
    assert "note:" not in capsys.readouterr().err


def test_a_run_the_guard_recorded_leaks_in_says_so():
    # guard: record lets a leaky protocol finish; the summary read as clean, the violation
    # was only in results.json
    from testbed.cli.summary import privacy_lines

    finding = (
        "privacy guard: message #0 raw_row.debug (round 0) from alice to server carries a "
        "near-copy of a private row of 'alice' at value[0] (distance 0 <= threshold 1.46e-06)"
    )
    res = {"guard": {"mode": "record", "violations": 2, "findings": [{"message": finding}]}}
    lines = privacy_lines(res)
    assert lines == [
        "privacy guard (record): 2 violation(s), every one in results.json guard.findings; "
        "the first: " + finding.removeprefix("privacy guard: ")
    ]
    assert privacy_lines({"guard": {"mode": "stop", "violations": 0, "findings": []}}) == []
