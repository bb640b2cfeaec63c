"""Datasets, partitioners and noise injection."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.data.datasets import Dataset, NoiseSpec, build_parties
from testbed.data.files import CsvFile, FileConfig
from testbed.data.partitions import (
    ClassSubsets,
    ClassSubsetsConfig,
    DirichletConfig,
    DirichletLabel,
    Iid,
    IidConfig,
    QuantityConfig,
    QuantitySkew,
)
from testbed.errors import DataError
from testbed.registry import DATASETS


def _pool(n=300, classes=5, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return Dataset(rng.normal(size=(n, d)), np.arange(n) % classes, "pool")


def _disjoint_cover(split, n):
    idx = np.concatenate(list(split.values()))
    assert len(idx) == len(set(idx.tolist())), "partitions overlap"
    assert idx.max() < n


@pytest.mark.parametrize(
    "partitioner",
    [
        Iid(IidConfig()),
        Iid(IidConfig(sizes=[10, 20, 30])),
        QuantitySkew(QuantityConfig(fractions=[0.1, 0.3, 0.6])),
        DirichletLabel(DirichletConfig(alpha=0.3)),
        ClassSubsets(ClassSubsetsConfig(classes=[[0, 1], [2, 3], [3, 4]])),
    ],
    ids=["iid", "iid-sizes", "quantity", "dirichlet", "class-subsets"],
)
def test_partitions_are_disjoint(partitioner):
    ds = _pool()
    split = partitioner.split(ds, ["a", "b", "c"], np.random.default_rng(1))
    assert set(split) == {"a", "b", "c"}
    _disjoint_cover(split, ds.n)


def test_class_subsets_hold_only_their_classes():
    ds = _pool()
    split = ClassSubsets(ClassSubsetsConfig(classes=[[0, 1], [2]])).split(
        ds, ["a", "b"], np.random.default_rng(0)
    )
    assert set(ds.y[split["a"]]) == {0, 1}
    assert set(ds.y[split["b"]]) == {2}


def test_dirichlet_small_alpha_skews_labels():
    ds = _pool(n=2000, classes=10)
    split = DirichletLabel(DirichletConfig(alpha=0.1)).split(
        ds, [f"p{i}" for i in range(5)], np.random.default_rng(0)
    )
    # with alpha = 0.1 most parties are dominated by few classes
    top_share = [np.bincount(ds.y[idx], minlength=10).max() / len(idx) for idx in split.values()]
    assert np.median(top_share) > 0.3


def test_requesting_more_rows_than_exist_is_an_error():
    with pytest.raises(DataError, match="only 300"):
        Iid(IidConfig(sizes=[200, 200])).split(_pool(), ["a", "b"], np.random.default_rng(0))


def test_noise_injection_records_ground_truth():
    ds = _pool(n=200)
    parties, masks = build_parties(
        ds,
        Iid(IidConfig()),
        ["a", "b"],
        np.random.default_rng(0),
        [
            NoiseSpec(party="b", kind="features", rate=0.2, scale=3.0),
            NoiseSpec(party="a", kind="labels", rate=0.1),
        ],
        np.random.default_rng(1),
    )
    assert masks["b"].sum() == 20 and masks["a"].sum() == 10
    src_b = ds.X[parties["b"].source_index]
    changed = np.any(parties["b"].X != src_b, axis=1)
    np.testing.assert_array_equal(changed, masks["b"])
    flipped = parties["a"].y != ds.y[parties["a"].source_index]
    np.testing.assert_array_equal(flipped, masks["a"])
    assert not parties["a"].X.flags.writeable


def test_empty_party_is_an_error():
    ds = _pool(n=20, classes=2)
    with pytest.raises(DataError, match="class 7 has no rows"):
        build_parties(
            ds,
            ClassSubsets(ClassSubsetsConfig(classes=[[0], [7]])),
            ["a", "b"],
            np.random.default_rng(0),
        )


def test_nan_in_pool_is_an_error():
    ds = _pool()
    X = ds.X.copy()
    X[5, 2] = np.inf
    with pytest.raises(DataError, match="row 5, column 2"):
        build_parties(Dataset(X, ds.y), Iid(IidConfig()), ["a"], np.random.default_rng(0))


def test_csv_with_header_and_label_column(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text("a,b,label\n1,2,0\n3,4,1\n5,6,1\n")
    cfg = FileConfig.model_validate({"path": str(f), "label_column": "label"})
    ds = CsvFile(cfg).load(np.random.default_rng(0))
    np.testing.assert_array_equal(ds.X, [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(ds.y, [0, 1, 1])


def test_csv_ragged_row_names_the_line(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text("1,2\n3\n")
    with pytest.raises(DataError, match="d.csv:2: expected 2 columns"):
        CsvFile(FileConfig.model_validate({"path": str(f)})).load(np.random.default_rng(0))


def test_npy_roundtrip(tmp_path):
    f = tmp_path / "d.npy"
    np.save(f, np.arange(12.0).reshape(4, 3))
    cls = DATASETS.get("npy")
    ds = cls(cls.Config.model_validate({"path": str(f), "label_column": 2})).load(
        np.random.default_rng(0)
    )
    assert ds.X.shape == (4, 2) and ds.y.tolist() == [2, 5, 8, 11]


@pytest.mark.parametrize("name", ["digits", "wine", "breast_cancer", "iris", "diabetes"])
def test_sklearn_datasets_load_offline(name):
    cls = DATASETS.get(name)
    ds = cls(cls.Config()).load(np.random.default_rng(0))
    assert ds.X.ndim == 2 and len(ds.y) == ds.n and np.isfinite(ds.X).all()


def test_gaussians_dataset_matches_its_parameters():
    cls = DATASETS.get("gaussians")
    cfg = cls.Config.model_validate(
        {"d": 2, "components": [{"n": 4000, "mean": [1.0, -1.0], "std": 2.0}]}
    )
    ds = cls(cfg).load(np.random.default_rng(0))
    np.testing.assert_allclose(ds.X.mean(0), [1.0, -1.0], atol=0.1)
    np.testing.assert_allclose(ds.X.std(0), [2.0, 2.0], rtol=0.05)
