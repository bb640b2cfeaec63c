"""Public contract checks for plugins (the testbed's ``check_estimator``).

Every registered attack and defense runs through these in the test suite, and third-party plugin
authors call them from their own tests::

    from testbed.testing import check_plugin
    check_plugin(MyAttack)                      # raises AssertionError listing every failure

or parametrise pytest over :func:`plugin_checks` for one test per check with a readable id.

Attack checks (run on a *fixture*: a tiny scenario of a protocol the attack applies to, see
:func:`attack_fixture`, viewed by every observer — the server, each party, an eavesdropper):

- ``default_config_valid``: ``Config()`` validates and the class instantiates with it;
- ``unknown_param_rejected``: ``Config(<unknown>=...)`` raises;
- ``init_stores_config_only``: after ``__init__`` the instance holds ``config`` and nothing else;
- ``does_not_mutate_view``: view and public info hash the same before and after ``run`` and
  ``baseline``;
- ``ignores_unseen_messages``: the view is padded with every envelope the observer may *not*
  see, their payloads replaced by NaN; the output must not change;
- ``same_seed_same_output``: two runs with the same seed give identical outputs;
- ``output_schema_valid``: outputs (and baseline outputs) follow the AttackOutput schema;
- ``produces_output``: some observer of the fixture gets a non-empty output.

Defense checks (on every envelope of the fixture transcript the defense applies to):
``default_config_valid``, ``unknown_param_rejected``, ``init_stores_config_only``,
``returns_new_envelope`` (``on_send`` returns a new Envelope), ``does_not_mutate_envelope``
(the envelope it received hashes the same afterwards), ``same_seed_same_output``,
``changes_some_message`` (the payload of at least one envelope differs after ``on_send``: a
defense that delivers every message as it was protects nothing) and ``marks_changed_messages``
(every envelope whose payload it changed names it in ``meta["defended_by"]``,
:meth:`Defense.marked <defenses._base.Defense.marked>`, so ``testbed transcript`` and the
scorecard show it).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from attacks._base import Attack, validate_outputs
from defenses._base import Defense
from protocols._base import Protocol
from testbed.contract import misspelt_hooks
from testbed.errors import TestbedError
from testbed.exchange.bus import (
    EAVESDROPPER,
    SERVER,
    Envelope,
    PublicInfo,
    Transcript,
    View,
    payload_digest,
)
from testbed.exchange.envelope import defended_by
from testbed.exchange.ledger import PrivacyLedger
from testbed.measure import Measure
from testbed.registry import Plugin
from testbed.run import execute
from testbed.scenario.loading import load_scenario

__all__ = [
    "ATTACK_CHECKS",
    "DEFENSE_CHECKS",
    "PluginFixture",
    "attack_fixture",
    "check_plugin",
    "plugin_checks",
    "poison_payload",
]

_UNKNOWN = "no_such_parameter_for_contract_check"
SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"


# ----------------------------------------------------------------------------- fixture
@dataclass(frozen=True)
class PluginFixture:
    """A finished tiny run: its transcript, public info (with released estimates), the parties'
    own data and the observers to try."""

    protocol: str
    transcript: Transcript
    public: PublicInfo
    own_data: Mapping[str, np.ndarray]
    observers: tuple[str, ...]

    def view(self, observer: str) -> View:
        return self.transcript.view(observer, own_data=self.own_data, public=self.public)


def contract_scenario(protocol: str) -> Path:
    """``scenarios/contract_tiny.yaml`` for FedWAD, ``scenarios/contract_tiny_<protocol>.yaml``
    for any other protocol."""
    name = "contract_tiny.yaml" if protocol == "fedwad" else f"contract_tiny_{protocol}.yaml"
    path = SCENARIO_DIR / name
    if not path.exists():
        raise TestbedError(
            f"no contract fixture for protocol {protocol!r} (the testbed ships "
            f"{SCENARIO_DIR}/contract_tiny_<protocol>.yaml for its own): give the plugin a "
            'small scenario of that protocol as `contract_scenario = "my_tiny.yaml"` (a path '
            "next to the plugin's module or its package root, docs/guide/plugins.md)"
        )
    return path


@functools.lru_cache(maxsize=8)
def _fixture_from_path(path: str) -> PluginFixture:
    sc = load_scenario(path)
    run = execute(sc, until="results", write=False)
    world, results, tr = run.world, run.results, run.transcript
    public = replace(world.public, extra={**world.public.extra, "released": results["estimates"]})
    parties = tuple(world.parties)
    return PluginFixture(
        protocol=sc.protocol.name,
        transcript=tr,
        public=public,
        own_data={p: d.X for p, d in world.parties.items()},
        observers=(SERVER, *parties, EAVESDROPPER),
    )


def attack_fixture(protocol: str = "fedwad", scenario: str | Path | None = None) -> PluginFixture:
    """Run (once, cached) the contract scenario of ``protocol`` (or the given scenario file)."""
    return _fixture_from_path(str(scenario or contract_scenario(protocol)))


def resolve_contract_scenario(cls, path: str | Path, explicit: bool = False) -> Path:
    """The file a plugin's contract scenario names. An absolute path is taken as it is. A
    relative one is looked up, first match wins: for the class's own ``contract_scenario``, next
    to the module that defines ``cls`` and in its parent directories up to the one holding a
    ``pyproject.toml`` (the plugin's package), then the current directory; for a ``scenario=``
    argument (``explicit``), the current directory first; last, the testbed's ``scenarios/``."""
    path = Path(path)
    if path.is_absolute():
        if not path.is_file():
            raise TestbedError(f"contract scenario {path} of {cls.__name__} not found")
        return path
    package: list[Path] = []
    try:
        here = Path(inspect.getfile(cls)).resolve().parent
    except (TypeError, OSError):  # a class defined in an interactive session
        here = None
    while here is not None:
        package.append(here)
        if (here / "pyproject.toml").is_file() or here.parent == here:
            break
        here = here.parent
    cwd = [Path.cwd()]
    dirs = [*cwd, *package] if explicit else [*package, *cwd]
    dirs.append(SCENARIO_DIR)
    for d in dirs:
        if (d / path).is_file():
            return d / path
    looked = ", ".join(str(d) for d in dict.fromkeys(dirs))
    raise TestbedError(
        f"contract scenario {str(path)!r} of {cls.__name__} not found (looked in {looked})"
    )


def _fixture_for(cls, fixture: PluginFixture | None) -> PluginFixture:
    if fixture is not None:
        return fixture
    own = cls.contract_scenario
    if own:
        return attack_fixture(scenario=resolve_contract_scenario(cls, own))
    protos = [p for p in cls.protocols if p != "*"]
    return attack_fixture(protos[0] if protos else "fedwad")


# ----------------------------------------------------------------------------- helpers
class _PoisonedMeasure(Measure):
    """A Measure whose support and weights are NaN (skips validation on purpose)."""

    def __init__(self, n: int, d: int):
        for k, shape in (("support", (n, d)), ("weights", (n,))):
            a = np.full(shape, np.nan)
            a.setflags(write=False)
            object.__setattr__(self, k, a)


def poison_payload(p: Any) -> Any:
    """The same payload structure with every float replaced by NaN."""
    if isinstance(p, Measure):
        return _PoisonedMeasure(p.n, p.d)
    if isinstance(p, np.ndarray):
        return np.full(p.shape, np.nan) if p.dtype.kind in "fc" else p
    if isinstance(p, Mapping):
        return {k: poison_payload(v) for k, v in p.items()}
    if isinstance(p, float):
        return math.nan
    return p


def _padded_view(fx: PluginFixture, observer: str) -> View:
    """The observer's view plus every other envelope, poisoned (kept in sequence order)."""
    plain = fx.view(observer)
    seen = {e.seq for e in plain.envelopes}
    envs = []
    for e in fx.transcript:
        if e.seq in seen:
            envs.append(e)
        else:
            bad = replace(e, payload=poison_payload(e.payload))
            envs.append(bad)
    return replace(plain, envelopes=tuple(envs))


def _digest_any(x: Any) -> str:
    """Hash of a view/public-info value, including nested dicts and lists."""
    h = hashlib.sha256()

    def rec(v):
        if isinstance(v, (np.ndarray, Measure)):
            h.update(payload_digest(v).encode())
        elif isinstance(v, Mapping):
            h.update(b"{")
            for k in sorted(v, key=str):
                h.update(repr(k).encode())
                rec(v[k])
            h.update(b"}")
        elif isinstance(v, (list, tuple)):
            h.update(b"[")
            for u in v:
                rec(u)
            h.update(b"]")
        elif isinstance(v, View):
            h.update(v.digest().encode())
            rec(dict(v.own_data))
            rec(v.public)
        elif isinstance(v, PublicInfo):
            rec([v.protocol, dict(v.params), list(v.parties), v.dim, v.prior, dict(v.extra)])
        else:
            h.update(repr(v).encode())

    rec(x)
    return h.hexdigest()


def _same(a: Any, b: Any) -> bool:
    """Structural equality of attack outputs; NaN equals NaN."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if hasattr(a, "__dataclass_fields__") and type(a) is type(b):
        return all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _run(attack, view, public, seed=0, baseline=False):
    rng = np.random.default_rng(seed)
    return (attack.baseline if baseline else attack.run)(view, public, rng)


# ----------------------------------------------------------------------------- common checks
def check_default_config_valid(cls, fixture=None) -> None:
    cfg = cls.Config()
    obj = cls(cfg)
    assert obj.config == cfg, "instance does not keep the config it was given"


def check_unknown_param_rejected(cls, fixture=None) -> None:
    try:
        cls.Config(**{_UNKNOWN: 1})
    except ValidationError:
        return
    raise AssertionError(f"{cls.__name__}.Config accepted an unknown parameter {_UNKNOWN!r}")


def check_init_stores_config_only(cls, fixture=None) -> None:
    cfg = cls.Config()
    obj = cls(cfg)
    extra = sorted(set(vars(obj)) - {"config"})
    assert not extra, f"__init__ stored more than the config: {extra}"
    assert obj.config is cfg, "__init__ must store the config object it was given"


# ----------------------------------------------------------------------------- attack checks
def check_does_not_mutate_view(cls, fixture=None) -> None:
    fx = _fixture_for(cls, fixture)
    attack = cls(cls.Config())
    for obs in fx.observers:
        view = fx.view(obs)
        before = _digest_any(view)
        _run(attack, view, view.public)
        _run(attack, view, view.public, baseline=True)
        assert _digest_any(view) == before, f"observer {obs}: the attack mutated its view"


def check_ignores_unseen_messages(cls, fixture=None) -> None:
    fx = _fixture_for(cls, fixture)
    attack = cls(cls.Config())
    for obs in fx.observers:
        plain = _run(attack, fx.view(obs), fx.public)
        padded = _run(attack, _padded_view(fx, obs), fx.public)
        assert _same(plain, padded), (
            f"observer {obs}: output changed when messages it may not see were added "
            "(with NaN payloads): the attack reads envelopes outside its observer's reach"
        )


def check_same_seed_same_output(cls, fixture=None) -> None:
    fx = _fixture_for(cls, fixture)
    attack = cls(cls.Config())
    for obs in fx.observers:
        view = fx.view(obs)
        for base in (False, True):
            a = _run(attack, view, fx.public, seed=123, baseline=base)
            b = _run(attack, view, fx.public, seed=123, baseline=base)
            what = "baseline" if base else "run"
            assert _same(a, b), f"observer {obs}: {what} differs between two runs with one seed"


def check_output_schema_valid(cls, fixture=None) -> None:
    fx = _fixture_for(cls, fixture)
    attack = cls(cls.Config())
    kinds = cls.output_kinds
    for obs in fx.observers:
        view = fx.view(obs)
        validate_outputs(_run(attack, view, fx.public), fx.public, kinds)
        validate_outputs(_run(attack, view, fx.public, baseline=True), fx.public, kinds)


def check_produces_output(cls, fixture=None) -> None:
    fx = _fixture_for(cls, fixture)
    attack = cls(cls.Config())
    got = {obs: len(_run(attack, fx.view(obs), fx.public)) for obs in fx.observers}
    assert any(got.values()), f"no observer of the {fx.protocol} fixture got any output: {got}"


# ----------------------------------------------------------------------------- defense checks
def _defended(cls, fixture):
    """The defense and the fixture envelopes it applies to. A knob defense
    (``changes_messages = False``) only sets protocol parameters: it must return a dict from
    ``protocol_overrides`` and gets no envelope. A defense may name its protocols."""
    fx = fixture or _fixture_for(cls, None)
    defense = cls(cls.Config())
    if not cls.changes_messages:
        over = defense.protocol_overrides(fx.protocol)
        assert isinstance(over, dict), "protocol_overrides must return a dict"
        return defense, []
    envs = [e for e in fx.transcript if defense.applies_to(e)]
    assert envs, f"the {fx.protocol} fixture has no envelope this defense applies to"
    return defense, envs


def check_returns_new_envelope(cls, fixture=None) -> None:
    defense, envs = _defended(cls, fixture)
    for e in envs:
        out = defense.on_send(e, np.random.default_rng(0), PrivacyLedger())
        assert isinstance(out, Envelope), f"message #{e.seq}: on_send returned {type(out)}"
        assert out is not e, f"message #{e.seq}: on_send returned the envelope it received"


def check_does_not_mutate_envelope(cls, fixture=None) -> None:
    defense, envs = _defended(cls, fixture)
    for e in envs:
        before = (payload_digest(e.payload), e.digest, _digest_any(dict(e.meta)), e.kind)
        defense.on_send(e, np.random.default_rng(0), PrivacyLedger())
        after = (payload_digest(e.payload), e.digest, _digest_any(dict(e.meta)), e.kind)
        assert before == after, f"message #{e.seq}: on_send mutated the envelope it received"


def check_defense_same_seed(cls, fixture=None) -> None:
    defense, envs = _defended(cls, fixture)
    for e in envs:
        a = defense.on_send(e, np.random.default_rng(5), PrivacyLedger())
        b = defense.on_send(e, np.random.default_rng(5), PrivacyLedger())
        assert a.digest == b.digest, f"message #{e.seq}: same seed, different output"


def _changed(cls, fixture):
    """``(envelope, what on_send made of it)`` for every fixture envelope whose payload the
    defense changed (seed 0)."""
    defense, envs = _defended(cls, fixture)
    out = []
    for e in envs:
        new = defense.on_send(e, np.random.default_rng(0), PrivacyLedger())
        if payload_digest(new.payload) != payload_digest(e.payload):
            out.append((e, new))
    return envs, out


def check_changes_some_message(cls, fixture=None) -> None:
    envs, changed = _changed(cls, fixture)
    if not envs:  # a knob defense: it acts through protocol_overrides
        return
    kinds = sorted({e.kind for e in envs})
    assert changed, (
        f"on_send delivered all {len(envs)} envelopes it applies to ({', '.join(kinds)}) with "
        "their payloads unchanged: the defense changes no message"
    )


def check_marks_changed_messages(cls, fixture=None) -> None:
    _, changed = _changed(cls, fixture)
    for e, new in changed:
        assert cls.name in defended_by(new.meta), (
            f"message #{e.seq} ({e.kind}): its payload changed but meta['defended_by'] does not "
            f"name {cls.name!r} (return self.marked(env, payload)): testbed transcript and the "
            "scorecard show it as undefended"
        )


def check_no_misspelt_hooks(cls, fixture=None) -> None:
    """No public name of the plugin is a near miss of a hook its base class declares (a
    misspelt hook is otherwise silently ignored; registration refuses it too)."""
    base = next(b for b in (Protocol, Attack, Defense, Plugin) if issubclass(cls, b))
    bad = misspelt_hooks(cls, base)
    assert not bad, "; ".join(
        f"{name!r} is not a hook of {base.__name__}: did you mean {hook!r}?" for name, hook in bad
    )


# ----------------------------------------------------------------------------- registry of checks
Check = Callable[..., None]

COMMON_CHECKS: dict[str, Check] = {
    "default_config_valid": check_default_config_valid,
    "unknown_param_rejected": check_unknown_param_rejected,
    "init_stores_config_only": check_init_stores_config_only,
    "no_misspelt_hooks": check_no_misspelt_hooks,
}
ATTACK_CHECKS: dict[str, Check] = {
    **COMMON_CHECKS,
    "does_not_mutate_view": check_does_not_mutate_view,
    "ignores_unseen_messages": check_ignores_unseen_messages,
    "same_seed_same_output": check_same_seed_same_output,
    "output_schema_valid": check_output_schema_valid,
    "produces_output": check_produces_output,
}
DEFENSE_CHECKS: dict[str, Check] = {
    **COMMON_CHECKS,
    "returns_new_envelope": check_returns_new_envelope,
    "does_not_mutate_envelope": check_does_not_mutate_envelope,
    "same_seed_same_output": check_defense_same_seed,
    "changes_some_message": check_changes_some_message,
    "marks_changed_messages": check_marks_changed_messages,
}


def _kind_of(cls) -> str:
    if issubclass(cls, Attack):
        return "attack"
    if issubclass(cls, Defense):
        return "defense"
    raise TestbedError(f"{cls.__qualname__} is neither an Attack nor a Defense")


def plugin_checks(cls, fixture: PluginFixture | None = None) -> Iterator[tuple[str, Callable]]:
    """Yield ``(check_name, thunk)`` for every check of ``cls``'s kind (for pytest ids)."""
    table = ATTACK_CHECKS if _kind_of(cls) == "attack" else DEFENSE_CHECKS
    for name, fn in table.items():
        yield name, functools.partial(fn, cls, fixture)


def check_plugin(
    cls, fixture: PluginFixture | None = None, expected_failures: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Run every check; raise AssertionError naming each unexpected failure.

    ``expected_failures`` maps a check name to the reason it is known to fail; such a check must
    still fail (an unexpected pass is reported too). Returns ``{check: "passed" | "xfail"}``.
    """
    return _collect(cls, plugin_checks(cls, fixture), expected_failures, "contract")


def _collect(cls, checks, expected_failures, what: str) -> dict[str, str]:
    """Run ``(name, thunk)`` checks; raise AssertionError listing every unexpected failure and
    every expected failure that passed; return ``{check: "passed" | "xfail"}``."""
    expected = dict(expected_failures or {})
    status, problems = {}, []
    for name, thunk in checks:
        try:
            thunk()
        except Exception as exc:  # every failure is collected and reported below
            if name in expected:
                status[name] = "xfail"
            else:
                problems.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if name in expected:
            problems.append(f"{name}: expected to fail ({expected[name]}) but passed")
        status[name] = "passed"
    if problems:
        raise AssertionError(f"{cls.__qualname__} fails the {what}:\n  " + "\n  ".join(problems))
    return status
