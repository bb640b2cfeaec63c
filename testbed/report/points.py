"""Which setting a results row belongs to: its series (the protocol, or the swept protocol
spec) and its point within the series (the swept value), with settings that would read alike
kept apart (:func:`distinct_points`)."""

from __future__ import annotations

import re
from collections import defaultdict

__all__ = ["distinct_points", "field_name", "point_of", "series_of", "setting_label"]


def series_of(row: dict) -> str:
    labels = row.get("labels") or {}
    if "protocol" in labels:
        return labels["protocol"]
    return row["results"].get("protocol", {}).get("name", "?")


def field_name(path: str, paths: list[str]) -> str:
    """The name a swept path is shown by: its last field (``defenses[0].params.sigma`` ->
    ``sigma``), or the whole path when two swept paths end in the same field."""

    def last(p: str) -> str:
        return re.sub(r"\[\d+\]", "", p.rsplit(".", 1)[-1])

    if any(last(q) == last(path) for q in paths if q != path):
        return path
    return last(path)


def point_of(row: dict) -> str:
    """The setting a row belongs to within its series, named as ``testbed run`` names it: a
    swept number or word by its field, ``noise_multiplier=0.1``; one swept plugin spec or list by
    its label alone (``large_t(t=0.9)``); several fields as ``field=label`` pairs; what
    :func:`distinct_points` set when that collides."""
    if "point" in row:
        return row["point"]
    labels = {k: v for k, v in (row.get("labels") or {}).items() if k != "protocol"}
    setting = row.get("setting") or {}
    if len(labels) == 1:
        path, label = next(iter(labels.items()))
        if isinstance(setting.get(path, []), (dict, list)):
            return label
    return ", ".join(f"{field_name(k, list(labels))}={v}" for k, v in labels.items()) or "base"


def distinct_points(rows: list[dict]) -> list[dict]:
    """Keep settings apart that :func:`point_of` would name alike: two grids of a sweep that
    set different fields to the same value (``support_size: [3]`` and ``iterations: [3]`` both
    read "3"), which would otherwise be averaged together as if they were seeds of one setting.
    Their rows get ``point``: the fields' last names and values (``iterations=3``), or the
    cell's whole label if that still collides. Rows of one setting differ only by seed."""
    groups: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in rows:
        groups[(series_of(r), point_of(r))].add(str(r.get("label", "")))
    clash = {k for k, labels in groups.items() if len(labels) > 1}
    if not clash:
        return rows
    for r in rows:
        if (series_of(r), point_of(r)) in clash:
            labels = {k: v for k, v in (r.get("labels") or {}).items() if k != "protocol"}
            r["point"] = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in labels.items())
    names: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in rows:
        names[(series_of(r), point_of(r))].add(str(r.get("label", "")))
    for r in rows:
        if len(names[(series_of(r), point_of(r))]) > 1:
            r["point"] = str(r.get("label", ""))
    return rows


def setting_label(row: dict) -> str:
    """A cell's setting, every swept field named: ``noise_multiplier=0.1``; a swept plugin spec
    is shown as its label (``large_t(t=0.9)``), an empty list of defenses as ``no defense``."""
    labels = {k: v for k, v in (row.get("labels") or {}).items() if k != "protocol"}
    setting = row.get("setting") or {}
    parts = []
    for path, label in labels.items():
        value = setting.get(path)
        if value == [] and path.split(".")[-1].startswith("defenses"):
            parts.append("no defense")
        elif isinstance(value, (dict, list)):
            parts.append(label)
        else:
            parts.append(f"{field_name(path, list(labels))}={label}")
    return ", ".join(parts) or "base"
