"""``testbed new-attack NAME [DIR]``, ``testbed new-protocol NAME [DIR]`` and ``testbed
new-defense NAME [DIR]``: scaffold a third-party attack, protocol or defense plugin package.

The package is complete and working: a pyproject with the entry point of its kind
(``ot_testbed.attacks``, ``ot_testbed.protocols``, ``ot_testbed.defenses``), the plugin's module
(a working example — replace its body with yours) and a test that runs the public contract kit.
After ``pip install -e DIR`` the plugin shows in ``testbed plugins`` and can be named in a
scenario. The protocol and defense examples are the ones docs/guide/plugins.md walks through.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import secrets
from pathlib import Path

from testbed.errors import TestbedError
from testbed.registry import ATTACKS, DEFENSES, PROTOCOLS

__all__ = ["new_attack", "new_defense", "new_protocol"]

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
where = ["src"]
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

from testbed.api import Attack, AttackConfig, AttackOutput, Measure, observed


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

from testbed.api import check_plugin

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
    return _package("attack", name, directory)


#: the longest plugin name a scaffold takes (names become file, package and entry-point names)
MAX_NAME = 64


def _target(cmd: str, name: str, directory) -> tuple[Path, dict[str, str]]:
    """The package directory (refused when it is a file or a non-empty directory) and the
    template fields of plugin ``name``."""
    if not _SNAKE.match(name):
        raise TestbedError(f"{cmd}: NAME must be snake_case (a-z, 0-9, _), got {name!r}")
    if len(name) > MAX_NAME:  # file names (and the package's) would pass the system's limit
        raise TestbedError(f"{cmd}: NAME has {len(name)} characters, at most {MAX_NAME}")
    _check_free(cmd, name)
    root = Path(directory) if directory is not None else Path(name)
    if root.exists() and not root.is_dir():
        raise TestbedError(f"{cmd}: {root} is a file, not a directory")
    # a folder inside a file cannot be made: bad input (exit 2), not a failure while writing
    above = next((d for d in root.parents if d.exists()), None)
    if above is not None and not above.is_dir():
        raise TestbedError(f"{cmd}: {above} is a file, not a directory (DIR {root} is inside it)")
    if root.exists() and any(root.iterdir()):
        raise TestbedError(f"{cmd}: DIR {root} exists and is not empty")
    cls = "".join(part.capitalize() for part in name.split("_"))
    return root, {"name": name, "cls": cls, "dist": name.replace("_", "-")}


def _check_free(cmd: str, name: str) -> None:
    """Refuse a NAME the package could not carry: a Python keyword (``import class`` fails), a
    module Python already finds (the package would shadow it, or be shadowed by it), or the name
    of a registered plugin of that kind (the registry refuses a second one)."""
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise TestbedError(f"{cmd}: NAME {name!r} is a Python keyword; pick another name")
    kind = cmd.removeprefix("new-")
    registry = {"attack": ATTACKS, "protocol": PROTOCOLS, "defense": DEFENSES}[kind]
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


def _package(kind: str, name: str, directory) -> Path:
    """Write the package of plugin ``name`` of ``kind`` (attack, protocol, defense): its
    pyproject, the import package with the plugin in ``src/<name>/<kind>.py`` (a src layout: an
    editable install then imports the installed package, never a folder of the same name in the
    current directory, and setuptools has nothing to warn about), the kit test, a README and,
    for a kind with a scenario, ``<name>_tiny.yaml`` seeded afresh (:data:`_TEMPLATES`, each a
    ``str.format`` template of ``name``, ``cls``, ``dist`` and ``seed``)."""
    pyproject, module, test, readme, scenario = _TEMPLATES[kind]
    root, fields = _target(f"new-{kind}", name, directory)
    init = f'"""{{name}} {kind} plugin."""\n\nfrom {{name}}.{kind} import {{cls}}\n\n__all__ = ["{{cls}}"]\n'
    files = {
        root / "pyproject.toml": pyproject,
        root / "src" / name / "__init__.py": init,
        root / "src" / name / f"{kind}.py": module,
        root / "tests" / f"test_{name}.py": test,
        root / "README.md": readme,
    }
    if scenario is not None:
        fields["seed"] = str(secrets.randbits(128))
        files[root / f"{name}_tiny.yaml"] = scenario
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
comes only from ``rng``; the estimate is within ``reference_tolerance`` (relative) of
``reference``; no message carries a private row or a near-copy of one (a sketch with as many
atoms as a party has rows would: the kit says so).

The channel is typed (docs/guide/plugins.md, "Messages and releases"): ``messages`` declares every kind
the protocol sends and its payload's schema, ``released`` what its result releases. The bus
refuses anything else at send time (a string, an undeclared key or kind, another dtype or
length), so every number that leaves a party sits in a field the guard reads whole.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from testbed.api import (
    SERVER,
    Measure,
    MeasureOf,
    Message,
    Num,
    PluginConfig,
    Protocol,
    ProtocolResult,
    Record,
)


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
    # the closed set of message kinds and their schemas: both are measures of anchor_size
    # atoms (a config parameter) in the data's dimension d
    messages = {{
        "{name}.anchor": Message(MeasureOf("anchor_size", "d")),
        "{name}.sketch": Message(MeasureOf("anchor_size", "d")),
    }}
    # what the result releases: one number
    released = {{"estimates": Record(wasserstein=Num())}}
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

from testbed.api import check_protocol

from {name}.protocol import {cls}


def test_protocol_contract():
    check_protocol({cls})  # on a two-party Gaussian scenario; scenario="..." for your own
'''

PROTOCOL_SCENARIO = """# A small run of {name}: testbed run {name}_tiny.yaml --out runs/{name}
name: {name}_tiny
# a fresh 128-bit seed: an attack that enumerates small seeds cannot rebuild this run's data
# (docs/reference/trust.md, "What an attack receives"); keep it, or draw another with
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
    return _package("protocol", name, directory)


# ----------------------------------------------------------------------------- defenses
DEFENSE_PYPROJECT = PYPROJECT.replace("an attack plugin", "a defense plugin").replace(
    '[project.entry-points."ot_testbed.attacks"]\n{name} = "{name}.attack:{cls}"',
    '[project.entry-points."ot_testbed.defenses"]\n{name} = "{name}.defense:{cls}"',
)

DEFENSE = '''"""{cls}: a defense plugin for the OT privacy testbed (scaffolded by `testbed new-defense`).

The example rounds every support point a defended party sends to a grid of spacing ``step``:
at random and unbiased (up with probability equal to the coordinate's fractional position in its
cell, so the expected point is the point sent; the default) or to the nearest grid point. This is
what quantising a message for compression does, written as a defense so that its effect on
leakage and accuracy can be measured.

Privacy: no differential-privacy claim, and nothing is recorded in the ledger. Each coordinate
moves by less than ``step`` (at most ``step / 2`` when rounding to the nearest), so a sent point
lands within ``step * sqrt(d)`` of where it was: it hides detail finer than the grid, it does not
hide a point. A neighbouring dataset that moves a sent point to a cell with no grid point in
common gives messages that cannot be confused, so no finite epsilon holds; and data already on
the grid (integer pixels with ``step: 1``) pass unchanged.

Rules the contract kit checks (``testbed.testing.check_plugin``): ``__init__`` stores the config
only; ``on_send`` returns a new envelope (``env.with_payload(...)``) and never mutates the one it
received; randomness comes only from ``rng``, so the same seed gives the same message.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from pydantic import Field

from testbed.api import MEASURE_PROTOCOLS, Defense, DefenseConfig, Measure


class {cls}Config(DefenseConfig):  # DefenseConfig brings `senders` and `kinds`
    step: float = Field(0.5, gt=0, description="grid spacing h, in the data's units")
    stochastic: bool = Field(True, description="round at random, unbiased (else to the nearest)")


def round_to_grid(X: np.ndarray, step: float, rng: np.random.Generator | None) -> np.ndarray:
    """Every coordinate to a multiple of ``step``: with ``rng``, up with probability
    x / step - floor(x / step), so that the expected result is x; without, to the nearest."""
    if rng is None:
        return np.round(X / step) * step
    low = np.floor(X / step)
    up = rng.random(X.shape) < X / step - low
    return (low + up) * step


class {cls}(Defense):
    """Round every sent support point to a grid of spacing `step` (no DP claim)."""

    name = "{name}"
    Config = {cls}Config
    # the built-in measure protocols (fedwad first: the contract kit's fixture) and any protocol
    # plugin that declares sends_measures = True; `testbed validate` refuses it on another
    protocols = MEASURE_PROTOCOLS

    def on_send(self, env, rng, ledger):
        c = self.config

        def rec(p):
            if isinstance(p, Measure):
                support = round_to_grid(p.support, c.step, rng if c.stochastic else None)
                return Measure(support, p.weights)
            if isinstance(p, Mapping):
                return {{k: rec(v) for k, v in p.items()}}
            return p  # distances and arrays pass unchanged

        # no ledger event: rounding is no DP mechanism, there is no epsilon to account
        return env.with_payload(
            rec(env.payload), defended_by=(*env.meta.get("defended_by", ()), self.name)
        )
'''

DEFENSE_TEST = '''"""{name} passes the testbed's public contract kit."""

from testbed.api import check_plugin

from {name}.defense import {cls}


def test_contract():
    check_plugin({cls})  # on the tiny FedWAD run of its first protocol
'''

DEFENSE_SCENARIO = """# {name} against the server's inversion of FedWAD: testbed run {name}_tiny.yaml
name: {name}_tiny
# a fresh 128-bit seed: an attack that enumerates small seeds cannot rebuild this run's data
# (docs/reference/trust.md, "What an attack receives"); keep it, or draw another with
# python -c "import secrets; print(secrets.randbits(128))"
seed: {seed}
data:
  dataset:
    name: gaussians
    params: {{d: 2, components: [{{n: 100, mean: -2.0}}, {{n: 100, mean: 2.0}}]}}
  partition: {{name: class_subsets, params: {{classes: [[0], [1]]}}}}
  parties: [alice, bob]
protocol: {{name: fedwad, params: {{support_size: 10, iterations: 5, t: 0.5}}}}
threat_model: {{observer: server}}
attacks:
  - {{name: fedwad_distributional}}
sweep:  # one setting per entry: no defense, then coarser and coarser grids
  defenses:
    - []
    - [{{name: {name}, params: {{step: 0.5}}}}]
    - [{{name: {name}, params: {{step: 2.0}}}}]
"""

DEFENSE_README = """# {name}

A defense plugin for the OT privacy testbed.

    pip install -e .
    testbed plugins                       # lists {name} under "defenses"
    pytest tests                          # the contract kit
    testbed run {name}_tiny.yaml --out runs/{name}
"""


def new_defense(name: str, directory: str | Path | None = None) -> Path:
    """Write the plugin package for defense ``name`` into ``directory`` (default ``./name``);
    return the directory. Refuses a non-snake_case name, a file and a non-empty directory."""
    return _package("defense", name, directory)


#: per kind: pyproject, plugin module, kit test, README and small scenario (None: no scenario)
_TEMPLATES = {
    "attack": (PYPROJECT, ATTACK, TEST, README, None),
    "protocol": (PROTOCOL_PYPROJECT, PROTOCOL, PROTOCOL_TEST, PROTOCOL_README, PROTOCOL_SCENARIO),
    "defense": (DEFENSE_PYPROJECT, DEFENSE, DEFENSE_TEST, DEFENSE_README, DEFENSE_SCENARIO),
}
