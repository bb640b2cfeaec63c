"""Every registered protocol through the public protocol contract kit (testbed.testing), one test
per (protocol, check); toy protocols that break one check each fail the kit under that check's
name."""

from __future__ import annotations

import pytest

from testbed.registry import PROTOCOLS
from testbed.testing import check_protocol, private_row_findings, protocol_checks, protocol_run
from tests._toy_protocols import (
    TOYS,
    LeakyMean,
    OffReference,
    PrivateMean,
    UndeclaredKind,
    Unseeded,
    registered,
)

#: (protocol, check) -> why it is known to fail. Keep reasons concrete.
EXPECTED_FAILURES: dict[tuple[str, str], str] = {}
#: (protocol, check) in make test-slow: 3-4 s each on an idle core (the guard's scan of every
#: message, the central reference); the protocol's other checks, which run it, stay in make test
SLOW_CASES = {
    ("fedwad_coreset", "no_private_rows"),
    ("fedwad_clustered_fl", "no_private_rows"),
    ("fedwad_clustered_fl", "matches_reference"),
}


def _cases():
    for name, cls in PROTOCOLS.items():
        for check, _ in protocol_checks(cls):
            marks = []
            reason = EXPECTED_FAILURES.get((name, check))
            if reason:
                marks.append(pytest.mark.xfail(reason=reason, strict=True))
            if (name, check) in SLOW_CASES:
                marks.append(pytest.mark.slow)
            yield pytest.param(cls, check, id=f"protocol:{name}:{check}", marks=marks)


@pytest.mark.parametrize(("cls", "check"), list(_cases()))
def test_protocol_contract(cls, check):
    # Execute / Assert (the check raises on failure)
    dict(protocol_checks(cls))[check]()


def test_issue16_protocols_are_in_the_kit():
    ids = {c.id for c in _cases()}
    for name in ("fedwad_coreset", "fedwad_clustered_fl"):
        assert f"protocol:{name}:matches_reference" in ids
        assert f"protocol:{name}:no_private_rows" in ids


@pytest.fixture(scope="module")
def toys():
    with registered(*TOYS):
        yield


def test_a_private_toy_passes_the_kit(toys):
    assert set(check_protocol(PrivateMean).values()) == {"passed"}


@pytest.mark.parametrize(
    ("cls", "check", "words"),
    [
        pytest.param(LeakyMean, "no_private_rows", "toy_leaky_mean.sample", id="leaky"),
        pytest.param(UndeclaredKind, "declared_kinds_only", "toy_undeclared_kind.hello", id="kind"),
        pytest.param(Unseeded, "deterministic", "different transcripts", id="unseeded"),
        pytest.param(
            OffReference, "matches_reference", "mean_distance: relative error 1", id="ref"
        ),
    ],
)
def test_a_broken_toy_fails_the_kit_naming_the_check(toys, cls, check, words):
    # Execute
    with pytest.raises(AssertionError) as err:
        check_protocol(cls)
    # Assert: exactly this check failed, and the message says what was wrong
    msg = str(err.value)
    failed = [line.split(":")[0].strip() for line in msg.splitlines()[1:]]
    if cls is UndeclaredKind:  # the typed channel refuses the kind: no run finishes at all
        assert check in failed and "is not a declared kind" in msg, msg
    else:
        assert failed == [check], msg
    assert words in msg


def test_the_leak_is_found_under_every_threat_model_that_sees_it(toys):
    found = private_row_findings(protocol_run(LeakyMean))
    # the sample goes to the server: the server and the eavesdropper see both parties' rows,
    # each party sees only its own message (its own rows are not a leak)
    assert {f.party for f in found["server"]} == {"alice", "bob"}
    assert {f.party for f in found["eavesdropper"]} == {"alice", "bob"}
    assert found["alice"] == [] and found["bob"] == []


def test_an_undeclared_tolerance_or_kind_set_fails(toys, monkeypatch):
    monkeypatch.setattr(PrivateMean, "reference_tolerance", None)
    monkeypatch.setattr(PrivateMean, "message_kinds", ())
    with pytest.raises(AssertionError) as err:
        check_protocol(PrivateMean)
    assert "declares no reference_tolerance" in str(err.value)
    assert "declares no message_kinds" in str(err.value)


def test_an_unregistered_protocol_is_refused_with_one_line():
    class Stray(PrivateMean):
        name = "toy_stray"

    with pytest.raises(AssertionError, match="not registered as 'toy_stray'"):
        check_protocol(Stray)


def test_a_scenario_not_found_is_one_error_not_one_per_check(monkeypatch):
    """Before, check_protocol(cls, scenario='nope.yaml') listed the same 'not found (looked in
    ...)' line under every check that runs the protocol (a walk-through's finding)."""
    from testbed.errors import TestbedError

    monkeypatch.setitem(PROTOCOLS._items, PrivateMean.name, PrivateMean)
    with pytest.raises(TestbedError, match="nope.yaml") as info:
        check_protocol(PrivateMean, scenario="nope.yaml")
    assert "looked in" in str(info.value) and "contract" not in type(info.value).__name__.lower()


def test_a_protocol_plugin_that_sends_measures_opts_in_to_the_measure_defenses(
    tmp_path, capsys, monkeypatch
):
    """gaussian_measure_noise (and every defense that acts on the built-in measure protocols)
    refused any protocol plugin, saying it 'would change nothing' even for one that sends
    Measures (a walk-through's finding); `sends_measures = True` on the protocol opts it in."""
    import re

    from _scenarios import tiny

    from testbed.cli.main import main

    class MeasureMean(PrivateMean):
        name = "toy_measure_mean"

    monkeypatch.setitem(PROTOCOLS._items, MeasureMean.name, MeasureMean)
    monkeypatch.setitem(PROTOCOLS._origins, MeasureMean.name, f"{__name__}.MeasureMean")
    text = re.sub(r"protocol:\n(  .*\n)+", "protocol: {name: toy_measure_mean}\n", tiny("m"))
    f = tmp_path / "s.yaml"
    f.write_text(
        text + "defenses: [{name: gaussian_measure_noise, params: {noise_multiplier: 1}}]\n"
    )
    assert main(["validate", str(f)]) == 2
    assert "declares sends_measures = True" in capsys.readouterr().err
    monkeypatch.setattr(MeasureMean, "sends_measures", True, raising=False)
    assert main(["validate", str(f)]) == 0
