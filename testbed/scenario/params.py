"""Every plugin's ``params`` checked against that plugin's own Config model, with the same
line-numbered one-line errors as the scenario's structure: no bool or string where a number is
wanted, no count above ``MAX_COUNT``, defense filters and knobs checked against the protocol, and
the engine's options."""

from __future__ import annotations

import math
import re
import typing
from dataclasses import dataclass

from pydantic import BaseModel, ValidationError

from testbed.contract import provides
from testbed.data.datasets import NoiseSpec
from testbed.errors import ScenarioError, TestbedError
from testbed.exchange.engines.pool import InProcessEngineConfig
from testbed.registry import (
    ATTACKS,
    DATASETS,
    DEFENSES,
    PARTITIONERS,
    PROTOCOLS,
    TRANSFORMS,
    PluginConfig,
    Registry,
)
from testbed.scenario.filters import check_defense_filters
from testbed.scenario.schema import PluginSpec, Scenario
from testbed.scenario.yamlloc import first_error, fmt_loc, line_of, quoted, where

__all__ = ["MAX_COUNT", "PluginConfigs", "typing_is_seq", "validate_plugins"]


@dataclass(frozen=True)
class PluginConfigs:
    """Every plugin's validated config of one scenario, in scenario order: built once, at load
    time, and the ones the run's plugins are constructed with (no stage validates them again).

    ``protocol`` is the protocol's params as the scenario gives them (defaults filled in: what
    ``resolved.yaml`` records); ``protocol_run`` adds the knob defenses' overrides
    (:meth:`~defenses._base.Defense.protocol_overrides`): the config the protocol runs with (the
    same object when no defense sets a knob)."""

    dataset: PluginConfig
    partition: PluginConfig
    transform: PluginConfig | None
    protocol: PluginConfig
    protocol_run: PluginConfig
    defenses: tuple[PluginConfig, ...]
    attacks: tuple[PluginConfig, ...]


def _number_kinds(annotation) -> set[type]:
    """The numeric types (int/float) an annotation admits, looking inside Optional/Union."""

    if annotation in (int, float):
        return {annotation}
    out: set[type] = set()
    for a in typing.get_args(annotation):
        if a in (int, float):
            out.add(a)
    return out


def _only_bool(annotation) -> bool:
    """Whether the annotation is ``bool`` (or ``bool | None``) and admits nothing else."""
    if annotation is bool:
        return True
    args = set(typing.get_args(annotation))
    return bool(args) and args <= {bool, type(None)} and bool in args


_SCI = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
# any integer plugin parameter (sizes, iterations, dimensions); seeds excepted
MAX_COUNT = 10_000_000


def _submodels(annotation) -> list[type]:

    cands = [annotation, *typing.get_args(annotation)]
    return [c for c in cands if isinstance(c, type) and issubclass(c, BaseModel)]


def _refuse_coerced_numbers(model, params, loc, root, fname) -> None:
    """No bool or str where a plugin field wants a number (pydantic's lax mode would turn
    ``true`` into 1 and ``'7'`` into 7), and no integer above MAX_COUNT (a size or iteration
    count that would allocate or run without end). Nested models are checked too."""
    if not isinstance(params, dict):
        return
    for name, field in getattr(model, "model_fields", {}).items():
        key = field.alias or name
        if key not in params:
            continue
        v = params[key]
        seq = typing_is_seq(field.annotation) and isinstance(v, list)
        vals = v if seq else [v]
        for i, x in enumerate(vals):
            sub_loc = [*loc, key, i] if seq else [*loc, key]
            for sub in _submodels(field.annotation):
                _refuse_coerced_numbers(sub, x, sub_loc, root, fname)
            kinds = _number_kinds(field.annotation)
            if _only_bool(field.annotation) and x is not None and not isinstance(x, bool):
                # pydantic's lax mode reads "no", "off", 0 as false: a switch silently flipped
                raise ScenarioError(
                    f"{where(fname, root, sub_loc)}: expected true or false, got {x!r}"
                )
            if not kinds:
                continue
            bad = None
            if isinstance(x, str) and float in kinds and _SCI.fullmatch(x):
                # 1e-8: YAML 1.1 reads exponent-only floats as strings; pydantic converts them.
                # Quoted ('1e-8') it is a string the user wrote: refused like '7'
                if quoted(root, sub_loc):
                    bad = f"expected a number, got the quoted string {x!r} (remove the quotes)"
                elif not math.isfinite(float(x)):
                    bad = f"{x} is not allowed (only finite numbers)"
            elif isinstance(x, (bool, str)) and not _admits(field.annotation, type(x)):
                bad = f"expected a number, got {x!r}"
            elif isinstance(x, float) and float not in kinds:  # 4.0 where a count is wanted
                bad = f"expected a whole number, got {x!r}"
            elif (
                isinstance(x, int)
                and not isinstance(x, bool)
                and "seed" not in key
                and abs(x) > MAX_COUNT
            ):
                bad = f"{x} is above the limit {MAX_COUNT} for a size or count"
            if bad:
                raise ScenarioError(f"{where(fname, root, sub_loc)}: {bad}")


def typing_is_seq(annotation) -> bool:

    return typing.get_origin(annotation) in (list, tuple)


def _admits(annotation, typ: type) -> bool:
    """Whether the annotation itself admits bool/str (e.g. ``int | str``, ``Literal['auto'] | int``)."""

    if annotation is typ:
        return True
    for a in typing.get_args(annotation):
        if a is typ:
            return True
        if typing.get_origin(a) is typing.Literal and any(
            isinstance(x, typ) for x in typing.get_args(a)
        ):
            return True
        if typing.get_origin(annotation) in (list, tuple) and _admits(a, typ):
            return True
    return False


def _validate_plugin(reg: Registry, spec: PluginSpec, loc, root, fname, context, check=None):
    """The plugin's class and validated config; ``check(cls)`` runs before its params are
    validated (a plugin that does not apply is refused as such, not for a param it lacks)."""
    try:
        cls = reg.get(spec.name)
    except TestbedError as exc:  # unknown, or a plugin whose entry point failed to import
        line = line_of(root, [*loc, "name"])
        raise ScenarioError(f"{fname}:{line}: {fmt_loc([*loc, 'name'])}: {exc}") from None
    if check is not None:
        check(cls)
    _refuse_coerced_numbers(cls.Config, spec.params, [*loc, "params"], root, fname)
    try:
        cfg = cls.Config.model_validate(spec.params, context=context)
    except ValidationError as exc:
        raise first_error(exc, [*loc, "params"], root, fname, cls.Config) from None
    return cls, cfg


def _check_calibration(cls, cfg, loc, root, fname: str) -> None:
    """A ``target_epsilon`` that opacus cannot calibrate a noise multiplier for (below what any
    noise reaches over the plugin's releases) is refused here, at its line, instead of when the
    run reaches the mechanism. Plugins with a Gaussian mechanism calibrate through their
    ``multiplier()`` method (memoised: the run does not calibrate twice). Opacus, which imports
    torch, is asked only when :func:`~testbed.exchange.ledger.surely_calibratable` cannot tell
    (with the config's ``releases``, else 1): validating the usual targets stays light."""
    target = getattr(cfg, "target_epsilon", None)  # a config field, not every plugin's
    if target is None or not provides(cls, "multiplier"):
        return
    from testbed.exchange.ledger import (
        surely_calibratable,  # ledger: 50 ms, validate imports params
    )

    releases = getattr(cfg, "releases", None) or 1
    if surely_calibratable(float(target), float(getattr(cfg, "target_delta", 1e-5)), releases):
        return
    try:
        cls(cfg).multiplier()
    except TestbedError as exc:
        raise ScenarioError(
            f"{where(fname, root, [*loc, 'params', 'target_epsilon'])}: {exc}"
        ) from None


def _check_party_count(pcls, name: str, names: list[str], root, fname: str) -> None:
    """The protocol's declared party count (``Protocol.min_parties``, ``max_parties``)."""
    lo, hi = pcls.min_parties, pcls.max_parties
    if len(names) >= lo and (hi is None or len(names) <= hi):
        return
    if hi == lo:
        need = f"exactly {lo}"
    elif len(names) < lo:
        need = f"at least {lo}"
    else:
        need = f"at most {hi}"
    raise ScenarioError(
        f"{where(fname, root, ['data', 'parties'])}: protocol {name!r} needs {need} parties, "
        f"the scenario has {len(names)} ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"
    )


def _check_defense_protocol(dcls, name: str, protocol: str, i: int, root, fname: str) -> None:
    """A defense on a protocol it does not act on would run and change nothing while the
    results list it (``Defense.protocols``); checked before its params, which may be another
    protocol's."""
    if dcls.applies_to_protocol(protocol):
        return
    line = line_of(root, ["defenses", i])
    hint = ""
    if dcls.acts_on_measures():
        hint = "; a protocol plugin whose messages carry Measures declares sends_measures = True"
    raise ScenarioError(
        f"{fname}:{line}: defenses[{i}] {name!r} does not apply to protocol {protocol!r} (it "
        f"applies to: {', '.join(dcls.protocols)}); there it would run and change nothing{hint}"
    )


def _no_labels(sc: Scenario, root, fname: str, loc: list, needs: str) -> ScenarioError:
    """``needs`` (e.g. "partition 'dirichlet' needs labels") on a dataset whose config says it
    has none: the one-line error at ``loc``."""
    return ScenarioError(
        f"{where(fname, root, loc)}: {needs}, but dataset {sc.data.dataset.name!r} has none "
        "(give data.dataset.params.label_column)"
    )


def _check_protocol_labels(protocol, sc: Scenario, root, fname: str) -> None:
    """A protocol whose configuration reads labels, on a dataset whose config says it has none
    (else the run would stop there, after loading the data and maybe after its heavy part)."""
    why = protocol.needs_labels()
    if why:
        needs = f"protocol {sc.protocol.name!r} needs labels ({why})"
        raise _no_labels(sc, root, fname, ["protocol", "name"], needs)


def _check_needs_labels(cls, what: str, sc: Scenario, root, fname: str) -> None:
    """A partition or transform that reads labels, on a dataset whose config says it has none."""
    if cls.needs_labels:
        spec = sc.data.partition if what == "partition" else sc.data.transform
        needs = f"{what} {spec.name!r} needs labels"
        raise _no_labels(sc, root, fname, ["data", what, "name"], needs)


def validate_plugins(
    sc: Scenario, root=None, fname: str = "<scenario>", base_dir: str = "."
) -> PluginConfigs:
    """Validate every plugin's params; returns their configs (defaults filled in)."""
    names = sc.data.party_names()
    # plugins check their params against the scenario (PluginConfig: the validation context)
    ctx = {"base_dir": base_dir, "parties": names}
    dcls, ds_cfg = _validate_plugin(
        DATASETS, sc.data.dataset, ["data", "dataset"], root, fname, ctx
    )
    dataset = dcls(ds_cfg)
    labels = dataset.possible_labels()  # from the config alone
    has_labels = dataset.has_labels()
    part_cls, part_cfg = _validate_plugin(
        PARTITIONERS,
        sc.data.partition,
        ["data", "partition"],
        root,
        fname,
        ctx if labels is None else {**ctx, "labels": labels},
    )
    if has_labels is False:
        _check_needs_labels(part_cls, "partition", sc, root, fname)
    _check_noise(sc, names, root, fname)
    tr_cfg = None
    if sc.data.transform is not None:
        tcls, tr_cfg = _validate_plugin(
            TRANSFORMS, sc.data.transform, ["data", "transform"], root, fname, ctx
        )
        if has_labels is False:
            _check_needs_labels(tcls, "transform", sc, root, fname)
    # the dataset's labels (when its config tells them) for params counted in classes
    pctx = ctx if labels is None else {**ctx, "labels": labels}
    pcls, proto_cfg = _validate_plugin(PROTOCOLS, sc.protocol, ["protocol"], root, fname, pctx)
    _check_party_count(pcls, sc.protocol.name, names, root, fname)
    _check_calibration(pcls, proto_cfg, ["protocol"], root, fname)
    if has_labels is False:
        _check_protocol_labels(pcls(proto_cfg), sc, root, fname)
    defenses, overrides = _validate_defenses(sc, root, fname, ctx)
    proto_run = _with_overrides(pcls, proto_cfg, overrides, root, fname, ctx)
    for i, (d, cfg) in enumerate(zip(sc.defenses, defenses)):  # a release count too high
        dcls = DEFENSES.get(d.name)
        if provides(dcls, "check_releases"):
            problem = dcls(cfg).check_releases(sc.protocol.name, proto_run, names)
            if problem:
                raise ScenarioError(
                    f"{where(fname, root, ['defenses', i, 'params', 'releases'])}: {problem}"
                )
    attacks = tuple(
        _validate_plugin(ATTACKS, a, ["attacks", i], root, fname, ctx)[1]
        for i, a in enumerate(sc.attacks)
    )
    _check_engine(sc, names, root, fname)
    _check_threat_model(sc, names, root, fname)
    return PluginConfigs(ds_cfg, part_cfg, tr_cfg, proto_cfg, proto_run, defenses, attacks)


def _check_noise(sc: Scenario, names: list[str], root, fname: str) -> None:
    """``data.noise``: each entry a NoiseSpec naming one of the parties."""
    for i, n in enumerate(sc.data.noise):
        try:
            spec = NoiseSpec.model_validate(n)
        except ValidationError as exc:
            raise first_error(exc, ["data", "noise", i], root, fname, NoiseSpec) from None
        if spec.party not in names:
            line = line_of(root, ["data", "noise", i, "party"])
            raise ScenarioError(
                f"{fname}:{line}: data.noise[{i}].party: unknown party {spec.party!r}; parties: {', '.join(names)}"
            )


def _validate_defenses(sc: Scenario, root, fname: str, ctx: dict):
    """The defenses' configs, and the protocol parameters their knobs set."""
    out, overrides = [], {}
    for i, d in enumerate(sc.defenses):
        dcls, cfg = _validate_plugin(
            DEFENSES,
            d,
            ["defenses", i],
            root,
            fname,
            ctx,
            lambda c, d=d, i=i: _check_defense_protocol(
                c, d.name, sc.protocol.name, i, root, fname
            ),
        )
        check_defense_filters(cfg, sc, i, root, fname)  # a typo would disable the defense
        _check_calibration(dcls, cfg, ["defenses", i], root, fname)
        out.append(cfg)
        # knob defenses set protocol parameters: a knob the protocol lacks is an error here
        try:
            overrides.update(dcls(cfg).protocol_overrides(sc.protocol.name))
        except TestbedError as exc:
            line = line_of(root, ["defenses", i, "name"])
            raise ScenarioError(f"{fname}:{line}: defenses[{i}].name: {exc}") from None
    return tuple(out), overrides


def _with_overrides(pcls, cfg, overrides: dict, root, fname: str, ctx: dict):
    """The protocol's config with the knob defenses' ``overrides`` (``cfg`` itself when they
    change nothing); invalid values name the defenses."""
    written = cfg.model_dump(mode="json")
    merged = {**written, **overrides}
    if merged == written:
        return cfg
    try:
        return pcls.Config.model_validate(merged, context=ctx)
    except ValidationError as exc:
        line = line_of(root, ["defenses"])
        err = exc.errors()[0]
        raise ScenarioError(
            f"{fname}:{line}: defenses: protocol parameters set by the defenses are invalid: "
            f"{fmt_loc(err['loc'])}: {err['msg']}"
        ) from None


def _check_engine(sc: Scenario, names: list[str], root, fname: str) -> None:
    """The engine's options (checked at load time; the Ray one without importing Ray)."""
    if sc.engine == "ray":  # engine options are checked at load time too (no ray import)
        from testbed.exchange.engines.ray_bus import RayEngineConfig  # ray: the ray engine only

        try:
            RayEngineConfig.model_validate(sc.engine_params, context={"parties": names})
        except ValidationError as exc:
            raise first_error(exc, ["engine_params"], root, fname, RayEngineConfig) from None
    else:
        try:
            InProcessEngineConfig.model_validate(sc.engine_params)
        except ValidationError as exc:
            raise first_error(exc, ["engine_params"], root, fname, InProcessEngineConfig) from None


def _check_threat_model(sc: Scenario, names: list[str], root, fname: str) -> None:
    """The observer, colluders and attack targets are parties (or the server / eavesdropper)."""
    tm = sc.threat_model
    allowed = {"server", "eavesdropper", *names}
    for field, who in [("observer", [tm.observer]), ("colluders", tm.colluders)]:
        for w in who:
            if w not in allowed:
                line = line_of(root, ["threat_model", field])
                raise ScenarioError(
                    f"{fname}:{line}: threat_model.{field}: unknown party {w!r}; choose from {', '.join(sorted(allowed))}"
                )
    seen = {tm.observer}
    for w in tm.colluders:  # a coalition of one party twice would be labelled as two
        if w in seen:
            line = line_of(root, ["threat_model", "colluders"])
            what = "the observer" if w == tm.observer else "listed twice"
            raise ScenarioError(
                f"{fname}:{line}: threat_model.colluders: {w!r} is {what}; colluders are the "
                "other parties that share what they see with the observer"
            )
        seen.add(w)
    for i, a in enumerate(sc.attacks):
        if a.target is not None and a.target not in names:  # it would run and output nothing
            line = line_of(root, ["attacks", i, "target"])
            raise ScenarioError(
                f"{fname}:{line}: attacks[{i}].target: unknown party {a.target!r}; parties: "
                f"{', '.join(names)}"
            )
        # an observer attacking itself measures nothing
        if a.target is not None and a.target in {tm.observer, *tm.colluders}:
            line = line_of(root, ["attacks", i, "target"])
            raise ScenarioError(
                f"{fname}:{line}: attacks[{i}].target: {a.target!r} is the observer (or a "
                "colluder) itself, which holds its own rows; aim the attack at another party"
            )
