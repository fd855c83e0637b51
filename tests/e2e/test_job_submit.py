"""End to end with real processes: a two-node local Ray cluster (`ray start`), `ray job submit` of the
smoke sweep, and a check of the MLflow store the job printed, after the job has ended."""
import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, mlflow_runs
from tests.e2e.conftest import RAY, wait_for_job_agent

pytestmark = pytest.mark.e2e


def _submit_smoke(cluster, home, *args) -> subprocess.CompletedProcess:
    """`ray job submit` of the smoke sweep (3 trials, ``args`` added) with its results home at ``home``."""
    wait_for_job_agent(cluster)
    runtime_env = json.dumps({"env_vars": {"FEDSWEEP_HOME": str(home)}})
    return subprocess.run(
        [RAY, "job", "submit", f"--address={cluster['address']}", "--working-dir", ".",
         "--runtime-env-json", runtime_env, "--", "python", "-m", "platform.sweep", "smoke", "--num-samples", "3",
         *args], cwd=REPO_ROOT, env=cluster["env"], capture_output=True, text=True, timeout=600)


def test_job_submit_smoke_sweep_lands_in_stable_store(cluster, tmp_path):
    home = tmp_path / "fedsweep_home"
    submit = _submit_smoke(cluster, home, "--set", "rounds=4")
    output = submit.stdout + submit.stderr
    assert submit.returncode == 0, output[-5000:]
    assert "succeeded" in output
    job_id = re.search(r"Job '(raysubmit_\w+)' succeeded", output).group(1)
    status = subprocess.run(
        [sys.executable, "-c", "import sys; from ray.job_submission import JobSubmissionClient as C; "
                               "print(C(sys.argv[1]).get_job_status(sys.argv[2]))", cluster["address"], job_id],
        env=cluster["env"], capture_output=True, text=True, timeout=120)
    assert status.stdout.strip().endswith("SUCCEEDED"), status.stdout + status.stderr
    uri = re.search(r"mlflow ui --backend-store-uri (\S+)", output).group(1)
    assert uri == f"sqlite:///{home / 'mlflow.db'}"  # outside the job's temporary working dir
    client, runs = mlflow_runs(uri, "smoke")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 3 == len(runs) - 1
    for child in children:
        assert child.info.status == "FINISHED"
        assert child.data.tags["status"] in ("completed", "early-stopped")
        history = client.get_metric_history(child.info.run_id, "test_accuracy")
        assert len(history) >= 1 and [m.step for m in history] == list(range(1, len(history) + 1))
    assert any(r.data.tags["status"] == "completed" for r in children)
    assert os.path.isdir(home / "ray_results")


@pytest.mark.slow
def test_estimate_under_job_submit_measures_on_the_cluster_and_writes_nothing(cluster, tmp_path):
    """`ray job submit -- python -m platform.sweep smoke --estimate`: the sweep's own trials measured on the
    cluster the job runs in (the host and device named), the sweep predicted for CPUs (no GPU time: the trials ask
    for none), and nothing written to the results home."""
    home = tmp_path / "fedsweep_home"
    submit = _submit_smoke(cluster, home, "--set", "rounds=3", "--estimate")
    output = submit.stdout + submit.stderr
    assert submit.returncode == 0 and "succeeded" in output, output[-5000:]
    measured = re.search(r"measured on (\S+), CPU \((\d+) cores\): fedavg, model cnn \(([\d,]+) parameters\), "
                         r"a Tune experiment of (\d+) trial\(s\)", output)
    assert measured is not None, output[-3000:]
    assert "round 1 of a fresh trial: " in output and "a later round: " in output
    assert re.search(r"predicted on \d+ CPU\(s\) like these \(\d+ trial\(s\) at once\): wall time ≈ .+ \(\d+ s\)",
                     output), output[-3000:]
    assert "GPU-hours" not in output
    assert not home.exists() or os.listdir(home) == []  # the estimate's cache and Tune storage were temporary
