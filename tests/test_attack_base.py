"""Attack base: output schema, prior-only baseline, the public prior, observed()."""

from __future__ import annotations

import numpy as np
import pytest

from attacks import AttackOutputError, validate_outputs
from testbed.api import AttackOutput, observed, prior_points
from testbed.data.public import gaussian_prior
from testbed.exchange.bus import Bus, PrivacyGuard, PublicInfo
from testbed.measure import Measure

PUB = PublicInfo(protocol="x", parties=("alice", "bob"), dim=2, extra={"candidates": [1, 2, 3]})


@pytest.mark.parametrize(
    ("out", "match"),
    [
        (AttackOutput(kind="points", target="carol", points=np.zeros((2, 2))), "not a party"),
        (AttackOutput(kind="points", target="bob", points=np.zeros((2, 3))), "dimension"),
        (AttackOutput(kind="points", target="bob", points=np.full((2, 2), np.nan)), "finite"),
        (
            AttackOutput(kind="points", target="bob", points=np.zeros((2, 2)), weights=[1, 1]),
            "weights",
        ),
        (AttackOutput(kind="scores", target="bob", scores=np.zeros(2)), "candidates"),
        (AttackOutput(kind="words", target="bob", words=["a"]), "tuple of str"),
        (AttackOutput(kind="histogram", target="bob", histogram=np.array([-1.0, 2])), "mass"),
    ],
)
def test_validate_outputs_rejects(out, match):
    with pytest.raises(AttackOutputError, match=match):
        validate_outputs([out], PUB)


def test_validate_outputs_accepts_and_rejects_non_lists():
    ok = AttackOutput(kind="points", target="bob", points=np.ones((3, 2)))
    assert validate_outputs([ok], PUB) == [ok]
    with pytest.raises(AttackOutputError, match="list"):
        validate_outputs(ok, PUB)


def test_prior_points_party_uses_own_rows_server_uses_public_prior():
    # Prepare
    rng = np.random.default_rng(0)
    X = {"alice": rng.normal(size=(5, 2)), "bob": rng.normal(size=(4, 2))}
    prior = rng.normal(size=(6, 2))
    bus = Bus()
    bus.send("alice", "server", "p.m", Measure(X["alice"] + 1))
    pub = PublicInfo(parties=("alice", "bob"), dim=2, prior=prior)
    # Execute / Assert
    np.testing.assert_array_equal(
        prior_points(bus.transcript.view("alice", own_data=X), pub), X["alice"]
    )
    np.testing.assert_array_equal(
        prior_points(bus.transcript.view("server", own_data=X), pub), prior
    )
    assert len(observed(bus.transcript.view("server"))) == 1
    assert observed(bus.transcript.view("bob")) == []
    assert len(observed(bus.transcript.view("eavesdropper"))) == 1


def test_gaussian_prior_moments_and_no_private_row():
    # Prepare
    rng = np.random.default_rng(1)
    X = rng.normal([1.0, -2.0], [1.0, 3.0], size=(4000, 2))
    # Execute
    mean, cov, sample = gaussian_prior(X, np.random.default_rng(2), 4000)
    # Assert: pooled moments; the sample carries no private row; same seed, same sample
    np.testing.assert_allclose(mean, X.mean(axis=0))
    np.testing.assert_allclose(cov, np.cov(X, rowvar=False), atol=1e-8)
    np.testing.assert_allclose(sample.mean(axis=0), mean, atol=0.15)
    assert PrivacyGuard({"p": X}).find(sample) is None
    np.testing.assert_array_equal(sample, gaussian_prior(X, np.random.default_rng(2), 4000)[2])
