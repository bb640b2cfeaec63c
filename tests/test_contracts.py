"""Every registered attack and defense through the public contract kit (testbed.testing), one
test per (plugin, check) with a readable id; plus plugins that break the contract on purpose."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from defenses._base import Defense
from testbed.api import Attack, AttackConfig, AttackOutput
from testbed.exchange.bus import SERVER
from testbed.measure import Measure
from testbed.registry import ATTACKS, DEFENSES, PluginConfig
from testbed.testing import check_plugin, plugin_checks

#: (kind, plugin, check) -> why it is known to fail. Keep reasons concrete.
EXPECTED_FAILURES: dict[tuple[str, str, str], str] = {}


def _cases():
    for kind, reg in (("attack", ATTACKS), ("defense", DEFENSES)):
        for name, cls in reg.items():
            for check, _ in plugin_checks(cls):
                marks = []
                reason = EXPECTED_FAILURES.get((kind, name, check))
                if reason:
                    marks.append(pytest.mark.xfail(reason=reason, strict=True))
                yield pytest.param(cls, check, id=f"{kind}:{name}:{check}", marks=marks)


@pytest.mark.parametrize(("cls", "check"), list(_cases()))
def test_plugin_contract(cls, check):
    # Prepare
    thunk = dict(plugin_checks(cls))[check]
    # Execute / Assert (the check raises on failure)
    thunk()


# ----------------------------------------------------------------------------- bad plugins
class _Base(Attack):
    protocols = ("fedwad",)

    class Config(AttackConfig):
        pass


class MutatesItsView(_Base):
    """Makes its observer's own data writable and shifts it."""

    name = "bad_mutates_view"

    def run(self, view, public, rng):
        for arr in view.own_data.values():
            arr.setflags(write=True)
            arr[0, 0] += 1.0
        return [AttackOutput(kind="points", target=public.parties[-1], points=public.prior)]


class ReadsUnseenMessages(_Base):
    """Uses bob's interpolant whoever the observer is (alice never receives it)."""

    name = "bad_reads_unseen"

    def run(self, view, public, rng):
        msgs = view.messages("fedwad.xi_nu")
        pts = msgs[-1].payload.support if msgs else public.prior
        return [AttackOutput(kind="points", target="bob", points=np.array(pts))]


class StoresState(_Base):
    """Precomputes in __init__ (not allowed: __init__ stores the config only)."""

    name = "bad_stores_state"

    def __init__(self, config=None):
        super().__init__(config)
        self.cache = {}

    def run(self, view, public, rng):
        return [AttackOutput(kind="points", target="bob", points=np.array(public.prior))]


class UnseededNoise(_Base):
    """Draws from a global generator instead of the rng it was given."""

    name = "bad_unseeded"

    def run(self, view, public, rng):
        noise = np.random.default_rng().normal(size=public.prior.shape)
        return [AttackOutput(kind="points", target="bob", points=public.prior + noise)]


class _Shift(Defense):
    """Moves every sent support point by +1 (a stand-in for a real defense)."""

    protocols = ("fedwad",)

    class Config(PluginConfig):
        pass

    @staticmethod
    def shifted(p):
        if isinstance(p, Measure):
            return Measure(p.support + 1.0, p.weights)
        if isinstance(p, Mapping):
            return {k: _Shift.shifted(v) for k, v in p.items()}
        return p


class ChangesNothing(_Shift):
    """Delivers every message as it was (a new envelope, the same payload): protects nothing."""

    name = "bad_changes_nothing"

    def on_send(self, env, rng, ledger):
        return self.marked(env, env.payload)


class ChangesUnmarked(_Shift):
    """Changes the measures but does not say so in ``defended_by`` (env.with_payload alone)."""

    name = "bad_changes_unmarked"

    def on_send(self, env, rng, ledger):
        return env.with_payload(self.shifted(env.payload))


class ChangesMarked(_Shift):
    """The same change, marked: passes every defense check."""

    name = "good_changes_marked"

    def on_send(self, env, rng, ledger):
        return self.marked(env, self.shifted(env.payload))


def test_a_defense_that_changes_and_marks_passes_the_kit():
    status = check_plugin(ChangesMarked)
    assert status["changes_some_message"] == status["marks_changed_messages"] == "passed"


@pytest.mark.parametrize(
    ("cls", "check"),
    [
        pytest.param(ChangesNothing, "changes_some_message", id="changes_nothing"),
        pytest.param(ChangesUnmarked, "marks_changed_messages", id="changes_unmarked"),
        pytest.param(MutatesItsView, "does_not_mutate_view", id="mutates_view"),
        pytest.param(ReadsUnseenMessages, "ignores_unseen_messages", id="reads_unseen"),
        pytest.param(StoresState, "init_stores_config_only", id="stores_state"),
        pytest.param(UnseededNoise, "same_seed_same_output", id="unseeded"),
    ],
)
def test_bad_plugin_fails_the_kit(cls, check):
    # Execute
    with pytest.raises(AssertionError) as err:
        check_plugin(cls)
    # Assert: the failure is reported under the right check name
    assert f"{check}:" in str(err.value)


def test_expected_failures_are_honoured():
    # a known failure listed with its reason is accepted; an unexpected pass is reported
    status = check_plugin(
        ReadsUnseenMessages, expected_failures={"ignores_unseen_messages": "demo"}
    )
    assert status["ignores_unseen_messages"] == "xfail"
    with pytest.raises(AssertionError, match="expected to fail"):
        check_plugin(
            ReadsUnseenMessages,
            expected_failures={
                "ignores_unseen_messages": "demo",
                "default_config_valid": "does not",
            },
        )


def test_reads_unseen_really_reads_only_from_server_view():
    # the bad plugin is fine for the server (which sees xi_nu): the kit flags the party view
    from testbed.testing import attack_fixture

    fx = attack_fixture("fedwad")
    out = ReadsUnseenMessages().run(fx.view(SERVER), fx.public, np.random.default_rng(0))
    assert np.all(np.isfinite(out[0].points))


def test_a_plugin_protocol_without_a_fixture_is_told_to_give_contract_scenario():
    """The message named a file to add inside the installed testbed; a plugin author gives the
    plugin a contract_scenario instead (a walk-through's finding)."""
    from testbed.errors import TestbedError
    from testbed.testing.checks import contract_scenario

    with pytest.raises(TestbedError, match=r'contract_scenario = "my_tiny.yaml"'):
        contract_scenario("anchor_sketch")
