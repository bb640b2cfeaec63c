"""The threat models a scorecard runs every attack under (:mod:`testbed.plugins.scorecard`)."""

from __future__ import annotations

from typing import Any

__all__ = ["threat_models"]


def threat_models(parties: list[str], clients: list[str] | None = None) -> list[dict[str, Any]]:
    """``[{label, observer, colluders}]``: server, each party, eavesdropper, and collusions of
    the server with every client but the last, and of those clients (``clients``: the parties
    whose role is a client, default all)."""
    out = [{"label": "server", "observer": "server", "colluders": []}]
    out += [{"label": p, "observer": p, "colluders": []} for p in parties]
    out.append({"label": "eavesdropper", "observer": "eavesdropper", "colluders": []})
    parties = list(clients) if clients else list(parties)
    if len(parties) >= 2:
        out.append(
            {
                "label": "server+" + "+".join(parties[:-1]),
                "observer": "server",
                "colluders": list(parties[:-1]),
            }
        )
    if len(parties) >= 3:
        out.append(
            {
                "label": "+".join(parties[:-1]),
                "observer": parties[0],
                "colluders": list(parties[1:-1]),
            }
        )
    return out
