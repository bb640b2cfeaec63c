"""A scenario is resolved once: one ``testbed run`` validates every plugin's params once and
builds each plugin's config once (the loader's; preflight, the resource check, the World and the
attack stage reuse it), and a sweep resolves each of its cells once.

Counted in this process: an attack's config is rebuilt in its own sandboxed process from the
params it is sent, which no counter here sees (nor should: that process trusts nothing of ours).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

import testbed.scenario.cells as cells_mod
import testbed.scenario.loading as loading_mod
import testbed.scenario.params as params_mod
import testbed.scenario.resolve as resolve_mod
from testbed.cli.main import main
from testbed.registry import ATTACKS, DATASETS, DEFENSES, PARTITIONERS, PROTOCOLS

ROOT = Path(__file__).resolve().parents[1]

WITH_PLUGINS = """\
name: resolved_once
seed: 3
data:
  dataset:
    name: gaussians
    params:
      d: 3
      components:
        - {n: 30, mean: 0.0}
        - {n: 20, mean: 2.0}
  partition:
    name: class_subsets
    params: {classes: [[0], [1]]}
  parties: [alice, bob]
protocol:
  name: fedwad
  params: {support_size: 5, iterations: 3}
defenses:
  - name: gaussian_measure_noise
    # tight (the default) sets FedWAD's plan_tie_break: a knob
    params: {clip_norm: 5.0, push_max: 0.5, target_epsilon: 8.0, releases: 4, calibration: tight}
threat_model:
  observer: server
attacks:
  - {name: fedwad_distributional}
"""


class _CountingValidator:
    """Stands in for a Config class's pydantic validator: counts every validation (both
    ``Config(**params)`` and ``Config.model_validate(params)`` go through it)."""

    def __init__(self, name: str, inner, counts: Counter):
        self._name, self._inner, self._counts = name, inner, counts

    def validate_python(self, *args, **kwargs):
        self._counts[self._name] += 1
        return self._inner.validate_python(*args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._inner, attr)


def _count(monkeypatch, text: str) -> Counter:
    """Counters for ``validate_plugins`` and for the Config of every plugin ``text`` names."""
    counts: Counter = Counter()
    doc = yaml.safe_load(text)
    plugins = [
        (DATASETS, doc["data"]["dataset"]["name"]),
        (PARTITIONERS, doc["data"]["partition"]["name"]),
        (PROTOCOLS, doc["protocol"]["name"]),
        *((DEFENSES, d["name"]) for d in doc.get("defenses") or []),
        *((ATTACKS, a["name"]) for a in doc.get("attacks") or []),
    ]
    for reg, name in plugins:
        cfg = reg.get(name).Config
        wrapped = _CountingValidator(name, cfg.__pydantic_validator__, counts)
        monkeypatch.setattr(cfg, "__pydantic_validator__", wrapped)
    real = params_mod.validate_plugins

    def counted(*args, **kwargs):
        counts["validate_plugins"] += 1
        return real(*args, **kwargs)

    for mod in (params_mod, loading_mod, resolve_mod, cells_mod):
        if hasattr(mod, "validate_plugins"):
            monkeypatch.setattr(mod, "validate_plugins", counted)
    return counts


@pytest.mark.parametrize(
    ("text", "knob"),
    [
        ((ROOT / "scenarios" / "contract_tiny.yaml").read_text(), False),
        # 5 s on an idle core: the knob case below builds the same plugins (make test-slow)
        pytest.param(
            WITH_PLUGINS.replace("calibration: tight", "calibration: worst_case"),
            False,
            marks=pytest.mark.slow,
        ),
        # 8 s (a defense and an attack built and run): the contract_tiny case keeps the count
        # in make test (make test-slow)
        pytest.param(WITH_PLUGINS, True, marks=pytest.mark.slow),
    ],
    ids=["contract_tiny", "defense_and_attack", "defense_sets_a_knob"],
)
def test_one_run_validates_and_builds_each_config_once(tmp_path, monkeypatch, text, knob):
    # Prepare
    path = tmp_path / "s.yaml"
    path.write_text(text)
    counts = _count(monkeypatch, text)
    # Execute
    code = main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"])
    # Assert
    assert code == 0
    assert (tmp_path / "run" / "results.json").is_file()
    assert counts, "nothing counted"
    want = dict.fromkeys(counts, 1)
    if knob:  # the protocol's params as written (resolved.yaml) and as it runs, with the knob
        want["fedwad"] = 2
    assert dict(counts) == want, dict(counts)


def test_a_sweep_resolves_each_cell_once(tmp_path, monkeypatch):
    # Prepare: 2 settings x 2 seeds = 4 cells, and the sweep itself
    text = (ROOT / "scenarios" / "contract_tiny.yaml").read_text()
    text += "sweep:\n  protocol.params.iterations: [2, 3]\nseeds: [0, 1]\n"
    path = tmp_path / "s.yaml"
    path.write_text(text)
    counts = _count(monkeypatch, text)
    # Execute
    code = main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"])
    # Assert
    assert code == 0
    assert len(list((tmp_path / "run" / "cells").iterdir())) == 4
    assert dict(counts) == dict.fromkeys(counts, 1 + 4), dict(counts)
