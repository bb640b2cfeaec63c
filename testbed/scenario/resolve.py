"""A scenario resolved: the frozen record every stage reads (:class:`ResolvedScenario`: the
scenario, every plugin's validated config, the hash), built once per scenario (and once per
sweep cell) when it is loaded.

Its JSON form (:meth:`ResolvedScenario.as_json`: every default and every plugin's params filled
in) is what ``resolved.yaml`` holds; its SHA-256 (``config_hash``) names the run directory and
keys the sweep's cache. How and where a run was done (``UNHASHED``: whether the transcript is
saved, the resource limits, the engine) is kept in the JSON form, so that re-running
``resolved.yaml`` (``testbed verify --rerun``, ``testbed attack``) runs under the same settings,
but it is left out of the hash: it does not change the results, and runs that differ only there
share a hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from testbed.scenario.limits import effective_limits
from testbed.scenario.params import PluginConfigs, validate_plugins
from testbed.scenario.schema import Scenario

__all__ = ["UNHASHED", "ResolvedScenario", "config_hash", "resolve"]

UNHASHED = ("output", "limits", "engine", "engine_params")


@dataclass(frozen=True)
class ResolvedScenario:
    """A scenario with every plugin's config validated once (``configs``) and the hash that
    names its run.

    This one record goes to the resource check, preflight, every stage of a run and the
    commands: each plugin is built from its config here, never from params read again.
    ``config_hash`` keys the run directory, the sweep's cell cache and ``testbed attack``'s check
    that a run directory is one run's.
    """

    scenario: Scenario
    configs: PluginConfigs
    config_hash: str

    @classmethod
    def build(cls, sc: Scenario, configs: PluginConfigs) -> ResolvedScenario:
        """The record of ``sc`` from its validated ``configs``; the loader keeps it on ``sc``
        (:meth:`of` returns it instead of validating again)."""
        rs = cls(sc, configs, config_hash(_as_json(sc, configs)))
        sc._resolved = rs
        return rs

    @classmethod
    def of(cls, sc: Scenario | ResolvedScenario) -> ResolvedScenario:
        """``sc``'s record: the one built when it was loaded, else validated now (a scenario
        built in code, or a copy)."""
        if isinstance(sc, ResolvedScenario):
            return sc
        kept = getattr(sc, "_resolved", None)
        if kept is not None and kept.scenario is sc:  # a model_copy carries a stale one
            return kept
        return cls.build(sc, validate_plugins(sc, None, sc.name, getattr(sc, "_base_dir", ".")))

    def portable(self) -> ResolvedScenario:
        """This record without the scenario file's YAML tree (every node keeps the whole file's
        text): what a sweep sends to a worker process."""
        sc = self.scenario.model_copy()
        sc._yaml_root, sc._raw, sc._cells = None, None, None
        rs = ResolvedScenario(sc, self.configs, self.config_hash)
        sc._resolved = rs
        return rs

    @property
    def seed(self) -> int:
        return self.scenario.seed

    @property
    def name(self) -> str:
        return self.scenario.name

    def as_json(self) -> dict[str, Any]:
        """The scenario with every default and every plugin's params filled in: what
        ``resolved.yaml`` holds (a new dict each call)."""
        return _as_json(self.scenario, self.configs)

    def attack_entries(self) -> list[dict[str, Any]]:
        """Each attack as :func:`~testbed.scenario.labels.attack_labels` reads it: its name,
        params (defaults filled in), label and target."""
        return [
            {
                "name": a.name,
                "params": c.model_dump(mode="json"),
                "label": a.label,
                "target": a.target,
            }
            for a, c in zip(self.scenario.attacks, self.configs.attacks)
        ]


def resolve(sc: Scenario | ResolvedScenario) -> dict[str, Any]:
    """The scenario with every default and every plugin's params filled in (JSON-able)."""
    return ResolvedScenario.of(sc).as_json()


def _as_json(sc: Scenario, configs: PluginConfigs) -> dict[str, Any]:
    out = sc.model_dump(mode="json")
    out["data"]["dataset"]["params"] = configs.dataset.model_dump(mode="json")
    out["data"]["partition"]["params"] = configs.partition.model_dump(mode="json")
    out["data"]["parties"] = sc.data.party_names()
    if configs.transform is not None:
        out["data"]["transform"]["params"] = configs.transform.model_dump(mode="json")
    out["protocol"]["params"] = configs.protocol.model_dump(mode="json")
    for d, c in zip(out["defenses"], configs.defenses):
        d["params"] = c.model_dump(mode="json")
    for a, c in zip(out["attacks"], configs.attacks):
        a["params"] = c.model_dump(mode="json")
        for key in ("label", "input"):  # unset: older configs' hashes unchanged
            if a.get(key) is None:
                a.pop(key, None)
        if a.get("if_not_applicable", "error") == "error":  # the default: hashes unchanged
            a.pop("if_not_applicable", None)  # (a skip stays: a re-run must skip it too)
    if out.get("membership") is None:
        out.pop("membership", None)
    if not out["data"].get("public"):  # unset: older configs' hashes unchanged
        out["data"].pop("public", None)
    # not hashed (config_hash): whether the transcript is saved (not where: a path of this
    # machine), the limits the run was checked against (the command line's overrides included),
    # where parties computed; each only when it differs from the default
    out["output"] = {"save_transcript": sc.output.save_transcript}
    limits = effective_limits(sc)
    if limits:
        out["limits"] = limits
    else:
        out.pop("limits", None)
    if out.get("engine") == "inprocess" and not out.get("engine_params"):
        out.pop("engine", None)
        out.pop("engine_params", None)
    for k in ("sweep", "seeds"):  # a single run's hash does not depend on these when unset
        if out.get(k) is None:
            out.pop(k, None)
    return out


def config_hash(resolved: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a resolved scenario, without its ``UNHASHED`` keys."""
    hashed = {k: v for k, v in resolved.items() if k not in UNHASHED}
    blob = json.dumps(hashed, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
