"""A sweep's replicate reruns alone: the printed rerun line (space, every --set, the trial's values) with
``--set seed=S`` reproduces what the sweep logged for seed S, metric for metric. And a best whose lead over the
runner-up is below the seeds' standard error is said to be within noise."""
import re
import shlex

import pytest

from tests.conftest import mlflow_runs

SPACE = {
    "description": "replicate rerun",
    "base": {"dataset": {"name": "digits"}, "partition": {"kind": "dirichlet", "alpha": 0.5}, "model": {"name": "cnn"},
             "algorithm": {"name": "fedavg"},
             "clients": {"num_clients": 10, "clients_per_round": 5, "local_epochs": 1, "batch_size": 16, "lr": 0.05,
                         "momentum": 0.9},
             "rounds": 2, "seed": 0},
    # two learning rates 1e-7 apart: the same results up to float rounding, so the best leads by (about) nothing
    "parameters": {"clients.lr": {"choice": [0.05, 0.0500001]}},
    "search": {"searcher": "grid", "num_samples": 1, "scheduler": {"kind": "none"}, "seeds": [3, 4],
               "max_concurrent_trials": 1},
    "resources": {"cpu": 2, "gpu": 0},
}
COMPARED = ("val_accuracy", "test_accuracy", "val_loss", "test_loss")


@pytest.mark.slow
def test_the_rerun_line_with_a_seed_reproduces_that_replicate(ray_local, tmp_path, tracking_uri, capsys):
    import yaml

    from platform.run import main as run_main
    from platform.sweep.command import main as sweep_main

    path = tmp_path / "replicates.yaml"
    path.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    rc = sweep_main([str(path), "--set", "partition.alpha=0.3", "--tracking-uri", tracking_uri, "--storage-path",
                     str(tmp_path / "tune"), "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert re.search(r"lead over the runner-up [0-9.]+ ± [0-9.]+ \(SE, 2 seeds\), Welch p = [0-9.e-]+: within noise",
                     out) or "lead over the runner-up 0.0000 ± 0.0000 (SE, 2 seeds), Welch p = 1: within noise" in out, out
    line = re.search(r"rerun it alone: (.+?) --set seed=S", out).group(1)
    argv = shlex.split(line)
    assert argv[:4] == ["python", "-m", "platform.run", str(path)]  # a file path: its path, not only its stem
    assert "partition.alpha=0.3" in argv  # the user's --set is carried
    assert any(a.startswith("clients.lr=") for a in argv)  # the trial's sampled value
    client, runs = mlflow_runs(tracking_uri, "replicates")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.data.tags["best.within_noise"] == "true"
    best_lr = float(next(a for a in argv if a.startswith("clients.lr=")).split("=")[1])
    trial = next(r for r in runs if "mlflow.parentRunId" in r.data.tags
                 and float(r.data.params["clients.lr"]) == best_lr)
    rc = run_main(argv[3:] + ["--set", "seed=4", "--tracking-uri", tracking_uri, "--experiment", "rerun",
                              "--cache-dir", str(tmp_path / "cache")])
    assert rc == 0
    _, reruns = mlflow_runs(tracking_uri, "rerun")
    alone = reruns[0].data.metrics
    for metric in COMPARED:
        assert alone[metric] == trial.data.metrics[f"{metric}/seed_4"], metric  # exactly, not approximately
    assert alone["val_accuracy"] != trial.data.metrics["val_accuracy/seed_3"] or \
        alone["test_loss"] != trial.data.metrics["test_loss/seed_3"]  # seed 4, not any seed
