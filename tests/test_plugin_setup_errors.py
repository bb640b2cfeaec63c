"""A plugin whose config defaults or constructor fail, met while a scenario is checked
(``testbed validate``, and ``testbed run`` before it runs): one line naming the plugin, the
phase and the scenario's line, exit 1 (the plugin's fault, not the scenario's), no traceback."""

from __future__ import annotations

import pytest
from _scenarios import gaussians, tiny
from _toy_protocols import registered

from testbed.api import Attack, AttackConfig, Protocol
from testbed.cli.main import main
from testbed.registry import ATTACKS, PROTOCOLS, PluginConfig


class HeavyInit(Attack):
    name = "probe_heavy_init"

    class Config(AttackConfig):
        pass

    def __init__(self, config):
        super().__init__(config)
        1 / 0  # noqa: B018 - a plugin author's mistake

    def run(self, view, public, rng):
        return []


class InitRaise(Protocol):
    name = "probe_init_raise"

    class Config(PluginConfig):
        pass

    def __init__(self, config):
        raise RuntimeError("init boom")

    def run(self, parties, bus, rng):
        raise AssertionError("never reached")

    def check_rows(self, rows):  # asked before the data loads: the protocol is built for it
        return None


@pytest.mark.parametrize(
    "reg,cls,text,want",
    [
        (
            ATTACKS,
            HeavyInit,
            tiny("setup_attack", "attacks: [{name: probe_heavy_init}]"),
            "attack 'probe_heavy_init' failed in setup (",
        ),
        (
            PROTOCOLS,
            InitRaise,
            gaussians("setup_protocol", protocol="probe_init_raise", params="{}", transform=None),
            "protocol 'probe_init_raise' failed in setup (",
        ),
    ],
    ids=["attack", "protocol"],
)
def test_a_plugin_that_fails_while_being_set_up_is_named(reg, cls, text, want, tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with registered(cls, registry=reg):
        code = main(["validate", str(f)])
    cap = capsys.readouterr()
    err = cap.err
    assert code == 1, cap.out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and want in lines[0] and "s.yaml:" in lines[0], err
    assert "Traceback" not in err
