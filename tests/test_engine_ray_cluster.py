"""The Ray engine on a running two-node cluster started with Ray's own ``ray start`` (issue 50,
Build 2; issue 48, fault 8): actors on both nodes, the transcript of one worker, a node killed
mid-run ending in one line with exit 1, an address where no cluster runs refused in one line
with exit 2, and a private cluster's raylet killed mid-run ending the same way.

Not in the default suite (marker ``ray``): ``make test-ray``. Both nodes run on loopback with one
CPU and a 200 MB object store, with token authentication (Ray's default for ``ray start``
clusters: the token is written under the test's folder, ``RAY_AUTH_TOKEN_PATH``). They are
stopped by killing the processes whose command line names the test's session folder (``ray
stop`` would stop every Ray process of the user on the machine).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from testbed.exchange.engines.ray_bus import session_processes  # noqa: E402
from testbed.run.execute import execute  # noqa: E402
from testbed.scenario.loading import load_scenario  # noqa: E402

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
MB200 = str(200 * 1024 * 1024)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pids: list[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], list(pids)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


class Cluster:
    """Two Ray nodes on loopback, each offering a custom resource (``site_a``, ``site_b``)."""

    def __init__(self, folder: Path):
        self.folder = folder
        token = folder / "auth_token"
        token.write_text(secrets.token_hex(32))
        (folder / "home").mkdir()
        # session files under the test's folder, through a short link (Unix socket paths)
        (folder / "ray").mkdir()
        self.link = tempfile.mkdtemp(prefix="rtc", dir="/tmp")
        os.rmdir(self.link)
        os.symlink(folder / "ray", self.link)
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        keep = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env = {
            **keep,  # without RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: it refuses a second node
            "HOME": str(folder / "home"),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(token),
            "RAY_USAGE_STATS_ENABLED": "0",
            # a killed node is known to be dead within seconds, not half a minute
            "RAY_health_check_period_ms": "500",
            "RAY_health_check_timeout_ms": "1000",
            "RAY_health_check_failure_threshold": "4",
            "PYTHONPATH": str(ROOT),
            "MPLBACKEND": "Agg",
        }

    def start(self) -> None:
        common = ["--num-cpus=1", "--node-ip-address=127.0.0.1", f"--object-store-memory={MB200}"]
        common += [f"--temp-dir={self.link}", "--disable-usage-stats"]
        self._ray(
            "start",
            "--head",
            f"--port={self.port}",
            "--include-dashboard=false",
            '--resources={"site_a": 1}',
            *common,
        )
        self._ray("start", f"--address={self.address}", '--resources={"site_b": 1}', *common)

    def _ray(self, *args: str) -> None:
        proc = subprocess.run(
            [RAY, *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr[-2000:]

    def raylet(self, resource: str) -> int:
        """PID of the raylet of the node offering ``resource``."""
        (pid,) = [p for p in _procs(self.link, "/raylet/raylet") if resource in _cmd(p)]
        return pid

    def stop(self) -> None:
        """Kill every process of this cluster and what they started; remove the link."""
        pids = _descendants(session_processes(self.link))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + 20
        while session_processes(self.link) and time.monotonic() < deadline:
            time.sleep(0.2)
        os.unlink(self.link)


_CORE_WORKER_LINE = re.compile(r"\[\d{4}-\d\d-\d\d [\d:,]+ [EW] \d+ \d+\] core_worker\.cc:\d+: ")


#: ``testbed run``'s progress, piped: a line per tenth of the rounds once the run has taken 5 s
#: (docs/guide/scenarios.md); the fault's own line is what these tests read
_PROGRESS_LINE = re.compile(r"^\S+: round \d+/\d+ done, ")


def _without_progress(stderr: str) -> str:
    return "\n".join(ln for ln in stderr.strip().splitlines() if not _PROGRESS_LINE.match(ln))


_GCS_CLIENT_LINE = re.compile(
    r"\[\d{4}-\d\d-\d\d [\d:,]+ W \d+ \d+\] gcs_client\.cc:\d+: Failed to get cluster ID "
    r"from GCS server: Unauthenticated"
)


def _own_raylet(folder: Path) -> tuple[int, str] | None:
    """(PID, session link) of the raylet of a private cluster whose files are in ``folder``."""
    for pid in _procs("/tmp/rtb", "/raylet/raylet"):
        found = re.search(r"(/tmp/rtb[^/ ]+)", _cmd(pid))
        if found and os.path.realpath(found.group(1)).startswith(str(folder.resolve())):
            return pid, found.group(1)
    return None


def _procs(marker: str, also: str) -> list[int]:
    """Live processes whose command line names both ``marker`` and ``also``."""
    return [p for p in session_processes(marker) if also in _cmd(p)]


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.start()
        yield c
    finally:
        c.stop()
        assert session_processes(c.link) == []


def _scenario(tmp_path: Path, params: str, iterations: int = 3) -> Path:
    """The shipped Ray scenario (FedBary, four clients) with other engine parameters."""
    text = (ROOT / "scenarios" / "engine_ray.yaml").read_text()
    text = text.replace("engine_params: {actors: 2, num_cpus: 2}", f"engine_params: {params}")
    text = text.replace("iterations: 4", f"iterations: {iterations}")
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


#: a driver of its own: runs the scenario and prints the transcript digest and where each
#: party's actor ran (the nodes are only known to the bus, hence the wrapper)
DRIVER = """
import json, sys
from testbed.exchange.engines import ray_bus
from testbed.run.execute import execute
from testbed.scenario.loading import load_scenario
nodes = {}
start = ray_bus.RayBus._start
def spy(self, parties):
    start(self, parties)
    nodes.update(self.nodes)
ray_bus.RayBus._start = spy
out = execute(load_scenario(sys.argv[1]), out_dir=sys.argv[2])
print(json.dumps({"digest": out.transcript.digest(), "nodes": nodes}))
"""


def _testbed(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed", *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


def test_fedbary_on_two_nodes_equals_one_worker(cluster, tmp_path):
    # Prepare: spread over the nodes (the default), and pinned by the nodes' resources
    spread = _scenario(tmp_path, f'{{address: "{cluster.address}", actors: 4}}')
    one = load_scenario(spread)
    one = one.model_validate({**one.model_dump(), "engine": "inprocess", "engine_params": {}})
    one._base_dir = spread.parent
    # Execute
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(spread), str(tmp_path / "spread")],
        env=cluster.env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    ref = execute(one, out_dir=tmp_path / "one")
    # Assert: actors on both nodes, the transcript of one worker, nothing on the terminal
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(got["nodes"]) == ["client_1", "client_2", "client_3", "client_4"]
    assert len(set(got["nodes"].values())) == 2
    assert got["digest"] == ref.transcript.digest()
    assert "raylet" not in proc.stdout + proc.stderr


def test_parties_pinned_to_a_node_by_resource(cluster, tmp_path):
    pins = "{client_1: site_b, client_2: site_b, client_3: site_a, client_4: site_a}"
    pinned = _scenario(tmp_path, f'{{address: "{cluster.address}", placement: {pins}}}')
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(pinned), str(tmp_path / "pinned")],
        env=cluster.env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    nodes = json.loads(proc.stdout.strip().splitlines()[-1])["nodes"]
    assert nodes["client_1"] == nodes["client_2"] != nodes["client_3"] == nodes["client_4"]
    # a resource no node offers: one line, bad input
    bad = _scenario(tmp_path, f'{{address: "{cluster.address}", placement: {{client_1: gpu9}}}}')
    proc = _testbed(cluster.env, "run", str(bad), "--out", str(tmp_path / "bad"), "-q")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: engine_params.placement: no node of the cluster offers the resource 'gpu9' "
        "(custom resources: site_a, site_b); give nodes resources with `ray start --resources`"
    ]


def test_a_driver_without_the_clusters_token_is_refused_in_one_line(cluster, tmp_path):
    wrong = tmp_path / "wrong_token"
    wrong.write_text(secrets.token_hex(32))
    path = _scenario(tmp_path, f'{{address: "{cluster.address}"}}')
    env = {**cluster.env, "RAY_AUTH_TOKEN_PATH": str(wrong)}
    proc = _testbed(env, "run", str(path), "--out", str(tmp_path / "a"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    # before it, Ray's own client warns once per attempt (written by its C++ code to stderr,
    # about connect_timeout attempts; docs/guide/scale.md)
    assert all(_GCS_CLIENT_LINE.match(ln) for ln in lines[:-1]) and len(lines) <= 8, proc.stderr
    assert lines[-1].startswith(
        f"error: engine_params.address: could not join the Ray cluster at {cluster.address}: "
    ), lines[-1]


def test_a_node_killed_mid_run_ends_in_one_line(cluster, tmp_path):
    # Prepare: client_2 and client_4 on node B, a run long enough to be killed in
    pins = "{client_1: site_a, client_3: site_a, client_2: site_b, client_4: site_b}"
    path = _scenario(
        tmp_path, f'{{address: "{cluster.address}", placement: {pins}}}', iterations=400
    )
    out = tmp_path / "run"
    victim = cluster.raylet("site_b")
    # Execute: kill node B's raylet once both actors are up (the protocol is running)
    run = subprocess.Popen(
        [sys.executable, "-m", "testbed", "run", str(path), "--out", str(out)],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 240
        while (
            sum(
                _cmd(p).startswith("ray::_PartyGroup") and "__init__" not in _cmd(p)
                for p in _descendants([victim, cluster.raylet("site_a")])
            )
            < 2
        ):
            assert run.poll() is None and time.monotonic() < deadline, "the actors never started"
            time.sleep(0.2)
        os.kill(victim, signal.SIGKILL)
        stdout, stderr = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    # Assert: exit 1, one line naming the node and the parties it held, nothing kept
    assert run.returncode == 1, stderr
    lines = _without_progress(stderr).splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ray engine: node "), lines[0]
    assert "died, and with it the actors holding client_2, client_4;" in lines[0]
    assert lines[0].endswith("nothing of this run was kept (no run directory was written)")
    assert "raylet" not in stdout and "Traceback" not in stderr
    assert not out.exists()


def test_no_cluster_at_the_address_fails_in_one_line(tmp_path):
    port = _free_port()  # nothing listens there
    path = _scenario(tmp_path, f'{{address: "127.0.0.1:{port}"}}')
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    env.pop("RAY_ADDRESS", None)
    proc = _testbed(env, "run", str(path), "--out", str(tmp_path / "a"), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: engine_params.address: no Ray cluster at 127.0.0.1:{port} (Connection "
        "refused within 5 s); start one with `ray start --head --port=PORT` or correct the "
        "address"
    ]
    # the same through RAY_ADDRESS, as Ray's own tools read it
    plain = _scenario(tmp_path, "{actors: 2}")
    proc = _testbed(
        {**env, "RAY_ADDRESS": f"127.0.0.1:{port}"},
        "run",
        str(plain),
        "--out",
        str(tmp_path / "b"),
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(f"error: RAY_ADDRESS: no Ray cluster at 127.0.0.1:{port} (Connection refused")
    )


@pytest.fixture
def private_run(tmp_path):
    """``testbed run`` of FedBary on a private local cluster of two actors (issue 48, fault
    8), its output piped, and its run directory; long enough to be killed mid-run on an idle
    machine (5000 rounds: 400 end in ~5 s there). Killed at the end if still running."""
    path = _scenario(tmp_path, "{actors: 2, num_cpus: 2}", iterations=5000)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    env.pop("RAY_ADDRESS", None)
    out = tmp_path / "run"
    run = subprocess.Popen(
        [sys.executable, "-m", "testbed", "run", str(path), "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        yield run, out
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()


def test_private_cluster_raylet_killed_mid_run_ends_in_one_line(tmp_path, private_run):
    # Prepare: the run on the private local cluster
    run, out = private_run
    deadline = time.monotonic() + 240
    while True:  # this run's raylet (its session folder is inside tmp_path), an actor up
        own = _own_raylet(tmp_path)
        if own and any(
            _cmd(p).startswith("ray::_PartyGroup") and "__init__" not in _cmd(p)
            for p in _descendants([own[0]])
        ):
            break
        assert run.poll() is None and time.monotonic() < deadline, "no actor started"
        time.sleep(0.2)
    raylet, link = own
    os.kill(raylet, signal.SIGKILL)
    killed = time.monotonic()
    stdout, stderr = run.communicate(timeout=180)
    took = time.monotonic() - killed
    # exit 1 and the testbed's one line naming the raylet, within seconds: the death seen by a
    # call to an actor (or when the cluster is shut down at the end), or by the raylet's
    # watcher before Ray's core worker ends the process itself (about 15 s after the kill, with
    # its own C++ line about lost objects and nothing of the testbed's: raylet_watch.py)
    assert run.returncode == 1, stderr
    ours = re.compile(
        rf"error: ray engine: the local cluster's raylet \(pid {raylet}\) died during the run"
        r"(, and with it the actors holding client_1, client_2, client_3, client_4)?; "
        r"nothing of this run was kept \((no run directory was written|its unfinished "
        r"directory is removed by the next run into the same folder)\)"
    )
    ends = _without_progress(stderr)
    assert len(ends.splitlines()) == 1 and ours.fullmatch(ends), stderr
    assert took < 10, took
    assert "(raylet)" not in stdout + stderr
    # no session process outlives the run by more than a second or two
    deadline = time.monotonic() + 2
    while session_processes(link) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert session_processes(link) == [] and not os.path.lexists(link)
    assert not (out / "results.json").exists()


def test_private_cluster_actor_killed_mid_run_ends_in_one_line(tmp_path, private_run):
    """An actor process killed mid-run (issue 48, fault 8): exit 1 and one line naming the
    actor and its parties; Ray's ActorDiedError paragraph stays off the terminal."""
    run, out = private_run

    def actors() -> list[int]:  # this run's private cluster's actors, running the protocol
        own = _own_raylet(tmp_path)
        return [
            p
            for p in (_descendants([own[0]]) if own else [])
            if _cmd(p).startswith("ray::_PartyGroup") and "__init__" not in _cmd(p)
        ]

    deadline = time.monotonic() + 240
    while not actors():
        assert run.poll() is None and time.monotonic() < deadline, "no actor started"
        time.sleep(0.2)
    time.sleep(3)  # past its start (an actor killed while starting is named as such)
    victim = None
    while victim is None:  # a process listed a moment ago may be gone: list them again
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, "no actor to kill"
        for pid in actors():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            victim = pid
            break
    up = [victim]
    stdout, stderr = run.communicate(timeout=180)
    assert run.returncode == 1, stderr
    line = (
        rf"error: ray engine: the actor process \(pid {up[0]} on node [0-9a-f]{{8}} at "
        r"[0-9a-f.:]+\) holding client_\d, client_\d died; nothing of this run was kept "
        r"\(no run directory was written\)"
    )
    assert re.fullmatch(line, _without_progress(stderr)), stderr
    assert "ActorDiedError" not in stdout + stderr and "Traceback" not in stderr
    assert not (out / "results.json").exists()
