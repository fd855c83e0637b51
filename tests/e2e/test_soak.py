"""A 150-trial soak: many short trials through one driver, as a user runs them. Every trial ends with exactly one
finished MLflow run and nothing is left RUNNING. (The driver's memory over such a sweep is a benchmark figure:
``python -m benchmarks.driver_memory``, docs/benchmarks/driver_memory.md.)"""
import subprocess
import sys

import pytest
import yaml

from benchmarks.driver_memory import SPACE
from tests.conftest import REPO_ROOT, mlflow_runs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TRIALS = 150


def test_150_short_trials_each_end_with_one_finished_run(tracking_uri, tmp_path):
    space = {**SPACE, "search": {**SPACE["search"], "num_samples": TRIALS}}
    path = tmp_path / "soak.yaml"
    path.write_text(yaml.safe_dump(space))
    uri = tracking_uri  # a new store (tmp_path/mlflow.db)
    done = subprocess.run([sys.executable, "-m", "platform.sweep", str(path), "--tracking-uri", uri, "--storage-path",
                           str(tmp_path / "tune"), "--cache-dir", str(tmp_path / "cache"), "--quiet"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert f"best of {TRIALS} trial(s) (0 failed)" in done.stdout, done.stdout[-3000:]
    _, runs = mlflow_runs(uri, "soak")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(runs) == TRIALS + 1 and len(children) == TRIALS
    assert {(r.info.status, r.data.tags.get("status")) for r in runs} == {("FINISHED", "completed")}
    assert len({c.data.tags["fedsweep.trial_id"] for c in children}) == TRIALS
