"""``testbed new-attack NAME [DIR]`` and ``testbed new-protocol NAME [DIR]``: scaffold a
third-party attack or protocol plugin package.

The package is complete and working: a pyproject with the ``ot_testbed.attacks`` entry point, an
attack module (a simple attack that returns the last measure each party sent the observer —
replace its body with yours) and a test that runs the public contract kit. After
``pip install -e DIR`` the attack shows in ``testbed plugins`` and can be named in a scenario.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

from testbed.errors import TestbedError

__all__ = ["new_attack", "new_protocol"]

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
    root, fields = _target("new-attack", name, directory)
    files = {
        root / "pyproject.toml": PYPROJECT,
        root
        / name
        / "__init__.py": '"""{name} attack plugin."""\n\nfrom {name}.attack import {cls}\n\n__all__ = ["{cls}"]\n',
        root / name / "attack.py": ATTACK,
        root / "tests" / f"test_{name}.py": TEST,
        root / "README.md": README,
    }
    return _write(root, files, fields)


def _target(cmd: str, name: str, directory) -> tuple[Path, dict[str, str]]:
    """The package directory (refused when it is a file or a non-empty directory) and the
    template fields of plugin ``name``."""
    if not _SNAKE.match(name):
        raise TestbedError(f"{cmd}: NAME must be snake_case (a-z, 0-9, _), got {name!r}")
    _check_free(cmd, name)
    root = Path(directory) if directory is not None else Path(name)
    if root.exists() and not root.is_dir():
        raise TestbedError(f"{cmd}: {root} is a file, not a directory")
    if root.exists() and any(root.iterdir()):
        raise TestbedError(f"{cmd}: DIR {root} exists and is not empty")
    cls = "".join(part.capitalize() for part in name.split("_"))
    return root, {"name": name, "cls": cls, "dist": name.replace("_", "-")}


def _check_free(cmd: str, name: str) -> None:
    """Refuse a NAME the package could not carry: a Python keyword (``import class`` fails), a
    module Python already finds (the package would shadow it, or be shadowed by it), or the name
    of a registered plugin of that kind (the registry refuses a second one)."""
    import importlib.util
    import keyword

    from testbed.registry import ATTACKS, PROTOCOLS

    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise TestbedError(f"{cmd}: NAME {name!r} is a Python keyword; pick another name")
    registry, kind = (ATTACKS, "attack") if cmd == "new-attack" else (PROTOCOLS, "protocol")
    if name in registry:
        raise TestbedError(
            f"{cmd}: NAME {name!r} is already the name of a registered {kind} "
            "(`testbed plugins` lists it); pick another name"
        )
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin is not None:  # a bare directory (namespace) never wins
        where = spec.origin if spec.origin not in ("built-in", "frozen") else "built in"
        raise TestbedError(
            f"{cmd}: NAME {name!r} is already an importable module ({where}); the package would "
            "shadow it or be shadowed by it: pick another name"
        )


def _write(root: Path, files: dict[Path, str], fields: dict[str, str]) -> Path:
    for path, template in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**fields))
    return root


# ----------------------------------------------------------------------------- protocols
PROTOCOL_PYPROJECT = PYPROJECT.replace("an attack plugin", "a protocol plugin").replace(
    '[project.entry-points."ot_testbed.attacks"]\n{name} = "{name}.attack:{cls}"',
    '[project.entry-points."ot_testbed.protocols"]\n{name} = "{name}.protocol:{cls}"',
)

PROTOCOL = '''"""{cls}: a protocol plugin for the OT privacy testbed (scaffolded by `testbed new-protocol`).

The example estimates W2 between two parties through a public anchor measure: the server draws
``anchor_size`` random atoms and sends them to both parties; each party maps its rows onto the
anchor with exact OT (at the party, through ``bus.local``) and sends back the barycentric image,
an ``anchor_size``-point sketch of its data; the server returns W2 between the two sketches.
``reference`` is the exact W2 between the parties' rows (POT), which the runner and the contract
kit compare the estimate with.

Rules the protocol contract kit checks (``testbed.testing.check_protocol``): every value another
party uses crosses ``bus.send`` (a party's rows are read only inside ``bus.local``); randomness
comes only from ``rng``; every kind sent is listed in ``message_kinds``; the estimate is within
``reference_tolerance`` (relative) of ``reference``; no message carries a private row or a
near-copy of one (a sketch with as many atoms as a party has rows would: the kit says so).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from protocols import Protocol, ProtocolResult
from testbed.exchange.bus import SERVER
from testbed.measure import Measure
from testbed.registry import PluginConfig


class {cls}Config(PluginConfig):
    anchor_size: int = Field(10, gt=0, description="atoms of the public anchor measure")
    anchor_scale: float = Field(1.0, gt=0, description="the anchor's atoms ~ N(0, scale^2 I)")


def _dim(party) -> int:
    return party.X.shape[1]


def _sketch(party, anchor: Measure) -> Measure:
    """At the party: the barycentric image of its rows on the anchor's atoms."""
    import ot  # where it solves: importing POT takes seconds that listing plugins does not need

    X = party.X
    a = np.full(len(X), 1.0 / len(X))
    P = ot.emd(a, anchor.weights, ot.dist(X, anchor.support), numItermax=1_000_000)
    return Measure((P.T @ X) / anchor.weights[:, None], anchor.weights)


class {cls}(Protocol):
    """W2 between two parties from sketches on a public anchor measure (example protocol)."""

    name = "{name}"
    Config = {cls}Config
    message_kinds = ("{name}.anchor", "{name}.sketch")
    # relative; measured 2.6 % at most over seeds 0-19 of the kit's two-party Gaussian scenario
    reference_tolerance = 0.05
    min_parties = 2  # the first two parties' distance: `testbed validate` refuses one party

    def run(self, parties, bus, rng):
        import ot

        cfg = self.config
        a, b = list(parties)[:2]
        d = bus.local(a, _dim)
        anchor = Measure(rng.normal(0.0, cfg.anchor_scale, size=(cfg.anchor_size, d)))
        sketches = {{}}
        for p in (a, b):
            got = bus.send(SERVER, p, "{name}.anchor", anchor).payload
            sketch = bus.local(p, _sketch, got)
            sketches[p] = bus.send(p, SERVER, "{name}.sketch", sketch).payload
        sa, sb = sketches[a], sketches[b]
        w2 = float(np.sqrt(ot.emd2(sa.weights, sb.weights, ot.dist(sa.support, sb.support))))
        return ProtocolResult(estimates={{"wasserstein": w2}})

    def reference(self, parties):
        import ot

        a, b = list(parties)[:2]
        X, Y = parties[a].X, parties[b].X
        cost = ot.emd2(np.full(len(X), 1 / len(X)), np.full(len(Y), 1 / len(Y)), ot.dist(X, Y))
        return {{"wasserstein": float(np.sqrt(cost))}}
'''

PROTOCOL_TEST = '''"""{name} passes the testbed's protocol contract kit."""

from testbed.testing import check_protocol

from {name}.protocol import {cls}


def test_protocol_contract():
    check_protocol({cls})  # on a two-party Gaussian scenario; scenario="..." for your own
'''

PROTOCOL_SCENARIO = """# A small run of {name}: testbed run {name}_tiny.yaml --out runs/{name}
name: {name}_tiny
# a fresh 128-bit seed: an attack that enumerates small seeds cannot rebuild this run's data
# (docs/trust.md, "What an attack receives"); keep it, or draw another with
# python -c "import secrets; print(secrets.randbits(128))"
seed: {seed}
data:
  dataset:
    name: gaussians
    params:
      d: 3
      components:
        - {{n: 60, mean: 0.0}}
        - {{n: 40, mean: 2.0}}
  partition:
    name: class_subsets
    params: {{classes: [[0], [1]]}}
  parties: [alice, bob]
protocol:
  name: {name}
  params: {{anchor_size: 10}}
threat_model:
  observer: server
attacks:
  - name: sent_rows
"""

PROTOCOL_README = """# {name}

A protocol plugin for the OT privacy testbed.

    pip install -e .
    testbed plugins                       # lists {name} under "protocols"
    pytest tests                          # the protocol contract kit
    testbed run {name}_tiny.yaml --out runs/{name}
    testbed scorecard {name} -o runs/{name}-scorecard
"""


def new_protocol(name: str, directory: str | Path | None = None) -> Path:
    """Write the plugin package for protocol ``name`` into ``directory`` (default ``./name``);
    return the directory. Refuses a non-snake_case name, a file and a non-empty directory."""
    root, fields = _target("new-protocol", name, directory)
    fields["seed"] = str(secrets.randbits(128))
    files = {
        root / "pyproject.toml": PROTOCOL_PYPROJECT,
        root
        / name
        / "__init__.py": '"""{name} protocol plugin."""\n\nfrom {name}.protocol import {cls}\n\n__all__ = ["{cls}"]\n',
        root / name / "protocol.py": PROTOCOL,
        root / "tests" / f"test_{name}.py": PROTOCOL_TEST,
        root / f"{name}_tiny.yaml": PROTOCOL_SCENARIO,
        root / "README.md": PROTOCOL_README,
    }
    return _write(root, files, fields)
