"""What ``testbed run`` would refuse, checked before anything runs (``testbed validate`` and
``testbed run`` both call :func:`preflight`): duplicate attack labels, an ``input:`` that names
no attack label or makes a cycle, and attacks that do not apply
to the protocol of the scenario (or of a sweep cell) unless the attack entry says
``if_not_applicable: skip`` — then the attack is listed as skipped, never dropped in silence.
"""

from __future__ import annotations

from typing import Any

from testbed.errors import TestbedError
from testbed.registry import ATTACKS, PROTOCOLS, plugin_phase
from testbed.scenario.cells import expand_cells
from testbed.scenario.headline import headline_patterns, headline_ranking
from testbed.scenario.labels import attack_labels, attack_order
from testbed.scenario.resolve import ResolvedScenario
from testbed.scenario.schema import Scenario
from testbed.scenario.yamlloc import line_of

__all__ = ["attack_at", "inapplicable", "preflight", "skipped_attacks", "without_output"]


def attack_at(sc, i: int, key: str | None = None) -> str:
    """``file:line`` of ``attacks[i]`` (of its field ``key`` when given) in the scenario's YAML
    (``file`` when no line is known; a sweep cell's tree points at the lines its values were
    written on)."""
    fname = getattr(sc, "_fname", None) or "<scenario>"
    loc: list = ["attacks", i] if key is None else ["attacks", i, key]
    line = line_of(getattr(sc, "_yaml_root", None), loc)
    return f"{fname}:{line}" if line else fname


def inapplicable(rs: ResolvedScenario) -> list[tuple[int, str, tuple[str, ...]]]:
    """``(index, attack name, protocols it applies to)`` of every attack of one (cell) scenario
    that does not apply to its protocol."""
    out, sc = [], rs.scenario
    for i, (spec, cfg) in enumerate(zip(sc.attacks, rs.configs.attacks)):
        cls = ATTACKS.get(spec.name)
        # its constructor is the plugin's code: a failure names it
        with plugin_phase("attack", spec.name, f"setup ({attack_at(sc, i)})"):
            applies = cls(cfg).applies_to(sc.protocol.name)
        if not applies:
            out.append((i, spec.name, tuple(cls.protocols)))
    return out


def preflight(sc: Scenario | ResolvedScenario) -> list[str]:
    """Raise :class:`TestbedError` (one line naming the file, the attack, the protocol and the
    protocols it applies to) for what a run would refuse; return one line per skipped attack."""
    rs = ResolvedScenario.of(sc)
    sc = rs.scenario
    cells = [c.rs for c in expand_cells(sc)] if sc.is_sweep else [rs]
    skipped: dict[str, None] = {}
    for crs in cells:
        cell = crs.scenario
        try:  # the scorer reads it after the protocol ran: refuse a bad one before
            headline_patterns(PROTOCOLS.get(cell.protocol.name))
            headline_ranking(PROTOCOLS.get(cell.protocol.name))
        except TestbedError as exc:
            raise TestbedError(f"{sc._fname}: {exc}") from None
        try:
            labels = attack_labels(crs.attack_entries())
        except TestbedError as exc:
            raise TestbedError(f"{sc._fname}: {exc}") from None
        attack_order(
            labels, [a.input for a in cell.attacks], lambda i, c=cell: attack_at(c, i, "input")
        )
        for i, name, where in inapplicable(crs):
            if getattr(cell.attacks[i], "if_not_applicable", "error") == "skip":
                skipped[
                    f"attacks[{i}] {name}: skipped on protocol {cell.protocol.name!r} (applies to: "
                    f"{', '.join(where)})"
                ] = None
                continue
            raise TestbedError(
                f"{attack_at(cell, i)}: attacks[{i}] {name!r} does not apply to protocol "
                f"{cell.protocol.name!r} (it applies to: {', '.join(where)}); remove it, or set "
                "`if_not_applicable: skip` on it to list it as skipped"
            )
    return list(skipped)


def skipped_attacks(rs: ResolvedScenario) -> list[dict[str, Any]]:
    """The attacks of one (cell) scenario skipped because they do not apply to its protocol
    (``if_not_applicable: skip``), as results.json lists them."""
    sc = rs.scenario
    return [
        {"index": i, "attack": name, "protocol": sc.protocol.name, "applies_to": list(where)}
        for i, name, where in inapplicable(rs)
        if getattr(sc.attacks[i], "if_not_applicable", "error") == "skip"
    ]


def without_output(rs: ResolvedScenario, rows: list[dict[str, Any]]) -> list[str]:
    """Labels of the attacks of one (cell) scenario that apply to its protocol, ran, and gave no
    scored row (e.g. nothing they read was in the observer's view, or a misspelt key)."""
    labels = attack_labels(rs.attack_entries())
    have = {r.get("label") or r.get("attack") for r in rows}
    off = {i for i, _, _ in inapplicable(rs)}
    return [lab for i, lab in enumerate(labels) if i not in off and lab not in have]
