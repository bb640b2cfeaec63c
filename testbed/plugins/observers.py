"""What each observer sees of each built-in protocol, from a run rather than from prose.

Protocols declare their message kinds (``Protocol.message_kinds``) but not who sends each kind
to whom, so :func:`observer_table` runs the protocol's contract scenario once
(:func:`testbed.testing.protocol_checks.protocol_run`: ``scenarios/contract_tiny[_<name>].yaml``)
and records the sender and receiver of every envelope. Who sees a message then follows from
:func:`testbed.exchange.envelope.route_visible_to`, the rule the View applies: its sender, its
receiver, and the eavesdropper, who sees every message. A declared kind the contract run does
not send is taken from a run of another setting on the same scenario (:data:`OTHER_SETTINGS`,
named in the table), else listed as not sent.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

from testbed.exchange.envelope import EAVESDROPPER, route_visible_to
from testbed.registry import BUILTIN, PROTOCOLS
from testbed.testing.protocol_checks import _scenario_source, protocol_run

__all__ = ["observer_table", "observer_tables"]

SERVER = "server"


def _routes(pairs: list[tuple[str, str]], order: list[str]) -> str:
    """``server → alice, bob`` / ``alice, bob → server``, else every route (names in the
    order of ``order``)."""

    def rank(x: str) -> int:
        return order.index(x) if x in order else len(order)

    pairs = sorted(dict.fromkeys(pairs), key=lambda p: (rank(p[0]), rank(p[1])))
    senders = sorted({s for s, _ in pairs}, key=rank)
    receivers = sorted({r for _, r in pairs}, key=rank)
    if len(senders) == 1:
        return f"{senders[0]} → {', '.join(receivers)}"
    if len(receivers) == 1:
        return f"{', '.join(senders)} → {receivers[0]}"
    return "; ".join(f"{s} → {r}" for s, r in pairs)


def _seen(pairs: list[tuple[str, str]], observer: str) -> str:
    k = sum(route_visible_to(s, r, {observer}) for s, r in pairs)
    if k == 0:
        return "—"
    return "all" if k == len(pairs) else f"{k} of {len(pairs)}"


#: other settings of a built-in protocol whose contract run leaves declared kinds unsent:
#: params run once more on the same contract scenario (the table names the setting)
OTHER_SETTINGS: dict[str, tuple[dict, ...]] = {
    "triangle_wad": ({"setting": "unknown_t"},),
    "sinkhorn_distillation": ({"weighting": "D"}, {"aggregation": "pate"}),
}


def _runs(cls) -> list[tuple[str, object]]:
    """``(setting, run)``: the contract run ("" for its own setting), then one run per
    :data:`OTHER_SETTINGS` entry of the protocol."""
    out = [("", protocol_run(cls))]
    raw, _, _ = _scenario_source(cls, None)
    for params in OTHER_SETTINGS.get(cls.name, ()):
        proto = dict(raw.get("protocol") or {})
        proto["params"] = {**(proto.get("params") or {}), **params}
        label = ", ".join(f"{k}: {v}" for k, v in params.items())
        out.append((label, protocol_run(cls, {**raw, "protocol": proto})))
    return out


def observer_table(name: str) -> str:
    """The markdown section of protocol ``name``: its contract run's routes per message kind
    and, per observer, how many of those messages it sees."""
    cls = PROTOCOLS.get(name)
    runs = _runs(cls)
    run = runs[0][1]
    by_kind: dict[str, list[tuple[str, str]]] = {}
    setting: dict[str, str] = {}
    for label, r in runs:
        for e in r.transcript.envelopes:
            if setting.setdefault(e.kind, label) == label:  # a kind from the first run sending it
                by_kind.setdefault(e.kind, []).append((e.sender, e.receiver))
    talking = {x for pairs in by_kind.values() for pair in pairs for x in pair}
    parties = [p for p in run.world.parties if p in talking]
    others = sorted(talking - {SERVER, EAVESDROPPER, *parties})  # e.g. a trusted aggregator
    silent = [p for p in run.world.parties if p not in talking]
    observers = [SERVER, *parties, *others, EAVESDROPPER]
    where = Path(run.scenario._fname).name
    head = f"**`{name}`** (`{where}`: parties {', '.join(run.world.parties)}"
    head += f"; {', '.join(silent)} send and receive nothing)" if silent else ")"
    lines = [
        head,
        "",
        "| message kind | sender → receiver | messages | " + " | ".join(observers) + " |",
        "|---|---|---|" + "---|" * len(observers),
    ]
    listed: set[str] = set()
    for glob in cls.message_kinds:
        kinds = [k for k in by_kind if fnmatchcase(k, glob) and k not in listed]
        if not kinds:
            cells = " | ".join("—" for _ in observers)
            lines.append(f"| `{glob}` | not sent in this run | 0 | {cells} |")
        for k in kinds:
            listed.add(k)
            pairs = by_kind[k]
            cells = " | ".join(_seen(pairs, o) for o in observers)
            route = _routes(pairs, observers)
            if setting[k]:
                route += f" (with `{setting[k]}`)"
            lines.append(f"| `{k}` | {route} | {len(pairs)} | {cells} |")
    return "\n".join(lines)


def observer_tables() -> str:
    """Every built-in protocol's :func:`observer_table`, in name order."""
    return "\n\n".join(observer_table(n) for n in sorted(BUILTIN["protocol"]))
