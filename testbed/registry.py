"""Plugin registries: one per kind, keyed by snake_case name (== YAML key == entry-point name).

Built-ins register themselves when their package is imported; third-party plugins arrive through
entry points in the groups ``ot_testbed.protocols``, ``ot_testbed.attacks``,
``ot_testbed.defenses``, ``ot_testbed.datasets`` and ``ot_testbed.partitioners``.
"""

from __future__ import annotations

import importlib
import re
from importlib.metadata import entry_points
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from testbed.errors import TestbedError, UnknownPluginError

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
]

_SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


class PluginRuntimeError(TestbedError):
    """An exception raised inside a plugin: one line naming the plugin and the phase; the
    original exception is its ``__cause__`` (``--debug`` prints its traceback)."""

    def __init__(self, kind: str, name: str, phase: str, exc: BaseException):
        self.kind, self.plugin, self.phase = kind, name, phase
        msg = " ".join(str(exc).split()) or "(no message)"
        super().__init__(f"{kind} {name!r} failed in {phase}: {type(exc).__name__}: {msg}")


class plugin_phase:  # noqa: N801 - used as a context manager, reads like a statement
    """``with plugin_phase("attack", name, "run"):`` turns any exception other than a
    TestbedError into a :class:`PluginRuntimeError` naming the plugin and the phase."""

    def __init__(self, kind: str, name: str, phase: str):
        self.kind, self.name, self.phase = kind, name, phase

    def __enter__(self):
        return self

    def __exit__(self, et, exc, tb):
        if exc is None or isinstance(exc, TestbedError) or not isinstance(exc, Exception):
            return False  # user-facing errors already say what is wrong; Ctrl-C passes
        raise PluginRuntimeError(self.kind, self.name, self.phase, exc) from exc


class PluginConfig(BaseModel):
    """Base for every plugin's parameters: unknown keys are rejected, instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Plugin:
    """Common shape of every plugin: a name, a Config model, a constructor that stores config."""

    name: ClassVar[str] = ""
    Config: ClassVar[type[PluginConfig]] = PluginConfig

    def __init__(self, config: PluginConfig | None = None):
        self.config = config if config is not None else self.Config()

    @classmethod
    def from_params(cls, params: dict[str, Any] | None = None):
        return cls(cls.Config(**(params or {})))

    @classmethod
    def describe(cls) -> str:
        doc = (cls.__doc__ or "").strip().splitlines()
        return doc[0].strip() if doc else ""


class Registry:
    """Name -> class mapping for one plugin kind."""

    def __init__(self, kind: str, group: str, builtin: str):
        self.kind = kind
        self.group = group
        self._builtin = builtin
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

    def _ensure_loaded(self) -> None:
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            importlib.import_module(self._builtin)
            for ep in entry_points(group=self.group):
                self._load_entry_point(ep)
            self._loaded = True
        finally:
            self._loading = False

    def _load_entry_point(self, ep) -> None:
        """Register one entry point; a failed import or a duplicate name is recorded as broken
        (listed by ``testbed plugins``; fails only the scenarios that use the name)."""
        origin = f"entry point {ep.name!r} ({ep.value})"
        try:
            obj = ep.load()
        except Exception as exc:  # a broken third-party plugin must not break the rest
            self._broken[ep.name] = (
                f"{self.kind} {ep.name!r}: {origin} failed to import: {type(exc).__name__}: {exc}"
            )
            return
        if ep.name in self._items:
            if self._items[ep.name] is obj:
                return  # the same class, already registered by its own import
            self._broken[ep.name] = (
                f"{self.kind} {ep.name!r} is defined twice: by {self._origins[ep.name]} and by "
                f"{origin}; rename one of them"
            )
            return
        try:
            self.register(obj, name=ep.name)
        except TestbedError as exc:
            self._broken[ep.name] = f"{origin}: {exc}"

    def get(self, name: str) -> type:
        self._ensure_loaded()
        if name in self._broken:
            raise TestbedError(self._broken[name])
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "(none)"
            raise UnknownPluginError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def broken(self) -> dict[str, str]:
        """Plugins that cannot be used, with the reason (import error, duplicate name)."""
        self._ensure_loaded()
        return dict(sorted(self._broken.items()))

    def names(self) -> list[str]:
        self._ensure_loaded()
        return sorted(self._items)

    def items(self) -> list[tuple[str, type]]:
        self._ensure_loaded()
        return sorted(self._items.items())

    def __contains__(self, name: str) -> bool:
        self._ensure_loaded()
        return name in self._items

    def origin(self, name: str) -> str:
        self._ensure_loaded()
        return self._origins[name]


PROTOCOLS = Registry("protocol", "ot_testbed.protocols", "protocols")
ATTACKS = Registry("attack", "ot_testbed.attacks", "attacks")
DEFENSES = Registry("defense", "ot_testbed.defenses", "defenses")
DATASETS = Registry("dataset", "ot_testbed.datasets", "testbed.data.builtins")
PARTITIONERS = Registry("partitioner", "ot_testbed.partitioners", "testbed.data.builtins")
TRANSFORMS = Registry("transform", "ot_testbed.transforms", "testbed.data.transforms")
