"""OTDD label augmentation (transform ``otdd_augment``) and the central label-aware OTDD."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed import ot as tot
from testbed.data.datasets import PartyData
from testbed.data.otdd import augment, class_statistics, otdd_distance
from testbed.errors import DataError
from testbed.measure import Measure
from testbed.registry import TRANSFORMS


def _labelled(seed: int, n: int, d: int = 3, shift: float = 0.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    X = rng.normal(size=(n, d)) * (1 + y[:, None]) + shift + y[:, None]
    return X, y


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 1000), cov=st.sampled_from(["diagonal", "full"]))
def test_augmented_w2_equals_central_otdd_with_matching_label_cost(seed, cov):
    # Prepare
    X1, y1 = _labelled(seed, 40)
    X2, y2 = _labelled(seed + 1, 50, shift=1.0)
    # Execute
    w_aug = tot.wasserstein(Measure(augment(X1, y1, cov)), Measure(augment(X2, y2, cov)))
    # Assert: ||x-x'||^2 + ||m-m'||^2 + ||S^1/2 - S'^1/2||_F^2 is exactly what the vectors compute
    np.testing.assert_allclose(w_aug, otdd_distance(X1, y1, X2, y2, cov, "augmented"), rtol=1e-9)


def test_diagonal_bures_equals_augmented_and_eq14_differs():
    X1, y1 = _labelled(0, 60)
    X2, y2 = _labelled(1, 70, shift=2.0)
    aug = otdd_distance(X1, y1, X2, y2, "diagonal", "augmented")
    # commuting (diagonal) covariances: Bures^2 = ||S^1/2 - S'^1/2||_F^2
    np.testing.assert_allclose(otdd_distance(X1, y1, X2, y2, "diagonal", "bures"), aug, rtol=1e-9)
    assert otdd_distance(X1, y1, X2, y2, "diagonal", "eq14") != pytest.approx(aug, rel=1e-6)
    # labels add cost: never below the label-free W2
    assert aug >= tot.wasserstein(Measure(X1), Measure(X2))


def test_transform_shapes_and_own_statistics_only():
    # Prepare
    X, y = _labelled(2, 30, d=4)
    party = PartyData("p", X, y)
    tr_cls = TRANSFORMS.get("otdd_augment")
    # Execute
    diag = tr_cls(tr_cls.Config()).apply(party)
    full = tr_cls(tr_cls.Config(covariance="full")).apply(party)
    # Assert
    assert diag.X.shape == (30, 12) and full.X.shape == (30, 4 + 4 + 16)
    np.testing.assert_array_equal(diag.X[:, :4], X)
    stats = class_statistics(X, y)
    for i in range(30):
        np.testing.assert_allclose(diag.X[i, 4:8], stats[int(y[i])][0])
    assert not diag.X.flags.writeable


def test_full_sqrt_covariance_squares_back():
    X, y = _labelled(3, 80, d=3)
    for _m, S, R in class_statistics(X, y, "full").values():
        np.testing.assert_allclose(R @ R, S, atol=1e-10)


def test_missing_labels_is_a_data_error():
    with pytest.raises(DataError, match="labels"):
        augment(np.zeros((3, 2)), None)
