"""Attacks are isolated by construction: a hostile plugin that walks the stack, lists every live
object, reads module globals and tries to write into payloads and public information finds no
private row and changes nothing another attack sees."""

from __future__ import annotations

import gc
import signal
import sys
import warnings

import numpy as np
import pytest
from _scenarios import gaussians

from testbed.api import Attack, AttackConfig, AttackOutput
from testbed.errors import TestbedError
from testbed.registry import ATTACKS
from testbed.run.execute import attack_and_score, run_and_evaluate
from testbed.run.roster import build_world
from testbed.sandbox.isolation import AttackFailedError, decode_result, encode_result
from testbed.scenario.loading import parse_scenario

D = 3


def _snoop(view, public) -> np.ndarray:
    """Every float array of width D this process can reach that is not part of the view."""
    mine = {id(a) for e in view.envelopes for a in _arrays(e.payload)}
    mine |= {id(public.prior)} | {id(v) for v in view.own_data.values()}
    found = []

    def take(x):
        if isinstance(x, np.ndarray) and id(x) not in mine and x.dtype.kind == "f":
            if x.ndim == 2 and x.shape[1] == D and x.size:
                found.append(np.asarray(x, dtype=float))
        elif "X" in (getattr(type(x), "__dataclass_fields__", None) or {}):
            take(x.X)  # PartyData and the like

    with warnings.catch_warnings():
        # reading every attribute of every live object touches deprecated ones (torch's
        # reduce_op, importlib's SelectableGroups), which warn on access
        warnings.simplefilter("ignore")
        _reach(take)
    return np.vstack(found) if found else np.empty((0, D))


def _reach(take) -> None:
    f = sys._getframe()
    while f is not None:  # stack walking
        for v in list(f.f_locals.values()):
            take(v)
        f = f.f_back
    for obj in gc.get_objects():  # every live container object
        take(obj)
        if isinstance(obj, dict):
            for v in list(obj.values()):
                take(v)
    for mod in list(sys.modules.values()):  # module globals
        for v in list(getattr(mod, "__dict__", {}).values()):
            take(v)


def _arrays(p):
    from testbed.exchange.bus import iter_arrays

    return [a for _, a in iter_arrays(p)]


class HostileAttack(Attack):
    """Snoops for private rows and tries to tamper with what it was given."""

    name = "test_hostile_snooper"
    protocols = ("fedwad",)

    class Config(AttackConfig):
        pass

    def run(self, view, public, rng):
        tamper = 0
        for e in view.envelopes:
            for a in _arrays(e.payload):
                try:
                    a.setflags(write=True)
                    a[...] = 0.0
                    tamper += 1
                except (ValueError, TypeError):
                    pass
        for attempt in (
            lambda: public.extra.__setitem__("released", {"wasserstein": -1.0}),
            lambda: setattr(public, "prior", None),
            lambda: public.prior.setflags(write=True),
        ):
            try:
                attempt()
                tamper += 1
            except (ValueError, TypeError, AttributeError):
                pass
        found = _snoop(view, public)
        points = found if len(found) else np.asarray(public.prior)
        return [
            AttackOutput(kind="points", target=t, points=points, meta={"tamper": tamper})
            for t in public.parties
        ]


class ProbeAttack(Attack):
    """Reports what it was given: the first message's support and the released estimate."""

    name = "test_isolation_probe"
    protocols = ("fedwad",)

    class Config(AttackConfig):
        pass

    def run(self, view, public, rng):
        sup = next(e.payload.support for e in view.envelopes if hasattr(e.payload, "support"))
        shift = float(public.extra["released"]["wasserstein"])
        return [AttackOutput(kind="points", target=public.parties[0], points=sup + shift)]


def _scenario(attacks: str) -> str:
    return gaussians(
        "isolation",
        f"threat_model: {{observer: server}}\nattacks: {attacks}",
        seed=5,
        transform=None,
    )


def _run(attacks: str):
    sc = parse_scenario(_scenario(attacks))
    world = build_world(sc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _out = run_and_evaluate(world)
        results, tr = _out.results, _out.transcript
        rows = attack_and_score(world, tr, released=results["estimates"])
    return world, tr, rows


def _private_rows_in(points, world) -> int:
    X = np.vstack([d.X for d in world.parties.values()])
    dist = np.sqrt(((points[:, None, :] - X[None, :, :]) ** 2).sum(-1)).min(axis=1)
    return int((dist < 1e-9).sum())


def test_the_snooper_would_find_private_rows_in_the_driver():
    # control: the same snooping, run in the driver's process, finds private rows (so the
    # isolated run below, which finds none, is a real check and not a blind test)
    world, tr, _ = _run("[]")
    view = tr.view("server", public=world.public)
    found = _snoop(view, world.public)
    assert _private_rows_in(found, world) > 0


def test_hostile_attack_finds_no_private_row_and_changes_nothing():
    world, tr, rows = _run("[{name: test_hostile_snooper}, {name: test_isolation_probe}]")
    digest_before = tr.digest()
    hostile = [r for r in rows if r["attack"] == "test_hostile_snooper"]
    assert hostile and all(r["exact_recovery"] == 0.0 for r in hostile)
    # the probe that ran after the hostile attack saw the untouched messages and estimate
    _, _, alone = _run("[{name: test_isolation_probe}]")
    probe = [r for r in rows if r["attack"] == "test_isolation_probe"]
    assert probe == alone
    # nothing in the driver changed either
    assert tr.digest() == digest_before
    for e in tr:
        for a in _arrays(e.payload):
            assert not a.flags.writeable


class FailingAttack(Attack):
    name = "test_isolation_failing"
    protocols = ("fedwad",)

    class Config(AttackConfig):
        pass

    def run(self, view, public, rng):
        raise KeyError("no such message")


_TEST_PLUGINS = (HostileAttack, ProbeAttack, FailingAttack)


@pytest.fixture(autouse=True, scope="module")
def _registered():
    """Registered only while this module runs, so the contract kit (which parametrises over
    every registered attack at collection time) never picks these test plugins up."""
    for cls in _TEST_PLUGINS:
        if cls.name not in ATTACKS:
            ATTACKS.register(cls)
    yield
    for cls in _TEST_PLUGINS:
        ATTACKS._items.pop(cls.name, None)
        ATTACKS._origins.pop(cls.name, None)


def test_a_failing_attack_is_a_failure_row_beside_the_others():
    _, _, rows = _run("[{name: test_isolation_failing}, {name: test_isolation_probe}]")
    failed = [r for r in rows if r["attack"] == "test_isolation_failing"]
    assert len(failed) == 1 and failed[0]["failed"] == "run"
    assert "\n" not in failed[0]["reason"] and "KeyError" in failed[0]["reason"]
    probe = [r for r in rows if r["attack"] == "test_isolation_probe"]
    assert probe and "failed" not in probe[0] and probe[0]["exact_recovery"] == 0.0


def test_attack_failed_error_is_one_line_naming_plugin_and_phase():
    err = AttackFailedError.of("test_isolation_failing", "run", "KeyError: 'x'", "Traceback ...")
    assert isinstance(err, TestbedError) and err.phase == "run"
    assert str(err) == "attack 'test_isolation_failing' failed in run: KeyError: 'x'"


def test_results_from_the_attack_process_are_decoded_without_unpickling():
    out = AttackOutput(
        kind="words", target="a", words=("x", "y"), meta={"ranked": [["x"], ["y"]], "s": 1.5}
    )
    back = decode_result(encode_result({"ok": [[out], []]}))
    assert back["ok"][0][0].words == ("x", "y") and back["ok"][0][0].meta["s"] == 1.5
    with pytest.raises(TypeError):
        encode_result({"ok": [[object()], []]})


def test_a_killed_attack_never_reaped_does_not_hang_the_run(monkeypatch):
    """After SIGKILL the driver waits a bounded time for the attack process: one the kernel
    holds in an uninterruptible wait is not reaped by any signal, and the run must go on."""
    from testbed.sandbox import isolation

    killed = []
    monkeypatch.setattr(isolation.os, "killpg", lambda pid, sig: killed.append((pid, sig)))
    monkeypatch.setattr(isolation, "REAP_SECONDS", 0.01)

    class Unreaped:
        pid = 4321
        waits: list = []

        def join(self, timeout=None):
            assert timeout is not None, "an unbounded wait for a process no signal ends"
            self.waits.append(timeout)

        def kill(self):
            killed.append("kill")

        def is_alive(self):
            return True

    proc = Unreaped()
    isolation._end(proc, 0.5)
    assert proc.waits == [0.5, 0.01]
    assert killed == [(4321, signal.SIGKILL), "kill"]
