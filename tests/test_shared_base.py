"""The ``shared_base`` partitioner: holdout parties get disjoint rows, all others the same rows."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.data.datasets import Dataset
from testbed.data.partitions import SharedBase, SharedBaseConfig
from testbed.errors import DataError


def test_holdout_disjoint_and_base_shared():
    ds = Dataset(np.arange(100.0)[:, None])
    part = SharedBase(SharedBaseConfig(holdout={"val": 30}, base_size=20))
    out = part.split(ds, ["val", "a", "b"], np.random.default_rng(0))
    assert len(out["val"]) == 30 and len(out["a"]) == 20
    np.testing.assert_array_equal(out["a"], out["b"])
    assert not set(out["val"]) & set(out["a"])


def test_too_many_rows_or_unknown_holdout_refused():
    ds = Dataset(np.zeros((10, 1)))
    with pytest.raises(DataError, match="needs 12 rows"):
        SharedBase(SharedBaseConfig(holdout={"v": 6}, base_size=6)).split(
            ds, ["v", "a"], np.random.default_rng(0)
        )
    with pytest.raises(DataError, match="not parties"):
        SharedBase(SharedBaseConfig(holdout={"x": 2}, base_size=2)).split(
            ds, ["v", "a"], np.random.default_rng(0)
        )
