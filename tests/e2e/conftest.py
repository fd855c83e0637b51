"""The e2e tests' two-node local Ray cluster (`ray start --head` plus one worker, token auth)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray(*args, env, timeout=180):
    return subprocess.run([RAY, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cluster_env():
    """Extra environment for the cluster's nodes (a test module overrides it, e.g. with an S3 endpoint)."""
    return {}


@pytest.fixture
def cluster(tmp_path, cluster_env):
    """Head plus one worker node on this machine; token auth on, as Ray 2.60 does by default. Yields the environment
    (for `ray` and drivers), the job server's address and the GCS address (``--address`` of a driver)."""
    import ray

    ray.shutdown()  # no driver of ours may hold a local instance while we start a cluster
    # the job's `python` must be this interpreter (the one fedsweep is installed in), as with an active venv
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    env = {**os.environ, "PATH": path, "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0", **cluster_env}
    env.pop("RAY_ADDRESS", None)
    token = _ray("get-auth-token", "--generate", env=env)  # ray start needs a token; only ray.init() makes one
    assert token.returncode == 0, token.stdout + token.stderr
    gcs_port, dashboard_port = _free_port(), _free_port()
    address = f"http://127.0.0.1:{dashboard_port}"
    # --block keeps each node's processes under one `ray start` of ours: stopping it stops that node and nothing
    # else on the machine (`ray stop` would end every Ray instance of this user, other test runs' included)
    common = ["--num-cpus=1", "--object-store-memory=300000000", "--block"]
    nodes = [subprocess.Popen([RAY, "start", "--head", f"--port={gcs_port}", f"--dashboard-port={dashboard_port}",
                               "--dashboard-host=127.0.0.1", "--disable-usage-stats", *common], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        _wait(lambda: _ray("job", "list", f"--address={address}", env=env, timeout=60).returncode == 0,
              nodes, "the head's job server did not come up")
        nodes.append(subprocess.Popen([RAY, "start", f"--address=127.0.0.1:{gcs_port}", *common], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait(lambda: _alive_nodes(address, env) == 2, nodes, "the worker node did not join")
        # the job server answers before the head's job agent has registered ("No available agent to submit job"
        # under load): a no-op job that runs is the sign that `ray job submit` works
        _wait(lambda: _ray("job", "submit", f"--address={address}", "--", "true", env=env,
                           timeout=120).returncode == 0, nodes, "the head's job agent did not come up")
        yield {"env": env, "address": address, "gcs_address": f"127.0.0.1:{gcs_port}"}
    finally:
        for node in reversed(nodes):
            node.send_signal(signal.SIGTERM)
        for node in reversed(nodes):
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                node.kill()
                node.wait(timeout=30)


def _alive_nodes(address: str, env) -> int:
    listed = _ray("list", "nodes", f"--address={address}", "--format=json", "--filter", "state=ALIVE", env=env,
                  timeout=60)
    try:
        return len(json.loads(listed.stdout)) if listed.returncode == 0 else 0
    except ValueError:
        return 0


def _wait(ready, nodes, message: str, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while not ready():
        assert all(n.poll() is None for n in nodes), f"{message}: a `ray start` exited"
        assert time.time() < deadline, message
        time.sleep(1)
