"""A plugin module that prints as it is imported (tests/test_plugin_path.py)."""

from __future__ import annotations

from testbed.api import Attack

print("LOUD AT IMPORT")  # a plugin author's debugging line


class Loud(Attack):
    protocols = ("fedwad",)

    def run(self, view, public, rng):
        return []
