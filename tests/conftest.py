"""Shared fixtures: a real local Ray instance and a real (SQLite) MLflow store per test module."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The suite runs on two pytest-xdist workers (pyproject's addopts: ``-n 2 --dist loadgroup``), each test sent to a
# worker as one is free, except for the tests that must run one after another in one process: they form one unit of
# work (an xdist "scope") that one worker runs in collection order. pytest-xdist's own ``xdist_group`` marks do not
# work with pytest 9 (xdist 3.8 renames the test ids through an attribute pytest 9 no longer reads), and the controller
# process that hands out the work never collects the tests, so the units are told from the test ids here:
#
# - every e2e test (``tests/e2e``): they share one two-node cluster (a package fixture), the node-loss test last;
# - the tests of a module that defines a module- or package-scoped fixture (a sweep, a browser, a run shared by its
#   tests), which would otherwise be built once on each worker.
#
# Nothing else needs to be kept apart: the tests that look at processes look only at their own (the descendants of a
# command they started or of their worker's Ray instance, or a cluster's own temp dir), every Ray instance a test or
# a command starts is a new local one (``address="local"``; the e2e cluster's ``ray start`` keeps its address file in
# its own temp dir), each worker has its own tmp_path tree, MLflow store template and S3 server, and the stage cache
# writes whole files under per-key locks.
E2E_TESTS = "tests/e2e/"

# Hypothesis, deterministic by default: the README's test command (and CI) draws the same examples on every run and
# keeps no example database (none in the tree, none to replay a failure only on one machine). The "fuzz" profile
# hunts: fresh draws, many more examples, a database in the user's cache so a failure found is tried first next time:
#   pytest -m fuzz --hypothesis-profile=fuzz          (or FEDSWEEP_HYPOTHESIS_PROFILE=fuzz)
from hypothesis import HealthCheck, settings  # noqa: E402  (the `test` extra installs it)
from hypothesis.database import DirectoryBasedExampleDatabase  # noqa: E402

settings.register_profile("ci", derandomize=True, database=None, max_examples=300, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "fuzz", derandomize=False, max_examples=5000, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
    database=DirectoryBasedExampleDatabase(os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fedsweep", "hypothesis")))
settings.load_profile(os.environ.get("FEDSWEEP_HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the marks
def pytest_collection_modifyitems(config, items):
    """A test that trains to an accuracy target (``learning``) belongs to the slow tier, marked or not."""
    for item in items:
        if item.get_closest_marker("learning") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


def _defines_a_shared_fixture(path: str) -> bool:
    """True if the test module at ``path`` (relative to the repository) declares ``@pytest.fixture(scope="module")``
    (or ``"package"``): read, not imported (the controller imports no test module)."""
    import ast

    try:
        with open(os.path.join(REPO_ROOT, path)) as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and any(
                        k.arg == "scope" and isinstance(k.value, ast.Constant) and k.value.value in ("module", "package")
                        for k in decorator.keywords):
                    return True
    return False


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: only with the `test` extra installed
def pytest_xdist_make_scheduler(config, log):
    """With ``--dist loadgroup`` (the default here), the units of work described above."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from functools import lru_cache

    from xdist.scheduler import LoadGroupScheduling

    shared = lru_cache(maxsize=None)(_defines_a_shared_fixture)

    class SuiteScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path.startswith(E2E_TESTS):
                return E2E_TESTS
            if shared(path):
                return path
            return super()._split_scope(nodeid)  # an xdist_group mark, where xdist can read it; else the test alone

    return SuiteScheduling(config, log)


@pytest.fixture(scope="module")
def ray_local():
    """A real local Ray instance with 2 CPUs, started by the first module that needs it and kept for the next ones
    (a start costs seconds; each module's actors are its own, and Tune ends its trials' processes). Ray shuts it down
    at exit; the e2e tests shut it down before starting their own cluster, and the next test here starts it again."""
    import ray

    if not ray.is_initialized():  # address="local": a new instance, never a `ray start` cluster found on this machine
        ray.init(address="local", num_cpus=2, log_to_driver=False, include_dashboard=False,
                 object_store_memory=300 * 1024 ** 2)
    return ray


@pytest.fixture
def one_torch_thread():
    """Tiny models: torch's intra-op threads only add overhead (10x slower on a busy 2-CPU machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def empty_mlflow_store(tmp_path_factory) -> str:
    """A new, empty SQLite MLflow store, its schema created once per test run by MLflow itself (seconds on a busy
    2-CPU machine); :func:`tracking_uri` copies it. (A new store's first use by concurrent sweeps is tested on its own:
    tests/integration/test_concurrent_stores.py.)"""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow_template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return str(path)


@pytest.fixture
def tracking_uri(tmp_path, empty_mlflow_store):
    """``sqlite:///<tmp_path>/mlflow.db``: a copy of :func:`empty_mlflow_store`, a real store with nothing logged."""
    shutil.copyfile(empty_mlflow_store, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def process_running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def process_cmdlines(pids=None) -> dict[int, str]:
    """Command lines (arguments joined by spaces; Ray's processes show their title) of ``pids``, else of every process
    on this machine, read from /proc; processes that are gone are left out."""
    out = {}
    for pid in (pids if pids is not None else [int(e) for e in os.listdir("/proc") if e.isdigit()]):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                out[pid] = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return out


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


def run_tiny_sweep(space: dict, name: str, tracking_uri: str, tmp_path, capsys) -> str:
    """Write ``space`` (a search space dict, usually a shipped one shrunk) as ``<name>.yaml`` and run it with
    ``platform.sweep.command`` on this test's MLflow store, Tune storage and stage cache; asserts exit 0, returns stdout."""
    import yaml

    from platform.sweep.command import main

    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune"),
               "--cache-dir", str(tmp_path / "cache")])
    out = capsys.readouterr().out
    assert rc == 0, out
    return out


def check_best_per_cell(client, runs, scenario_key: str, cells: list, parameter: str, grid: list, directory: str,
                        cast=float) -> list:
    """A finished scenario sweep's ``scenarios/best_per_cell.csv`` has one row per cell (in ``cells`` order), each
    cell ran its whole ``grid`` of ``parameter``, and each row's best is a trial with the cell's top
    final_val_accuracy (selection on validation). Returns the child runs."""
    import csv
    import math

    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == len(cells) * len(grid) and all(r.info.status == "FINISHED" for r in children)
    path = client.download_artifacts(parent.info.run_id, "scenarios", directory)
    with open(f"{path}/best_per_cell.csv") as fh:
        table = list(csv.DictReader(fh))
    assert [cast(row[scenario_key]) for row in table] == cells  # one row per cell
    for value, row in zip(cells, table):
        cell = [c for c in children if c.data.tags["fedsweep.scenario"] == f"{scenario_key}={value}"]
        assert sorted(float(c.data.params[parameter]) for c in cell) == sorted(grid)  # the cell's whole grid
        assert row["trials_finished"] == str(len(grid)) and float(row[f"best.{parameter}"]) in grid
        top = max(c.data.metrics["final_val_accuracy"] for c in cell)
        assert math.isclose(float(row["val_accuracy"]), top)  # selected on validation
        winners = {float(c.data.params[parameter]) for c in cell
                   if math.isclose(c.data.metrics["final_val_accuracy"], top)}
        assert float(row[f"best.{parameter}"]) in winners
    return children


S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "fedsweep-test", "AWS_SECRET_ACCESS_KEY": "fedsweep-test-secret",
                  "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-compatible server (moto's server mode) on 127.0.0.1: ``{"endpoint": url, "env": {...}}``, the
    environment (endpoint and test credentials) a process needs to reach it."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    yield {"endpoint": endpoint, "env": {"AWS_ENDPOINT_URL": endpoint, **S3_CREDENTIALS}}
    server.stop()


@pytest.fixture
def s3_bucket(s3_server, monkeypatch):
    """A fresh bucket on :func:`s3_server`, with this process's environment pointed at the server; its name."""
    import secrets

    import pyarrow.fs as pafs

    for key, value in s3_server["env"].items():
        monkeypatch.setenv(key, value)
    name = f"fedsweep-{secrets.token_hex(4)}"
    fs = pafs.S3FileSystem(endpoint_override=s3_server["endpoint"].split("://")[1], scheme="http",
                           region="us-east-1", allow_bucket_creation=True)
    fs.create_dir(name)
    return name
