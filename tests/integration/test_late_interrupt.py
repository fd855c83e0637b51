"""Ctrl-C after the last trial finished. Where it lands decides the exit code, and the docs say
so (docs/how-to/resume_and_repair.md): while Tune winds down (the trials all ended) it is too late to matter, and the sweep completes (exit 0); once Tune
has returned, during the final report, it exits 130 and marks the sweep interrupted. Either way nothing is lost:
the trial's run is complete, no run is left RUNNING, and the exit code, the parent run and the sweep's state file
agree. A real SIGINT to a real sweep process (its own local Ray, its own SQLite store)."""
import json
import signal

import pytest
import yaml

from tests.conftest import mlflow_runs
from tests.integration.test_sweep import _sweep_until

pytestmark = pytest.mark.slow  # a signal case: the slow tier

TINY = {"description": "one trial, one round",
        "base": {"dataset": {"name": "digits"}, "partition": {"kind": "iid"}, "model": {"name": "cnn"},
                 "algorithm": {"name": "fedavg"}, "rounds": 1, "seed": 0,
                 "clients": {"num_clients": 4, "clients_per_round": 4, "batch_size": 32, "lr": 0.05}},
        "parameters": {"clients.lr": {"grid": [0.05]}},
        "search": {"searcher": "grid", "num_samples": 1, "seeds": [0], "metric": "val_accuracy", "mode": "max"},
        "resources": {"cpu": 1}}


def test_a_ctrl_c_after_the_last_trial_loses_nothing_and_the_exit_code_says_which(tmp_path):
    path = tmp_path / "late.yaml"
    path.write_text(yaml.safe_dump(TINY))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code, out = _sweep_until([str(path), "--tracking-uri", uri, "--storage-path", str(tmp_path / "tune"),
                              "--address", "local"], "[trial 1/1] completed", signal.SIGINT)
    assert "[trial 1/1] completed" in out, out  # the signal came after the last trial had ended
    assert code in (0, 130), out
    assert "Traceback" not in out, out
    client, runs = mlflow_runs(uri, "late")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    (child,) = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert (child.info.status, child.data.tags["status"]) == ("FINISHED", "completed")  # never undone
    assert [m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy")] == [1]
    (sweep_dir,) = (tmp_path / "tune").iterdir()
    state = json.loads((sweep_dir / "fedsweep_sweep.json").read_text())["status"]
    if code == 0:  # too late to matter: the sweep completed
        assert (parent.info.status, parent.data.tags["status"], state) == ("FINISHED", "completed", "completed")
        assert "best of 1 trial(s)" in out
    else:  # during the report: interrupted, and said so
        assert (parent.info.status, parent.data.tags["status"], state) == ("KILLED", "interrupted", "interrupted")
        assert "continue with: python -m platform.sweep --resume " in out
