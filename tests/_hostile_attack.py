"""A hostile attack plugin for the sandbox tests (tests/test_sandbox*.py): one break per mode.

Written as a plugin author would (ordinary Python, no exploits). A module of its own (not a test
module) so that the attack's process can import it by name.
"""

from __future__ import annotations

import ctypes
import os
import socket
import time
import warnings
from pathlib import Path

import numpy as np
import yaml

from testbed.api import Attack, AttackConfig, AttackOutput

MARK = b"sandbox-secret-7f3a"  # the bytes a break would bring back


class Hostile(Attack):
    """One break per ``mode``; what it reached goes back in ``meta["got"]`` ("" when denied)."""

    name = "test_sandbox_hostile"
    protocols = ("fedwad",)

    class Config(AttackConfig):
        mode: str = "read"
        arg: str = ""
        num: int = 0

    def run(self, view, public, rng):
        c = self.config
        if c.mode in _STEALS:  # returns every party's rows when the break works
            try:
                rows = _STEALS[c.mode](c.arg, rng)
            except Exception:  # denied: the attack falls back to the public prior
                rows = {}
            pts = {t: rows.get(t, np.asarray(public.prior)) for t in public.parties}
            return [AttackOutput(kind="points", target=t, points=pts[t]) for t in public.parties]
        try:
            got = _BREAKS[c.mode](c.arg, c.num)
        except OSError as exc:
            got, err = "", f"{type(exc).__name__}: {exc}"
        else:
            err = ""
        pts = np.zeros((1, public.dim))
        if c.mode == "big":
            pts = np.zeros((300 * 2**20 // 8 // public.dim, public.dim))
        meta = {"got": got if isinstance(got, str) else repr(got), "error": err}
        return [AttackOutput(kind="points", target=public.parties[0], points=pts, meta=meta)]


def _world_rows(text: str) -> dict:
    from testbed.run import execute
    from testbed.scenario.loading import parse_scenario

    raw = yaml.safe_load(text)
    raw.pop("attacks", None)  # the World does not need them (and this plugin is not registered)
    world = execute(parse_scenario(yaml.safe_dump(raw)), until="world").world
    return {p: np.asarray(d.X) for p, d in world.parties.items()}


def _thief(_, __) -> dict:
    """Break 1: walk /proc from the attack's process up to the driver; the run directory's lock
    it holds open says where the run directory is, whose resolved.yaml rebuilds the World; or,
    while the run is still written elsewhere, the scenario file on the driver's command line."""
    pid = os.getppid()
    while pid > 1:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.endswith(".testbed.lock"):
                resolved = Path(target).parent / "resolved.yaml"
                if resolved.is_file():
                    return _world_rows(resolved.read_text())
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        for a in args:
            if a.endswith(b".yaml") and Path(os.fsdecode(a)).is_file():
                return _world_rows(Path(os.fsdecode(a)).read_text())
        status = Path(f"/proc/{pid}/status").read_text()
        pid = int(status.split("PPid:")[1].split()[0])
    return {}


def _reseed(text, rng) -> dict:
    """Break 2: the rng's seed is the scenario's root seed; the (public) scenario text with that
    seed rebuilds the World. ``text`` has ``{seed}`` where the seed goes."""
    return _world_rows(text.replace("{seed}", str(rng.bit_generator.seed_seq.entropy)))


_STEALS = {"thief": lambda arg, rng: _thief(arg, rng), "reseed": _reseed}


def _read(path, _):
    with open(path, "rb") as fh:
        return fh.read(4096).decode(errors="replace")


def _proc(_, pid):
    out = [_read(f"/proc/{pid}/{f}", 0) for f in ("cmdline", "environ")]
    return "|".join([*out, os.readlink(f"/proc/{pid}/cwd")])


def _mem(addr, pid):
    with open(f"/proc/{pid}/mem", "rb") as fh:
        fh.seek(int(addr))
        return fh.read(len(MARK)).decode(errors="replace")


def _write(path, _):
    Path(path).write_bytes(MARK)
    return "written"


def _kill(_, pid):
    os.kill(pid, 0)
    return "signalled"


def _tcp(_, port):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(MARK)
    return "sent"


def _udp(_, port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(MARK, ("127.0.0.1", port))
    return "sent"


def _unix(path, _):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(MARK)
    return "sent"


def _daemon(name, _):
    """Double fork + setsid: a grandchild, named ``name``, that outlives the attack."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            libc = ctypes.CDLL(None)
            libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
            time.sleep(30)
        os._exit(0)
    time.sleep(0.3)
    return "forked"


def _hang(_, __):
    time.sleep(600)


def _alloc(_, nbytes):
    a = np.ones(nbytes // 8)
    return f"allocated {a.nbytes}"


def _exit(seconds, code):
    """Dies without a result, ``seconds`` after it started."""
    time.sleep(float(seconds))
    os._exit(code)


def _raise(_, __):
    raise KeyError("hostile")


def _physical_cores(_, __) -> str:
    """Not a break: what scikit-learn's neighbours ask of joblib, and any warning it gave."""
    from joblib import cpu_count

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        n = cpu_count(only_physical_cores=True)
    return f"{n} {[str(w.message).splitlines()[0] for w in caught]}"


def _fds(_, __) -> str:
    """Every descriptor open in the attack's process, and which one is its result pipe."""
    import sys

    f = sys._getframe()
    while "conn" not in f.f_locals:
        f = f.f_back
    open_fds = []
    for fd in range(1024):
        try:
            os.fstat(fd)
        except OSError:
            continue
        open_fds.append(fd)
    return f"{open_fds} {f.f_locals['conn'].fileno()}"


def _shout(_, __) -> str:
    """Print the mark on stdout and stderr, through Python and straight to the descriptors."""
    import sys

    print(MARK.decode(), "print")
    print(MARK.decode(), "stderr", file=sys.stderr)
    os.write(1, MARK + b" fd1\n")
    os.write(2, MARK + b" fd2\n")
    return "shouted"


_BREAKS = {
    "fds": _fds,
    "shout": _shout,
    "physical_cores": _physical_cores,
    "read": _read,
    "listdir": lambda p, _: ",".join(os.listdir(p)),
    "proc": _proc,
    "mem": _mem,
    "write": _write,
    "kill": _kill,
    "tcp": _tcp,
    "udp": _udp,
    "unix": _unix,
    "daemon": _daemon,
    "hang": _hang,
    "alloc": _alloc,
    "raise": _raise,
    "exit": _exit,
    "big": lambda *_: "big",
}


def outside_the_hidden_directories() -> Path:
    """The project's folder or, for a checkout under /tmp (hidden from attacks), the home
    folder: where a run directory is not hidden by a tmpfs."""
    import pytest

    from testbed.sandbox.confine import HIDDEN

    hidden = [os.path.realpath(h) for h in HIDDEN]
    for base in (Path(__file__).resolve().parents[1], Path.home()):
        real = os.path.realpath(base)
        if not any(real == h or real.startswith(h + os.sep) for h in hidden):
            return base
    pytest.skip("the project and the home folder are both under a directory attacks never see")
