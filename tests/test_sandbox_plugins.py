"""An attack plugin cannot widen its own sandbox (issue 48, build point 2).

Installed hostile plugins (a folder of packages with their distribution's metadata and entry
points, added as a site folder as the interpreter adds site-packages, so its ``.pth`` file is
read) each try one way to make the driver open more than their package to them, then read
``/etc/shadow`` from inside the sandbox:

* ``hostile_path``: its ``__init__.py`` does ``__path__.append("/")``;
* ``hostile_syspath``: its ``__init__.py`` appends to ``sys.path`` an entry named
  ``site-packages`` that is a symlink to ``/etc``;
* ``hostile_pth``: its distribution's ``.pth`` file adds such an entry at interpreter start
  (every plugin is imported before the first attack runs, as ``testbed plugins`` does);
* ``etc.hostile_ns``: a namespace package ``etc`` whose module appends ``/`` to ``sys.path``,
  so that the namespace spans ``/etc``;
* ``hostile_link``: a symlink inside its package points to ``/etc``;
* ``hostile_inrun``: its package is a symlink into a run directory: refused, never imported.

Each reads ``/etc/shadow`` and ``/etc/passwd`` (which anyone may read) and gets neither, and
the level each row records is what a probe inside the sandbox checked. The plugins run once as
root (as CI runs) and once as ``nobody``, where that user can run the interpreter and read the
checkout (skipped, saying why, where a folder above them is closed to others).
On main 8350ce8 the first four read ``/etc/shadow`` while recording
``landlock7+netns+pidns+mountns+nocaps``. Run as root (CI does); skipped where the kernel
offers no Landlock.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _hostile_attack import outside_the_hidden_directories
from _scenarios import tiny

from testbed.sandbox.confine import isolation_level

pytestmark = pytest.mark.skipif(
    isolation_level() == "process",
    reason="this kernel offers no Landlock: attacks cannot be sandboxed here",
)

ROOT = Path(__file__).resolve().parents[1]
#: what each plugin tries to read: /etc/shadow (root can), /etc/passwd (anyone can)
SECRETS = ("/etc/shadow", "/etc/passwd")
NOBODY = 65534


def _skip_unless_nobody_can_run_the_testbed() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to become an unprivileged user")
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import testbed.sandbox.isolation"],
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd="/",
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            timeout=120,
        ).returncode
    except OSError:  # the interpreter itself
        probe = -1
    if probe != 0:
        pytest.skip(
            f"user nobody cannot run {sys.executable} or import the testbed from {ROOT} (a "
            "folder above one of them, or above the interpreter it links to, is not readable by "
            "others, e.g. /root at 0700): nothing to run as nobody here"
        )


READER = '''
import numpy as np
from testbed.api import Attack, AttackConfig, AttackOutput


class Reader(Attack):
    """Reads the files it is given; what it got goes back in meta["got"]."""

    protocols = ("fedwad",)

    class Config(AttackConfig):
        paths: str = ""

    def run(self, view, public, rng):
        got = {}
        for path in self.config.paths.split(","):
            try:
                with open(path, "rb") as fh:
                    got[path] = fh.read(64).decode(errors="replace")
            except OSError:
                got[path] = ""
        meta = {"got": repr(sorted(got.items()))}
        pts = np.zeros((1, public.dim))
        return [AttackOutput(kind="points", target=public.parties[0], points=pts, meta=meta)]
'''

#: runs in a fresh interpreter: the site folder is added first, as at interpreter start
DRIVER = """
import ast, json, os, site, sys, warnings
site.addsitedir(sys.argv[1])
from testbed.errors import TestbedError
from testbed.registry import ATTACKS
from testbed.run import execute
from testbed.run.view import observe
from testbed.sandbox.isolation import AttackFailedError, run_isolated
from testbed.scenario.loading import parse_scenario
from testbed.seeding import component_rng

warnings.simplefilter("ignore")
run = execute(parse_scenario(sys.argv[2]), until="results", write=False)
obs = observe(run.world, run.transcript, run.results["estimates"])
rng = component_rng(0, "test")
out = {}
for name in json.loads(sys.argv[3]):  # every plugin imported first, as `testbed plugins` does
    try:
        ATTACKS.get(name)
    except TestbedError:
        pass
for lock in json.loads(sys.argv[4]):  # a run written into a package after it was found
    os.makedirs(os.path.dirname(lock))
    open(lock, "w").close()
for name, paths in json.loads(sys.argv[3]).items():
    try:
        got = run_isolated(ATTACKS.get(name), {"paths": paths}, obs.view, obs.public, rng, rng)
        read = dict(ast.literal_eval(got.outputs[0].meta["got"]))
        out[name] = {"isolation": got.isolation, "read": {p: bool(v) for p, v in read.items()}}
    except (TestbedError, AttackFailedError) as exc:
        out[name] = {"error": str(exc)}
print(json.dumps(out))
"""


#: the plugins whose package is a folder of their own with an ``attack`` module
OWN_FOLDER = (
    "hostile_path",
    "hostile_syspath",
    "hostile_pth",
    "hostile_link",
    "hostile_holdsrun",
    "hostile_laterrun",
)


def _package(site: Path, name: str, init: str = "", namespace: bool = False) -> Path:
    pkg = site / name
    pkg.mkdir(parents=True)
    if not namespace:
        (pkg / "__init__.py").write_text(init)
    return pkg


@pytest.fixture(scope="module", params=["root", "nobody"])
def attempts(request) -> dict:
    """Every hostile plugin's attempt, in one driver process run by this user (root, as CI
    runs) or by ``nobody``: name -> what it read, or the line that refused it."""
    user = request.param
    if user == "nobody":
        _skip_unless_nobody_can_run_the_testbed()
    # a folder anyone can read (pytest's own are 0700 under /tmp/pytest-of-root)
    tmp = Path(tempfile.mkdtemp(prefix="testbed-plugins-"))
    tmp.chmod(0o755)
    site = tmp / "site"
    # entries named site-packages that are symlinks to /etc, where no tmpfs hides them from the
    # attack (under /tmp, the mount namespace alone hid them from main's sandbox)
    runs = outside_the_hidden_directories() / "runs"
    made = not runs.exists()
    links = runs / f"sandbox-links-{os.getpid()}"
    links.mkdir(parents=True)
    for d in ("a", "b"):
        (links / d).mkdir()
        (links / d / "site-packages").symlink_to("/etc")
    try:
        yield _attempts(tmp, site, links, user)
    finally:
        shutil.rmtree(tmp)
        for d in ("a", "b"):
            (links / d / "site-packages").unlink()
            (links / d).rmdir()
        links.rmdir()
        if made:
            runs.rmdir()


def _attempts(tmp: Path, site: Path, links: Path, user: str) -> dict:
    _package(site, "hostile_path", '__path__.append("/")\n')
    _package(
        site,
        "hostile_syspath",
        f"import sys\nsys.path.append({str(links / 'a' / 'site-packages')!r})\n",
    )
    _package(site, "hostile_pth")
    (site / "hostile_pth.pth").write_text(f"{links / 'b' / 'site-packages'}\n")
    ns = _package(site, "etc", namespace=True)
    (ns / "hostile_ns.py").write_text('import sys\nsys.path.append("/")\n' + READER)
    link = _package(site, "hostile_link")
    (link / "loot").symlink_to("/etc")
    run_dir = tmp / "runs" / "r1"
    (run_dir / "hostile_inrun").mkdir(parents=True)
    (run_dir / ".testbed.lock").write_text("")
    (run_dir / "hostile_inrun" / "__init__.py").write_text("")
    (site / "hostile_inrun").symlink_to(run_dir / "hostile_inrun")
    held = _package(site, "hostile_holdsrun") / "runs" / "r2"
    held.mkdir(parents=True)
    (held / ".testbed.lock").write_text("")
    later = _package(site, "hostile_laterrun")
    if user == "nobody":  # the run is written into the package by the driver's user
        os.chown(later, NOBODY, NOBODY)
    late = site / "hostile_laterrun" / "runs" / "r3" / ".testbed.lock"
    for name in (*OWN_FOLDER, "hostile_inrun"):
        (site / name / "attack.py").write_text(READER)
    dist = site / "hostile_plugins-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile-plugins\nVersion: 0\n")
    eps = {n: f"{n}.attack:Reader" for n in ("hostile_path", "hostile_syspath", "hostile_pth")}
    eps |= {"hostile_ns": "etc.hostile_ns:Reader", "hostile_link": "hostile_link.attack:Reader"}
    eps["hostile_inrun"] = "hostile_inrun.attack:Reader"
    eps |= {n: f"{n}.attack:Reader" for n in ("hostile_holdsrun", "hostile_laterrun")}
    lines = "".join(f"{k} = {v}\n" for k, v in eps.items())
    (dist / "entry_points.txt").write_text(f"[ot_testbed.attacks]\n{lines}")
    paths = dict.fromkeys(eps, ",".join(SECRETS))
    loot = site / "hostile_link" / "loot"
    paths["hostile_link"] = ",".join([*SECRETS, *(str(loot / Path(s).name) for s in SECRETS)])
    scenario = tiny("plugins", "threat_model: {observer: server}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    as_user = {}
    if user == "nobody":
        as_user = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
        env["HOME"] = str(tmp)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            DRIVER,
            str(site),
            scenario,
            json.dumps(paths),
            json.dumps([str(late)]),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=600,
        **as_user,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {**json.loads(done.stdout.splitlines()[-1]), "_site": str(site), "_run": str(run_dir)}


@pytest.mark.parametrize(
    "name", ["hostile_path", "hostile_syspath", "hostile_pth", "hostile_ns", "hostile_link"]
)
def test_a_plugin_cannot_open_more_than_its_package(attempts, name):
    got = attempts[name]
    assert "error" not in got, got
    assert got["read"] and not any(got["read"].values()), got  # /etc/shadow stayed closed
    assert got["isolation"].startswith("landlock"), got  # and the probe found Landlock holding


def test_a_package_inside_a_run_directory_is_refused_unimported(attempts):
    run_dir = Path(attempts["_run"]).resolve()
    assert attempts["hostile_inrun"] == {
        "error": f"attack 'hostile_inrun': its package 'hostile_inrun' lies at "
        f"{run_dir / 'hostile_inrun'}, which is inside the run directory {run_dir}; the attack "
        "sandbox opens a plugin's own package only (install it in site-packages)"
    }


def test_a_package_holding_a_run_directory_is_refused(attempts):
    """A run written into a plugin's package (``--out`` inside it) would be opened to the
    attack with the package: refused when the plugin is found, and again when an attack
    starts after such a run was written."""
    site = Path(attempts["_site"]).resolve()
    tail = "; the attack sandbox opens a plugin's own package only (install it in site-packages)"
    held = site / "hostile_holdsrun"
    assert attempts["hostile_holdsrun"] == {
        "error": f"attack 'hostile_holdsrun': its package 'hostile_holdsrun' lies at {held}, "
        f"which holds the run directory {held / 'runs' / 'r2'}" + tail
    }
    late = site / "hostile_laterrun"
    assert attempts["hostile_laterrun"] == {
        "error": f"attack 'hostile_laterrun' failed in sandbox: its package lies at {late}, "
        f"which holds the run directory {late / 'runs' / 'r3'}"
    }


def test_the_level_recorded_is_what_the_probe_found():
    """Unconfined (this process), the probe opens /etc/passwd: no Landlock is claimed."""
    from testbed.sandbox.confine import verified

    assert verified("landlock7+netns+pidns+mountns+nocaps") == "process+netns+pidns+mountns+nocaps"
    assert verified("process+netns") == "process+netns"
