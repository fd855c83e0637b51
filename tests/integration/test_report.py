"""``python -m platform.report`` on a real tiny sweep (real Ray Tune, Optuna, SQLite MLflow store): the report's
numbers are the store's, its files are written and logged to the sweep's parent run."""
from __future__ import annotations

import math
import os

import numpy as np

from tests.conftest import mlflow_runs, run_cli, run_tiny_sweep

NAME = "report_tiny"
SPACE = {
    "description": "Does FedProx beat FedAvg on a four-client federation? Two rounds, two seeds: the report's check.",
    "base": {"rounds": 2, "clients": {"num_clients": 4, "clients_per_round": 4, "batch_size": 32, "momentum": 0.9}},
    "parameters": {  # a grid of 3 trials: fedavg at the base lr, fedprox at two lrs (inactive for fedavg)
        "algorithm.name": {"choice": ["fedavg", "fedprox"]},
        "clients.lr": {"grid": [0.03, 0.1], "when": {"algorithm.name": "fedprox"}},
    },
    "search": {"searcher": "grid", "num_samples": 1, "seeds": [0, 1], "metric": "val_accuracy",
               "scheduler": {"kind": "none"}},
    "resources": {"cpu": 1},
    "reference": {"source": "no paper: a made-up value", "note": "embedded digits",
                  "values": [{"label": "FedProx", "arm": {"algorithm.name": "fedprox"}, "metric": "test_accuracy",
                              "value": 0.5, "std": 0.01}]},
}


def _per_seed_or_mean(run, metric: str) -> tuple[float, float]:
    """(mean, population std) of a trial's metric over seeds, recomputed from the store: its per-seed values where
    it logged them, else the logged mean and std."""
    values = [v for k, v in run.data.metrics.items() if k.startswith(f"{metric}/seed_")]
    if values:
        return float(np.mean(values)), float(np.std(values))
    return run.data.metrics[metric], run.data.metrics[f"{metric}_std"]


def _tied_best(members: list) -> list:
    """The members with the top val_accuracy (more than one on a tie: the report may name any of them)."""
    top = max(_per_seed_or_mean(c, "val_accuracy")[0] for c in members)
    return [c for c in members if math.isclose(_per_seed_or_mean(c, "val_accuracy")[0], top)]


def _ablation_rows(markdown: str) -> dict[str, list[str]]:
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| `algorithm.name` |"))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("*").strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = cells
    return rows


def test_report_on_a_real_sweep(ray_local, one_torch_thread, tracking_uri, tmp_path, capsys):
    import pyarrow.parquet as pq

    from platform.results.sweep_artifacts import trials_table
    from platform.results.sweep_results import load_sweep

    console = run_tiny_sweep(SPACE, NAME, tracking_uri, tmp_path, capsys)
    client, runs = mlflow_runs(tracking_uri, NAME)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 3

    out = tmp_path / "report"
    result = run_cli("platform.report", NAME, "--tracking-uri", tracking_uri, "--out", str(out),
                     env={"FEDSWEEP_SEARCH_SPACES": str(tmp_path)}, timeout=120)
    assert result.returncode == 0, result.stderr
    for name in ("report.md", "report.html", "trials.csv", "trials.parquet", "learning_curves.png",
                 "sensitivity/algorithm.name.png", "sensitivity/clients.lr.png"):
        assert (out / name).is_file(), name
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/report.md", "report/report.html", "report/learning_curves.png", "report/sensitivity"} <= logged

    markdown = (out / "report.md").read_text()
    rows = _ablation_rows(markdown)
    assert sorted(rows) == ["fedavg", "fedprox"]
    for arm, row in rows.items():
        members = [c for c in children if c.data.params["algorithm.name"] == arm]
        best = next((c for c in _tied_best(members) if c.info.run_id[:8] in row[1]), None)  # any of the tied best
        assert best is not None and row[-1] == str(len(members)) and row[-2] == "2", row
        for column, metric in ((3, "val_accuracy"), (4, "test_accuracy")):
            mean, std = _per_seed_or_mean(best, metric)
            assert row[column].lstrip("★ ") == f"{mean:.4f} ± {std:.4f}"
    fedprox = _tied_best([c for c in children if c.data.params["algorithm.name"] == "fedprox"])
    line = "| FedProx | algorithm.name=fedprox | `test_accuracy` | 0.5000 ± 0.0100 | {:.4f} ± {:.4f} | 2 |"
    assert any(line.format(*_per_seed_or_mean(c, "test_accuracy")) in markdown for c in fedprox), \
        markdown  # the reference value next to ours (any of the tied best's)

    _check_one_order(client, tracking_uri, parent, children, console, markdown)

    # The sweep-level table and plots, logged by the sweep itself when it ended (platform.sweep.outputs)
    parent_id = parent.info.run_id
    assert {a.path for a in client.list_artifacts(parent_id, "trials")} == {"trials/trials.csv", "trials/trials.parquet"}
    assert {a.path for a in client.list_artifacts(parent_id, "sensitivity")} == {
        "sensitivity/algorithm.name.png", "sensitivity/clients.lr.png"}
    table = pq.read_table(client.download_artifacts(parent_id, "trials/trials.parquet", str(tmp_path)))
    assert table.equals(trials_table(load_sweep(tracking_uri, parent.info.run_id)))
    per_seed = any("/seed_" in k for c in children for k in c.data.metrics)
    assert table.num_rows == (3 * 2 if per_seed else 3)
    assert os.path.getsize(out / "report.html") > os.path.getsize(out / "learning_curves.png")  # PNGs embedded


def _check_one_order(client, tracking_uri: str, parent, children: list, console: str, markdown: str) -> None:
    """The console, the report and the MLflow view name the same best, in the same order: the report's
    best is the parent's best_trial_run_id with the console's lead line word for word, and the child runs' ``rank``
    metric (the view's sort key) is the report's ranking."""
    import json

    from platform.results.report_ranking import ranked_rows
    from platform.results.sweep_artifacts import trial_frame, trials_table
    from platform.results.sweep_results import load_sweep

    best_id = parent.data.tags["best_trial_run_id"]
    lead = next(line.strip() for line in console.splitlines() if line.strip().startswith("lead over the runner-up"))
    named = next(line for line in markdown.splitlines() if line.startswith("Best: "))
    assert named.startswith(f"Best: **{next(c for c in children if c.info.run_id == best_id).info.run_name} "
                            f"(`{best_id[:8]}`)**") and named.endswith(f"; {lead}."), (named, console)
    assert sum(line.startswith("- `val_accuracy` ") for line in markdown.splitlines()) == 2  # one per parameter
    results = load_sweep(tracking_uri, parent.info.run_id)
    report_order = [r["run_id"] for r in ranked_rows(trial_frame(trials_table(results)).to_dict("records"),
                                                      results.objective)]
    assert sorted(c.data.metrics["rank"] for c in children) == [1, 2, 3]
    assert report_order == [c.info.run_id for c in sorted(children, key=lambda c: c.data.metrics["rank"])]
    listed = client.search_runs([parent.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = "
                                f"'{parent.info.run_id}'", order_by=["metrics.`rank` ASC"])
    assert [r.info.run_id for r in listed] == report_order  # the store's own sort, as the view asks for it
    view = json.loads(client.get_experiment(parent.info.experiment_id).tags[
        f"mlflow.sharedViewState.fedsweep-{parent.info.run_id}"])
    assert view["orderByKey"] == "metrics.`rank`" and view["orderByAsc"] is True
