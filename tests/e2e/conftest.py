"""A two-node local Ray cluster (`ray start --head` plus one worker node) for the end-to-end tests.

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

from tests.conftest import process_cmdlines

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
WORKER_RESOURCE = "fedsweep_e2e_worker"  # a custom resource only the worker node has: names its raylet


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli(*args, env, timeout=180):
    return subprocess.run([RAY, *args], env=env, capture_output=True, text=True, timeout=timeout)


def processes_of(temp_dir: str) -> list[int]:
    """The processes of the cluster whose session lives under ``temp_dir``, with all their descendants (Ray's
    workers retitle themselves, so they are found as children of the raylets)."""
    from platform.cli import _descendants

    roots = [pid for pid, cmd in process_cmdlines().items() if temp_dir in cmd and pid != os.getpid()]
    return sorted({pid for root in roots for pid in (root, *_descendants(root))})


def worker_raylet(temp_dir: str) -> int:
    """The pid of the worker node's raylet."""
    (pid,) = [pid for pid, cmd in process_cmdlines().items()
              if "raylet/raylet" in cmd and temp_dir in cmd and WORKER_RESOURCE in cmd]
    return pid


def stop_processes(pids: list[int]) -> None:
    """SIGTERM, then after a grace period SIGKILL, each of ``pids`` (the driver's reaper does the same)."""
    from platform import _reaper

    _reaper.stop([(pid, start) for pid in pids if (start := _reaper.start_time(pid)) is not None], grace=10.0)


@pytest.fixture
def cluster_env():
    """Extra environment for the cluster's nodes and drivers (a test module overrides it, e.g. with an S3 endpoint)."""
    return {}


@pytest.fixture
def cluster(cluster_env):
    """Head plus one worker node on this machine, 1 CPU each; token auth on, as Ray 2.60 does by default. Yields the
    environment (for `ray` and drivers), the job server's address, the GCS address (``--address`` of a driver) and
    the cluster's temp dir."""
    import ray

    ray.shutdown()  # no driver of ours may hold a local instance while we start a cluster
    # the job's `python` must be this interpreter (the one fedsweep is installed in), as with an active venv
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    env = {**os.environ, "PATH": path, "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0", **cluster_env}
    env.pop("RAY_ADDRESS", None)
    token = ray_cli("get-auth-token", "--generate", env=env)  # ray start needs a token; only ray.init() makes one
    assert token.returncode == 0, token.stdout + token.stderr
    temp_dir = tempfile.mkdtemp(prefix="fsr", dir="/tmp")  # short: Ray's socket paths live under it
    gcs_port, dashboard_port = free_port(), free_port()
    try:
        head = ray_cli("start", "--head", f"--port={gcs_port}", f"--dashboard-port={dashboard_port}",
                       "--dashboard-host=127.0.0.1", "--num-cpus=1", "--object-store-memory=300000000",
                       f"--temp-dir={temp_dir}", "--disable-usage-stats", env=env)
        assert head.returncode == 0, head.stdout + head.stderr
        worker = ray_cli("start", f"--address=127.0.0.1:{gcs_port}", "--num-cpus=1",
                         "--object-store-memory=300000000", f'--resources={{"{WORKER_RESOURCE}": 1}}', env=env)
        assert worker.returncode == 0, worker.stdout + worker.stderr
        address = f"http://127.0.0.1:{dashboard_port}"
        _wait(lambda: _alive_nodes(address, env) == 2, "the worker node did not join")
        yield {"env": env, "address": address, "gcs_address": f"127.0.0.1:{gcs_port}", "temp_dir": temp_dir}
    finally:
        stop_processes(processes_of(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)


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
