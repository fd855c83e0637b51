"""``Algorithm.report_arrays`` through the platform: real Ray, a real (SQLite) MLflow store, heat-map and CSV artifacts
``arrays/<name>/round_<r>.{png,csv}`` every ``tracking.arrays_every`` rounds and after the last, for ``platform.run``
and for a sweep (where the driver's callback logs what the trial reported).

The probe method below is FedAvg plus a 3×3 array that encodes the round; workers import it by path.
"""
from __future__ import annotations

import numpy as np
import torch
import yaml

from algorithms.base import ServerState, register
from algorithms.fedavg import FedAvg

PROBE = "tests.integration.test_arrays_tracking:ArrayProbe"


@register
class ArrayProbe(FedAvg):
    """FedAvg reporting ``probe[i, j] = 3 i + j + round`` (and nothing else)."""

    name = "array_probe"

    def report_arrays(self, state: ServerState) -> dict[str, torch.Tensor]:
        return {"probe": torch.arange(9, dtype=torch.float64).reshape(3, 3) + state.round}


BASE = {"dataset": {"name": "digits"}, "algorithm": {"name": PROBE}, "rounds": 3,
        "clients": {"num_clients": 4, "clients_per_round": 4, "batch_size": 32, "lr": 0.05},
        "tracking": {"arrays_every": 2}, "resources": {"cpu": 1}}
EXPECTED_ROUNDS = [2, 3]  # every 2 rounds, and the last (3)


def _check_arrays(client, run_id, tmp_path, rounds=EXPECTED_ROUNDS) -> None:
    assert [f.path for f in client.list_artifacts(run_id, "arrays")] == ["arrays/probe"]
    files = sorted(f.path for f in client.list_artifacts(run_id, "arrays/probe"))
    assert files == sorted(f"arrays/probe/round_{r}.{ext}" for r in rounds for ext in ("csv", "png")), files
    for r in rounds:
        local = client.download_artifacts(run_id, f"arrays/probe/round_{r}.csv", str(tmp_path))
        np.testing.assert_array_equal(np.loadtxt(local, delimiter=",", ndmin=2), np.arange(9).reshape(3, 3) + r)
        png = client.download_artifacts(run_id, f"arrays/probe/round_{r}.png", str(tmp_path))
        with open(png, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_platform_run_logs_the_arrays_on_the_run(ray_local, tracking_uri, tmp_path, capsys):
    from platform.run import main
    from tests.conftest import mlflow_runs

    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(BASE))
    rc = main([str(path), "--tracking-uri", tracking_uri, "--experiment", "arrays"])
    out = capsys.readouterr().out
    assert rc == 0, out
    client, runs = mlflow_runs(tracking_uri, "arrays")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    run = runs[0]
    _check_arrays(client, run.info.run_id, tmp_path)
    assert not any(k.startswith("_") for k in run.data.metrics)  # the arrays are no metric
    assert run.data.params["tracking.arrays_every"] == "2"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "test_accuracy")] == [1, 2, 3]


def test_sweep_logs_each_trials_arrays_on_its_child_run(ray_local, tracking_uri, tmp_path, capsys):
    from platform.sweep.command import main
    from tests.conftest import mlflow_runs

    base = {k: v for k, v in BASE.items() if k != "resources"}  # a search space sets them at its top level
    space = {"description": "arrays probe", "base": base, "parameters": {"clients.lr": {"grid": [0.05]}},
             "search": {"searcher": "grid", "num_samples": 1, "seeds": [0], "metric": "val_accuracy"},
             "resources": {"cpu": 1}}
    path = tmp_path / "arrays_sweep.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune"), "--quiet"])
    captured = capsys.readouterr()
    assert rc == 0, captured.out + captured.err
    client, runs = mlflow_runs(tracking_uri, "arrays_sweep")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(runs) == 2 and len(children) == 1 and all(r.info.status == "FINISHED" for r in runs)
    child = children[0]
    _check_arrays(client, child.info.run_id, tmp_path)
    assert not any(k.startswith("_") for k in child.data.metrics)
    assert child.data.metrics["rounds_completed"] == 3
