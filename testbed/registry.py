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
                if ep.name in self._items:
                    continue
                try:
                    obj = ep.load()
                except Exception as exc:  # a broken third-party plugin must not break the rest
                    raise TestbedError(
                        f"{self.kind} entry point {ep.name!r} ({ep.value}) failed to load: {exc}"
                    ) from exc
                if getattr(obj, "name", "") != ep.name or ep.name not in self._items:
                    self.register(obj, name=ep.name)
            self._loaded = True
        finally:
            self._loading = False

    def get(self, name: str) -> type:
        self._ensure_loaded()
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "(none)"
            raise UnknownPluginError(f"unknown {self.kind} {name!r}; known: {known}") from None

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
DATASETS = Registry("dataset", "ot_testbed.datasets", "testbed.data")
PARTITIONERS = Registry("partitioner", "ot_testbed.partitioners", "testbed.data")
TRANSFORMS = Registry("transform", "ot_testbed.transforms", "testbed.transforms")
