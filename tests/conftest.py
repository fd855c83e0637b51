"""Shared fixtures: a real local Ray instance and a real (SQLite) MLflow store per test module."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def ray_local():
    """A real local Ray instance with 2 CPUs, shut down after the module (e2e tests start their own cluster)."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False, object_store_memory=300 * 1024 ** 2)
    yield ray
    ray.shutdown()


@pytest.fixture
def one_torch_thread():
    """Tiny models: torch's intra-op threads only add overhead (10x slower on a busy 2-CPU machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tracking_uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def run_cli(module: str, *args: str, cwd: str | None = None, env: dict | None = None, timeout: int = 600):
    """Run ``python -m <module> args`` in a fresh interpreter, as a user would."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd or REPO_ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def mlflow_runs(uri: str, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no MLflow experiment {experiment!r} in {uri}"
    return client, client.search_runs([exp.experiment_id], max_results=1000)
