"""The sweep CLI end to end in one process: real Ray Tune, real Optuna, a real MLflow store."""
import os

import pytest
import yaml

from tests.conftest import mlflow_runs

FAST_SPACE = {
    "description": "test sweep",
    "base": {"rounds": 3, "clients": {"num_clients": 6, "clients_per_round": 6, "batch_size": 16, "momentum": 0.9}},
    "parameters": {
        "algorithm.name": {"choice": ["fedavg", "fedprox"]},
        "algorithm.mu": {"choice": [0.01, 0.1], "when": {"algorithm.name": "fedprox"}},
        "clients.lr": {"grid": [0.05]},
    },
    "search": {"searcher": "grid", "num_samples": 1, "seeds": [0, 1], "metric": "test_accuracy", "mode": "max"},
    "resources": {"cpu": 1},
}


def test_smoke_sweep_writes_parent_and_child_runs(ray_local, tracking_uri, tmp_path, capsys):
    from platform.sweep import main

    rc = main(["smoke", "--num-samples", "3", "--set", "rounds=3", "--tracking-uri", tracking_uri,
               "--storage-path", str(tmp_path / "tune")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "best of 3 trial(s)" in out and f"mlflow ui --backend-store-uri {tracking_uri}" in out
    client, runs = mlflow_runs(tracking_uri, "smoke")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 3
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.data.tags["fedsweep.search_space"] == "smoke"
    assert parent.data.tags["mlflow.source.git.commit"] and "platform.sweep" in parent.data.tags["fedsweep.command"]
    assert "best_val_accuracy" in parent.data.metrics and "best_trial_test_accuracy" in parent.data.metrics
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.tags["status"] in ("completed", "early-stopped")
        assert child.info.status == "FINISHED"
        assert child.data.params["dataset.name"] == "digits" and "clients.lr" in child.data.params
        history = client.get_metric_history(child.info.run_id, "test_accuracy")
        steps = [m.step for m in history]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 1
        for key in ("test_loss", "train_loss", "seconds"):
            assert len(client.get_metric_history(child.info.run_id, key)) == len(steps)
        assert child.data.metrics["rounds_completed"] == len(steps)
        if child.data.params["algorithm.name"] == "fedavg":
            assert "algorithm.mu" not in child.data.params
        else:
            assert 0.001 <= float(child.data.params["algorithm.mu"]) <= 1.0


def test_grid_with_conditional_parameter_and_seeds(ray_local, tracking_uri, tmp_path, capsys):
    from platform.sweep import main

    path = tmp_path / "conditional.yaml"
    path.write_text(yaml.safe_dump(FAST_SPACE))
    rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune")])
    out = capsys.readouterr().out
    assert rc == 0, out
    client, runs = mlflow_runs(tracking_uri, "conditional")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    # fedavg once, fedprox once per mu: 3 grid points
    combos = sorted((r.data.params["algorithm.name"], r.data.params.get("algorithm.mu")) for r in children)
    assert combos == [("fedavg", None), ("fedprox", "0.01"), ("fedprox", "0.1")]
    for child in children:
        assert child.data.tags["status"] == "completed"
        std = client.get_metric_history(child.info.run_id, "test_accuracy_std")
        assert len(std) == 3 and all(m.value >= 0 for m in std)
        assert child.data.params["search.seeds"] == "[0, 1]"
    assert "over 2 seeds" in out


def test_failed_trial_is_marked_failed(ray_local, tracking_uri, tmp_path, capsys):
    """A trial that raises ends FAILED in MLflow with status tag 'failed'; the sweep exits non-zero."""
    from platform.sweep import main

    space = dict(FAST_SPACE)
    # a partition no draw can satisfy (12 clients, 10 classes, α tiny, every client needs > 0.99 of a class):
    # every trial raises inside the trainable, after its MLflow run exists
    space["base"] = {**FAST_SPACE["base"], "partition": {"alpha": 0.001, "min_share": 0.99},
                     "clients": {"num_clients": 12, "clients_per_round": 12}}
    space["parameters"] = {"clients.lr": {"choice": [0.05]}}
    space["search"] = {**FAST_SPACE["search"], "seeds": [0]}
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(space))
    rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune")])
    capsys.readouterr()
    assert rc == 1
    _, runs = mlflow_runs(tracking_uri, "broken")
    statuses = sorted((r.info.status, r.data.tags.get("status")) for r in runs)
    assert statuses == [("FAILED", "failed"), ("FAILED", "failed")]


def test_interrupted_sweep_resumes_without_duplicate_rounds(tmp_path):
    """Ctrl-C mid-sweep, then --resume: every run ends FINISHED and no round is logged twice."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO_ROOT, run_cli

    space = dict(FAST_SPACE)
    space["base"] = {**FAST_SPACE["base"], "rounds": 6}
    space["search"] = {**FAST_SPACE["search"], "seeds": [0], "checkpoint_every": 2, "max_concurrent_trials": 1}
    path = tmp_path / "resumable.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [str(path), "--tracking-uri", uri, "--storage-path", str(tmp_path / "tune")]
    proc = subprocess.Popen([sys.executable, "-m", "platform.sweep", *args], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = []
    deadline = time.time() + 240
    for line in proc.stdout:
        seen.append(line)
        if "[trial 2/3] round 3/6" in line or time.time() > deadline:
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=240)
    seen.append(rest)
    assert proc.returncode != 0, "".join(seen)
    assert "--resume" in "".join(seen)
    resumed = run_cli("platform.sweep", *args, "--resume", cwd=REPO_ROOT, timeout=480)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    client, runs = mlflow_runs(uri, "resumable")
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    for child in (r for r in runs if "mlflow.parentRunId" in r.data.tags):
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "test_accuracy")]
        assert steps == list(range(1, 7)), steps
        assert child.data.tags["status"] == "completed"
