"""Plugin registries: one per kind, keyed by snake_case name (== YAML key == entry-point name).

Built-ins register themselves when their module is imported; third-party plugins arrive through
entry points in the groups ``ot_testbed.protocols``, ``ot_testbed.attacks``,
``ot_testbed.defenses``, ``ot_testbed.datasets`` and ``ot_testbed.partitioners``. The packages
``protocols``, ``attacks`` and ``defenses`` import none of their modules (:func:`lazy_exports`):
importing one plugin's module imports that module and what it imports, nothing else.

Nothing is imported to know the names: the built-ins are listed in :data:`BUILTIN` (checked
against what importing their modules registers, tests/test_registry_lazy.py) and third-party names
come from the entry points' metadata (``importlib.metadata``). A plugin's module is imported when
the plugin is used (:meth:`Registry.get`); :meth:`Registry.listing` describes the built-ins from
their source (the class docstring's first line) without importing them.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import importlib
import importlib.util
import os
import re
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationInfo

from testbed import plugin_source  # first: the import path as it was before any plugin
from testbed.contract import check_hooks
from testbed.errors import (
    DriverReadError,
    EngineCallError,
    PluginFault,
    TestbedError,
    UnknownPluginError,
)

__all__ = [
    "ATTACKS",
    "PluginRuntimeError",
    "plugin_phase",
    "DATASETS",
    "DEFENSES",
    "PARTITIONERS",
    "PROTOCOLS",
    "Plugin",
    "PluginConfig",
    "Registry",
    "TRANSFORMS",
    "lazy_exports",
    "scenario_parties",
    "check_parties",
]

_SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")

#: kind -> name -> "module:Class" of every built-in plugin (the module registers the class when
#: it is imported)
BUILTIN: dict[str, dict[str, str]] = {
    "protocol": {
        "dp_gaussian_moments": "protocols.dp_moments:DPGaussianMoments",
        "dp_jl_ot": "protocols.dp_baselines:DPJLOT",
        "dp_sliced_wasserstein": "protocols.dp_baselines:DPSlicedWasserstein",
        "fedbary": "protocols.fedbary:FedBary",
        "fedwad": "protocols.fedwad:FedWAD",
        "fedwad_clustered_fl": "protocols.fedwad_clustered_fl:FedWADClusteredFL",
        "fedwad_clustering": "protocols.fedwad_clustering:FedWADClustering",
        "fedwad_coreset": "protocols.fedwad_coreset:FedWADCoreset",
        "sinkhorn_distillation": "protocols.sinkhorn_distillation:SinkhornDistillation",
        "triangle_wad": "protocols.triangle_wad:TriangleWad",
        "triangle_wad_marketplace": "protocols.triangle_wad:TriangleWadMarketplace",
    },
    "attack": {
        "blind_mask_inversion": "attacks.blind_mask_inversion:BlindMaskInversion",
        "clustered_fl_label_inference": "attacks.fedwad_applications:ClusteredFLLabelInference",
        "clustering_inversion": "attacks.clustering_inversion:ClusteringInversion",
        "coreset_inversion": "attacks.fedwad_applications:CoresetInversion",
        "coreset_label_inference": "attacks.fedwad_applications:CoresetLabelInference",
        "fedbary_inversion": "attacks.fedbary_inversion:FedBaryInversion",
        "fedwad_distributional": "attacks.fedwad_distributional:FedWADDistributional",
        "label_distribution_inference": "attacks.distillation:LabelDistributionInference",
        "marketplace_trilateration": "attacks.marketplace_trilateration:MarketplaceTrilateration",
        "measure_inversion": "attacks.measure_inversion:MeasureInversion",
        "moments_sampling": "attacks.moments_sampling:MomentsSampling",
        "projection_inversion": "attacks.projection_inversion:ProjectionInversion",
        "reconstruction_membership": "attacks.reconstruction_membership:ReconstructionMembership",
        "release_membership": "attacks.release:ReleaseMembership",
        "release_points": "attacks.release:ReleasePoints",
        "sent_rows": "attacks.sent_rows:SentRows",
        "soft_label_membership": "attacks.distillation:SoftLabelMembership",
        "support_membership": "attacks.support_membership:SupportMembership",
        "word2vec_retrieval": "attacks.word2vec_retrieval:Word2VecRetrieval",
    },
    "defense": {
        "distances_at_end": "defenses.knobs:DistancesAtEnd",
        "dp_sgd_teachers": "defenses.distillation:DPSGDTeachers",
        "gaussian_measure_noise": "defenses.gaussian_measure_noise:GaussianMeasureNoise",
        "large_t": "defenses.knobs:LargeT",
        "noisy_soft_labels": "defenses.distillation:NoisySoftLabels",
        "pate_aggregation": "defenses.distillation:PateAggregation",
        "random_t": "defenses.knobs:RandomT",
        "secret_isometry_mask": "defenses.secret_mask:SecretIsometryMask",
        "small_support": "defenses.knobs:SmallSupport",
        "subsample_support": "defenses.subsample_support:SubsampleSupport",
    },
    "dataset": {
        "breast_cancer": "testbed.data.datasets:BreastCancer",
        "csv": "testbed.data.files:CsvFile",
        "diabetes": "testbed.data.datasets:Diabetes",
        "digits": "testbed.data.datasets:Digits",
        "gaussians": "testbed.data.datasets:Gaussians",
        "iris": "testbed.data.datasets:Iris",
        "lee_documents": "testbed.data.text:LeeDocuments",
        "npy": "testbed.data.files:NpyFile",
        "text_documents": "testbed.data.own_text:TextDocuments",
        "vader_lexicon": "testbed.data.distill:VaderLexicon",
        "valence_arousal": "testbed.data.distill:ValenceArousal",
        "wine": "testbed.data.datasets:Wine",
    },
    "partitioner": {
        "class_subsets": "testbed.data.partitions:ClassSubsets",
        "dirichlet": "testbed.data.partitions:DirichletLabel",
        "distill_split": "testbed.data.distill:DistillSplit",
        "iid": "testbed.data.partitions:Iid",
        "quantity_skew": "testbed.data.partitions:QuantitySkew",
        "shared_base": "testbed.data.partitions:SharedBase",
    },
    "transform": {
        "otdd_augment": "testbed.data.transforms:OtddAugment",
        "scale": "testbed.data.transforms:Scale",
    },
}


class PluginRuntimeError(PluginFault):
    """An exception raised inside a plugin: one line naming the plugin and the phase; the
    original exception is its ``__cause__`` (``--debug`` prints its traceback). A fault of
    the plugin, not bad input: the command exits 1."""

    def __init__(self, kind: str, name: str, phase: str, exc: BaseException):
        self.kind, self.plugin, self.phase = kind, name, phase
        msg = " ".join(str(exc).split()) or "(no message)"
        super().__init__(f"{kind} {name!r} failed in {phase}: {type(exc).__name__}: {msg}")


class plugin_phase:  # noqa: N801 - used as a context manager, reads like a statement
    """``with plugin_phase("attack", name, "run"):`` turns any exception but a TestbedError
    or a Ctrl-C into a :class:`PluginRuntimeError` naming the plugin and the phase; a
    ``SystemExit`` is turned too."""

    def __init__(self, kind: str, name: str, phase: str):
        self.kind, self.name, self.phase = kind, name, phase

    def __enter__(self):
        return self

    def __exit__(self, et, exc, tb):
        if isinstance(exc, (EngineCallError, DriverReadError)):  # what failed, not whose call
            raise PluginFault(f"{self.kind} {self.name!r} failed in {self.phase}: {exc}") from exc
        if exc is None or isinstance(exc, TestbedError):
            return False  # user-facing errors already say what is wrong
        if not isinstance(exc, (Exception, SystemExit, GeneratorExit)):
            return False  # Ctrl-C passes
        # a plugin's sys.exit() (in the driver, or in a party's call on a worker, re-raised
        # here) is a failure of that plugin: it must not end the command with its exit code,
        # 0 included, and nothing written
        raise PluginRuntimeError(self.kind, self.name, self.phase, exc) from exc


class PluginConfig(BaseModel):
    """Base for every plugin's parameters: unknown keys are rejected, instances are frozen.

    A scenario's params are validated (``testbed validate``, and ``testbed run`` before it runs)
    with a context, ``info.context`` in a pydantic validator: ``base_dir`` (the scenario's
    folder), ``parties`` (its party names, :func:`scenario_parties`) and, for the partitioner,
    ``labels`` (the class labels the dataset can hold, when its config alone tells them:
    ``DatasetPlugin.possible_labels``). A config built without a scenario (at run time, in a
    test) has no context: checks that need one are left to the run."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def scenario_parties(info: ValidationInfo) -> list[str] | None:
    """The scenario's party names while its params are validated; None without a scenario."""
    return (info.context or {}).get("parties")


def check_parties(names, info: ValidationInfo) -> None:
    """``ValueError`` naming the first of ``names`` that is not one of the scenario's parties
    (nothing is checked without a scenario)."""
    parties = scenario_parties(info)
    if parties is None:
        return
    known = set(parties)
    for n in names:
        if n not in known:
            more = f", ... ({len(parties)})" if len(parties) > 10 else ""
            raise ValueError(f"{n!r} is not a party; parties: {', '.join(parties[:10])}{more}")


class Plugin:
    """Common shape of every plugin: a name, a Config model, a constructor that stores config."""

    name: ClassVar[str] = ""
    Config: ClassVar[type[PluginConfig]] = PluginConfig

    def __init__(self, config: PluginConfig | None = None):
        self.config = config if config is not None else self.Config()

    @classmethod
    def from_params(cls, params: dict[str, Any] | None = None):
        return cls(cls.Config(**(params or {})))

    def multiplier(self) -> float | None:
        """The Gaussian noise multiplier of a plugin that calibrates one (``noise_multiplier``
        given, or found for its ``target_epsilon``): ``testbed validate`` calls it to refuse a
        target no noise reaches. ``None`` (default): the plugin adds no calibrated noise."""
        return None

    @classmethod
    def describe(cls) -> str:
        doc = (cls.__doc__ or "").strip().splitlines()
        return doc[0].strip() if doc else ""


class Registry:
    """Name -> class mapping for one plugin kind."""

    def __init__(
        self,
        kind: str,
        group: str,
        builtin: str,
        base: str = "testbed.registry:Plugin",
        sandboxed: bool = False,
    ):
        self.kind = kind
        #: its plugins run in the attack sandbox: an entry point's package is located before
        #: its code runs (:mod:`testbed.plugin_source`), and one the sandbox must not open is
        #: refused without importing it
        self.sandboxed = sandboxed
        self._sources: dict[str, tuple[plugin_source.Source, str]] = {}
        self.group = group
        self._builtin = builtin
        #: "module:Class" every plugin of this kind subclasses (imported when the first plugin
        #: registers: its module has imported it already)
        self._base = base
        self._items: dict[str, type] = {}
        self._origins: dict[str, str] = {}
        #: name -> why it cannot be used (failed import, refused duplicate); only scenarios
        #: that use that name fail, with this message
        self._broken: dict[str, str] = {}
        self._loaded = False
        self._loading = False

    def register(self, cls: type | None = None, *, name: str | None = None):
        """Class decorator. Refuses a duplicate name and a non-snake_case name."""

        def deco(c: type) -> type:
            base = self.base()
            if not (isinstance(c, type) and issubclass(c, base)):
                what = c.__name__ if isinstance(c, type) else f"a {type(c).__name__}"
                raise TestbedError(
                    f"{what} is not {'an' if self.kind[0] in 'aeiou' else 'a'} {self.kind} "
                    f"plugin: subclass "
                    f"{base.__module__.split('._')[0]}.{base.__qualname__}"
                )
            check_hooks(c, base, self.kind)  # a misspelt optional hook would be ignored
            own = vars(c).get("name")
            if name is not None and isinstance(own, str) and own and own != name:
                raise TestbedError(
                    f"its class {c.__name__} is named {own!r}: a scenario uses the entry "
                    f"point's name, so give both the same name"
                )
            key = name or getattr(c, "name", "")
            if not key or not _SNAKE.match(key):
                raise TestbedError(
                    f"{self.kind} plugin {c.__qualname__}: name must be snake_case, got {key!r}"
                )
            if key in self._items and self._items[key] is not c:
                raise TestbedError(
                    f"{self.kind} {key!r} is already registered by {self._origins[key]}; "
                    f"refusing {c.__module__}.{c.__qualname__}"
                )
            c.name = key
            self._items[key] = c
            self._origins[key] = f"{c.__module__}.{c.__qualname__}"
            return c

        return deco(cls) if cls is not None else deco

    def base(self) -> type:
        """The class every plugin of this kind subclasses."""
        module, cls = self._base.split(":")
        return getattr(importlib.import_module(module), cls)

    def _ensure_loaded(self) -> None:
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            importlib.import_module(self._builtin)
            for module in self.modules():
                importlib.import_module(module)  # the packages import no module themselves
            for ep in self._entry_points().values():
                self._load_entry_point(ep)
            self._loaded = True
        finally:
            self._loading = False

    def _load_entry_point(self, ep) -> None:
        """Register one entry point; a failed import or a duplicate name is recorded as broken
        (listed by ``testbed plugins``; fails only the scenarios that use the name)."""
        origin = f"entry point {ep.name!r} ({ep.value})"
        source = None
        if self.sandboxed and ep.name not in self._items:
            try:  # from the file system, before the plugin's code runs
                source = plugin_source.locate(ep.module, f"{self.kind} {ep.name!r}")
            except plugin_source.NotOnPath:
                pass  # importing it says why (or, found later, it runs in no sandbox)
            except TestbedError as exc:
                self._broken[ep.name] = str(exc)
                return
        try:
            # what a module prints as it is imported is the plugin's, not the testbed's:
            # stdout carries only the testbed's own lines (docs/guide/plugins.md)
            with contextlib.redirect_stdout(sys.stderr):
                obj = ep.load()
        except Exception as exc:  # a broken third-party plugin must not break the rest
            self._broken[ep.name] = (
                f"{self.kind} {ep.name!r}: {origin} failed to import: {type(exc).__name__}: {exc}"
            )
            return
        if ep.name in self._items:
            if self._items[ep.name] is obj:
                return  # the same class, already registered by its own import
            why = (
                f"{self.kind} {ep.name!r} is defined twice: by {self._origins[ep.name]} and by "
                f"{origin}; rename one of them"
            )
            if ep.name in self._table:  # a built-in keeps its name; the newcomer is refused
                self._broken[f"{ep.name} ({ep.value})"] = f"{why} (the built-in is used)"
            else:
                self._broken[ep.name] = why
            return
        try:
            self.register(obj, name=ep.name)
        except TestbedError as exc:
            self._broken[ep.name] = f"{origin}: {exc}"
            return
        if source is not None:
            self._sources[ep.name] = (source, ep.attr)

    def source(self, name: str, cls: type) -> tuple[plugin_source.Source, str] | None:
        """Where entry point ``name``'s code lies, found before it ran, and the attribute that
        names its class there, when ``cls`` is the class registered under that name; None for
        a built-in or a plugin registered at run time."""
        return self._sources.get(name) if self._items.get(name) is cls else None

    # ------------------------------------------------------------------ lazy use by name
    @property
    def _table(self) -> dict[str, str]:
        return BUILTIN.get(self.kind, {})

    def modules(self) -> list[str]:
        """The modules that define this kind's built-ins (not imported here): what a process
        that runs any of them imports up front, e.g. the attacks' forkserver."""
        return sorted({where.split(":")[0] for where in self._table.values()})

    def _entry_points(self) -> dict[str, Any]:
        """This kind's entry points by name, from the installed metadata (nothing imported)."""
        return {ep.name: ep for ep in _installed_entry_points().select(group=self.group)}

    def _ensure(self, name: str) -> None:
        """Make ``name`` usable, importing only what defines it: its built-in module, or its
        entry point; anything else (an unknown name) loads everything, for the error message."""
        if self._loaded or name in self._items or name in self._broken:
            return
        ep = self._entry_points().get(name)
        where = self._table.get(name)
        if where is not None:
            importlib.import_module(where.split(":")[0])
            if ep is not None and ep.value != where:
                self._load_entry_point(ep)  # a second definition of the name: broken
            return
        if ep is not None:
            self._load_entry_point(ep)
            return
        self._ensure_loaded()

    def get(self, name: str) -> type:
        self._ensure(name)
        if name in self._broken:
            raise TestbedError(self._broken[name])
        try:
            return self._items[name]
        except KeyError:
            self._ensure_loaded()
            raise UnknownPluginError(self._unknown(name)) from None

    def _unknown(self, name: str) -> str:
        """One line for a name nobody registered: the closest names, else every name, and
        where a plugin of one's own comes from."""
        known = sorted(set(self._items) - set(self._broken))
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.75)
        if close:
            hint = f"did you mean {' or '.join(repr(c) for c in close)}?"
        else:
            hint = f"known: {', '.join(known) or '(none)'}"
        return (
            f"unknown {self.kind} {name!r}; {hint} (a plugin of your own is found through its "
            f"package's entry point in group {self.group!r}: `pip install -e` the package again "
            f"after editing its entry points)"
        )

    def broken(self) -> dict[str, str]:
        """Plugins that cannot be used, with the reason (import error, duplicate name). Loads
        the third-party entry points (a failed import is only known by trying); built-ins are
        not imported."""
        for ep in self._entry_points().values():
            if ep.name not in self._items and ep.name not in self._broken:
                where = self._table.get(ep.name)
                if where is None:
                    self._load_entry_point(ep)
                elif ep.value != where:
                    self._broken[ep.name] = (
                        f"{self.kind} {ep.name!r} is defined twice: by {where.replace(':', '.')} "
                        f"and by entry point {ep.name!r} ({ep.value}); rename one of them"
                    )
        return dict(sorted(self._broken.items()))

    def names(self) -> list[str]:
        """Every usable name: built-ins, entry points, and plugins registered at run time;
        nothing is imported."""
        eps = set(self._entry_points())
        return sorted((set(self._table) | eps | set(self._items)) - set(self._broken))

    def listing(self) -> list[tuple[str, str]]:
        """``(name, description)`` of every usable plugin, for ``testbed plugins``: built-ins
        described from their source without importing them; third-party plugins are loaded
        (their import may fail: :meth:`broken`)."""
        broken = self.broken()
        out = {}
        for name, where in self._table.items():
            cls = self._items.get(name)
            out[name] = cls.describe() if cls is not None else _source_doc(where)
        for name, cls in self._items.items():
            out.setdefault(name, cls.describe())
        return sorted((n, d) for n, d in out.items() if n not in broken)

    def items(self) -> list[tuple[str, type]]:
        self._ensure_loaded()
        return sorted(self._items.items())

    def __contains__(self, name: str) -> bool:
        return name in self.names()

    def origin(self, name: str) -> str:
        self._ensure(name)
        return self._origins[name]


def lazy_exports(package: str, exports: dict[str, str], moved: frozenset[str] = frozenset()):
    """PEP 562 ``__getattr__`` and ``__dir__`` for a plugin package whose public names
    (``name -> module``) are imported on first use: ``import protocols`` (or importing any one
    of its modules, which runs the package first) imports none of the others, nor what they
    import (POT, torch, scikit-learn). A name in ``moved`` is part of the plugin API, whose
    home is :mod:`testbed.api`: reading it here still works, with a ``DeprecationWarning``."""

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if name in moved:
            warnings.warn(
                f"importing {name} from {package!r} is deprecated: import it from testbed.api",
                DeprecationWarning,
                stacklevel=2,
            )
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


_EP_CACHE: dict[tuple, Any] = {}


def _installed_entry_points():
    """Every installed entry point, read once per state of ``sys.path``: its folders and their
    modification times (installing a distribution adds a folder to one of them). Reading the
    metadata of every installed distribution takes ~10 ms; ``testbed plugins`` asks 13 times."""
    key = []
    for entry in sys.path:
        try:
            key.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            key.append((entry, None))
    key = tuple(key)
    if key not in _EP_CACHE:
        _EP_CACHE.clear()
        _EP_CACHE[key] = entry_points()  # every group; ``.select(group=...)`` picks one
    return _EP_CACHE[key]


def _source_doc(where: str) -> str:
    """First line of the docstring of class ``module:Class``, read from the module's source
    without importing it (or its package); "" when the source cannot be read."""
    module, _, cls = where.partition(":")
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: found, not executed
    except (ValueError, ImportError):
        return ""
    if spec is None or not spec.submodule_search_locations:
        return ""
    path = Path(next(iter(spec.submodule_search_locations)), *rest).with_suffix(".py")
    return _class_docs(str(path)).get(cls, "")


@functools.cache
def _class_docs(path: str) -> dict[str, str]:
    """Class name -> first line of its docstring, for the top-level classes of one source file
    (parsed once: several plugins share a module)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            doc = (ast.get_docstring(node) or "").strip().splitlines()
            out[node.name] = doc[0].strip() if doc else ""
    return out


PROTOCOLS = Registry("protocol", "ot_testbed.protocols", "protocols", "protocols._base:Protocol")
ATTACKS = Registry(
    "attack", "ot_testbed.attacks", "attacks", "attacks._base:Attack", sandboxed=True
)
DEFENSES = Registry("defense", "ot_testbed.defenses", "defenses", "defenses._base:Defense")
DATASETS = Registry(
    "dataset", "ot_testbed.datasets", "testbed.data.builtins", "testbed.data.datasets:DatasetPlugin"
)
PARTITIONERS = Registry(
    "partitioner",
    "ot_testbed.partitioners",
    "testbed.data.builtins",
    "testbed.data.partitions:PartitionerPlugin",
)
TRANSFORMS = Registry(
    "transform",
    "ot_testbed.transforms",
    "testbed.data.transforms",
    "testbed.data.transforms:Transform",
)
