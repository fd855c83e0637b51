"""A two-node local Ray cluster (`ray start --head` plus one worker node) for the end-to-end tests: one for the
whole e2e package, the node-loss test last (it kills the worker node).

The cluster lives in its own temporary directory, and teardown stops only the processes of that cluster (never
`ray stop`, which would stop every Ray instance on the machine, other test runs included)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tests import cluster_recipe
from tests.conftest import process_cmdlines

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
WORKER_RESOURCE = "fedsweep_e2e_worker"  # a custom resource only the worker node has: names its raylet
# The cluster is clusters/local.md's recipe (its two `ray start` lines, read from the file: the tested recipe is the
# documented one), with free ports for the documented ones and what only a test needs: a temp dir of its own, a
# memory cap, no usage stats, and a resource that names the worker node. The recipe gives each node's dashboard agent
# a port of its own (--dashboard-agent-listen-port=0): `ray start` gives every node 52365, and an agent that finds it
# taken stays up without HTTP, so the job server answers "No available agent to submit job" for good.
HEAD_ARGS, WORKER_ARGS = cluster_recipe.ray_starts()
TEST_ONLY = ("--object-store-memory=300000000",)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli(*args, env, timeout=180):
    return subprocess.run([RAY, *args], env=env, capture_output=True, text=True, timeout=timeout)


def processes_of(temp_dir: str) -> list[int]:
    """The processes of the cluster whose files live under ``temp_dir``, with all their descendants (Ray's
    workers retitle themselves, so they are found as children of the raylets)."""
    from platform.cli import descendant_processes

    roots = [pid for pid, cmd in process_cmdlines().items() if temp_dir in cmd and pid != os.getpid()]
    return sorted({pid for root in roots for pid in (root, *descendant_processes(root))})


def worker_raylet(temp_dir: str) -> int:
    """The pid of the worker node's raylet."""
    (pid,) = _worker_raylets(temp_dir)
    return pid


def _worker_raylets(temp_dir: str) -> list[int]:
    return [pid for pid, cmd in process_cmdlines().items()
            if "raylet/raylet" in cmd and temp_dir in cmd and WORKER_RESOURCE in cmd]


def stop_processes(pids: list[int], grace: float = 10.0) -> None:
    """SIGTERM, then after ``grace`` seconds SIGKILL, each of ``pids`` (the driver's reaper does the same)."""
    from platform import reaper

    reaper.stop([(pid, start) for pid in pids if (start := reaper.start_time(pid)) is not None], grace=grace)


def pytest_collection_modifyitems(config, items):
    """Order the e2e tests around their one cluster (:func:`cluster`, package-scoped): the tests that do not use it
    first (so it is not idle beside them), then those that use it, and the node-loss test last, since it kills the
    worker node (the cluster fixture would add a new worker node for a test after it, at the cost of a node start)."""
    here = os.path.dirname(os.path.abspath(__file__))
    positions = [i for i, item in enumerate(items) if str(item.path).startswith(here + os.sep)]

    def rank(item):
        if "cluster" not in getattr(item, "fixturenames", ()):
            return 0
        return 2 if item.path.name == "test_node_loss.py" else 1

    for position, item in zip(positions, sorted((items[i] for i in positions), key=rank)):  # sorted() is stable
        items[position] = item


@pytest.fixture(scope="package")
def two_node_cluster(s3_server):
    """Head plus one worker node on this machine, 1 CPU each, for every e2e test (a cluster start costs tens of seconds
    on 2 CPUs); token auth on, as Ray 2.60 does by default; every node has the environment that reaches the moto S3
    server of :func:`tests.conftest.s3_server` (endpoint, test credentials, region). Yields the environment (for `ray`
    and drivers), the job server's address, the GCS address (``--address`` of a driver) and the cluster's temp dir."""
    import ray

    ray.shutdown()  # no driver of ours may hold a local instance while we start a cluster
    # the job's `python` must be this interpreter (the one fedsweep is installed in), as with an active venv
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    env = {**os.environ, "PATH": path, "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0", **s3_server["env"]}
    env.pop("RAY_ADDRESS", None)
    token = ray_cli("get-auth-token", "--generate", env=env)  # ray start needs a token; only ray.init() makes one
    assert token.returncode == 0, token.stdout + token.stderr
    temp_dir = tempfile.mkdtemp(prefix="fsr", dir="/tmp")  # short: Ray's socket paths live under it
    ports = {flag: free_port() for flag in cluster_recipe.PORT_FLAGS}
    gcs_port, dashboard_port = ports["--port"], ports["--dashboard-port"]
    try:
        head = ray_cli("start", *cluster_recipe.replaced(HEAD_ARGS, ports), *TEST_ONLY, f"--temp-dir={temp_dir}",
                       "--disable-usage-stats", env=env)
        assert head.returncode == 0, head.stdout + head.stderr
        cluster = {"env": env, "address": f"http://127.0.0.1:{dashboard_port}", "gcs_address": f"127.0.0.1:{gcs_port}",
                   "temp_dir": temp_dir}
        _start_worker(cluster)
        yield cluster
    finally:
        # SIGKILL after 3 s: a raylet and its agents linger 10 s and more after SIGTERM, reporting to a GCS that is gone
        stop_processes(processes_of(temp_dir), grace=3.0)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def cluster(two_node_cluster):
    """The e2e cluster (:func:`two_node_cluster`) with both nodes alive: if a test lost the worker node (the node-loss
    test kills its raylet), a new worker node joins first."""
    if not _worker_raylets(two_node_cluster["temp_dir"]):
        # the GCS marks the lost node dead after its health checks fail; until then it still counts as alive
        _wait(lambda: _alive_nodes(two_node_cluster["address"], two_node_cluster["env"]) == 1,
              "the lost worker node was not marked dead", timeout=180)
        _start_worker(two_node_cluster)
    return two_node_cluster


def _start_worker(cluster: dict) -> None:
    """A worker node (1 CPU, the custom resource that names its raylet) joins ``cluster``; waits until it is alive."""
    worker = ray_cli("start", *cluster_recipe.replaced(WORKER_ARGS, {"--address": cluster["gcs_address"]}), *TEST_ONLY,
                     f'--resources={{"{WORKER_RESOURCE}": 1}}', env=cluster["env"])
    assert worker.returncode == 0, worker.stdout + worker.stderr
    _wait(lambda: _alive_nodes(cluster["address"], cluster["env"]) == 2, "the worker node did not join")


def wait_for_job_agent(cluster: dict, timeout: float = 240) -> None:
    """Wait until `ray job submit` works: the job server answers before the head's job agent has registered ("No
    available agent to submit job", for minutes under load); a no-op job that runs is the sign."""
    _wait(lambda: ray_cli("job", "submit", f"--address={cluster['address']}", "--", "true", env=cluster["env"],
                          timeout=120).returncode == 0, "the head's job agent did not come up", timeout)


def _alive_nodes(address: str, env) -> int:
    listed = ray_cli("list", "nodes", f"--address={address}", "--format=json", "--filter", "state=ALIVE", env=env,
                     timeout=60)
    try:
        return len(json.loads(listed.stdout)) if listed.returncode == 0 else 0
    except ValueError:
        return 0


def _wait(ready, message: str, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while not ready():
        assert time.time() < deadline, message
        time.sleep(1)
