"""``testbed new-attack NAME [DIR]``: scaffold a third-party attack plugin package.

The package is complete and working: a pyproject with the ``ot_testbed.attacks`` entry point, an
attack module (a simple attack that returns the last measure each party sent the observer —
replace its body with yours) and a test that runs the public contract kit. After
``pip install -e DIR`` the attack shows in ``testbed plugins`` and can be named in a scenario.
"""

from __future__ import annotations

import re
from pathlib import Path

from testbed.errors import TestbedError

__all__ = ["new_attack"]

_SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")

PYPROJECT = """[build-system]
requires = ["setuptools>=68", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "ot-testbed-{dist}"
version = "0.1.0"
description = "{name}: an attack plugin for the OT privacy testbed"
requires-python = ">=3.10"
dependencies = ["ot-testbed"]

[project.entry-points."ot_testbed.attacks"]
{name} = "{name}.attack:{cls}"

[tool.setuptools.packages.find]
include = ["{name}*"]
"""

ATTACK = '''"""{cls}: an attack plugin for the OT privacy testbed (scaffolded by `testbed new-attack`).

Replace the body of ``run`` with your attack. Rules the contract kit checks
(``testbed.testing.check_plugin``): ``__init__`` stores the config only; never mutate ``view``;
read only the messages your observer saw (``attacks.observed``); draw randomness only from
``rng``; return a list of ``AttackOutput``.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from attacks import Attack, AttackConfig, AttackOutput, observed
from testbed.measure import Measure


class {cls}Config(AttackConfig):
    kinds: str = Field("*", description="message kinds (glob) to use")


class {cls}(Attack):
    """Guess each party's data as the last measure it sent the observer."""

    name = "{name}"
    Config = {cls}Config
    protocols = ("*",)
    output_kinds = ("points",)

    def run(self, view, public, rng: np.random.Generator):
        last = {{}}
        for env in observed(view, self.config.kinds):
            if env.sender != view.observer and env.sender in public.parties:
                if isinstance(env.payload, Measure):
                    last[env.sender] = env.payload
        return [
            AttackOutput(
                kind="points",
                target=party,
                points=np.array(m.support),
                weights=np.array(m.weights),
            )
            for party, m in sorted(last.items())
        ]
'''

TEST = '''"""{name} passes the testbed's public contract kit."""

from testbed.testing import check_plugin

from {name}.attack import {cls}


def test_contract():
    check_plugin({cls})
'''

README = """# {name}

An attack plugin for the OT privacy testbed.

    pip install -e .
    testbed plugins             # lists {name} under "attacks"
    pytest tests                # the contract kit

Use it in a scenario:

    attacks:
      - name: {name}
"""


def new_attack(name: str, directory: str | Path | None = None) -> Path:
    """Write the plugin package for attack ``name`` into ``directory`` (default ``./name``);
    return the directory. Refuses a non-snake_case name and a non-empty directory."""
    if not _SNAKE.match(name):
        raise TestbedError(f"new-attack: NAME must be snake_case (a-z, 0-9, _), got {name!r}")
    root = Path(directory) if directory is not None else Path(name)
    if root.exists() and any(root.iterdir()):
        raise TestbedError(f"new-attack: DIR {root} exists and is not empty")
    cls = "".join(part.capitalize() for part in name.split("_"))
    fields = {"name": name, "cls": cls, "dist": name.replace("_", "-")}
    files = {
        root / "pyproject.toml": PYPROJECT,
        root
        / name
        / "__init__.py": '"""{name} attack plugin."""\n\nfrom {name}.attack import {cls}\n\n__all__ = ["{cls}"]\n',
        root / name / "attack.py": ATTACK,
        root / "tests" / f"test_{name}.py": TEST,
        root / "README.md": README,
    }
    for path, template in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**fields))
    return root
