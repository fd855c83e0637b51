"""A scenario sweep end to end: real Ray Tune, real Optuna, a real MLflow store. One study per cell, all under one
parent run: the trials per cell, one best per cell, and cells that do not share sampler history."""
import csv
import json
import math

import yaml

from tests.conftest import mlflow_runs

ALPHAS = [10, 0.1]
LR = (0.01, 0.2)
SPACE = {  # the smoke space's base, made tiny: digits, 4 clients, one round
    "description": "scenario test",
    "base": {"dataset": {"name": "digits"}, "partition": {"kind": "dirichlet", "alpha": 0.5}, "model": {"name": "cnn"},
             "algorithm": {"name": "fedavg"}, "rounds": 1, "seed": 0,
             "clients": {"num_clients": 4, "clients_per_round": 4, "local_epochs": 1, "batch_size": 16, "lr": 0.05,
                         "momentum": 0.9}},
    "scenarios": {"partition.alpha": ALPHAS},
    "parameters": {"clients.lr": {"loguniform": list(LR)}},
    "search": {"searcher": "tpe", "num_samples": 2, "metric": "val_accuracy", "seeds": [0], "sampler_seed": 0,
               "max_concurrent_trials": 2},
    "resources": {"cpu": 1},
}


def fresh_draws(seed: int, count: int) -> list[float]:
    """The first ``count`` values of clients.lr that a TPE sampler seeded with ``seed`` suggests in a study of its
    own (told each result, as Tune's Optuna searcher does)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    values = []
    for _ in range(count):
        trial = study.ask()
        values.append(trial.suggest_float("clients.lr", *LR, log=True))
        study.tell(trial, 0.5)
    return values


def test_each_cell_is_a_study_of_its_own(ray_local, one_torch_thread, tracking_uri, tmp_path, capsys):
    from platform.config.search_space import cell_sampler_seed
    from platform.sweep.command import main

    path = tmp_path / "scen.yaml"
    path.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    args = [str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune")]
    rc = main(args)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "2 scenario cell(s) of partition.alpha (one study each), 4 trial(s)" in out

    client, runs = mlflow_runs(tracking_uri, "scen")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 4
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.data.params["scenario.partition.alpha"] == "[10, 0.1]"
    # one Optuna study per cell, named by the sweep and the cell's values; its plots under optuna/cell-NNN
    import optuna

    studies = parent.data.tags["fedsweep.optuna_studies"].split(",")
    sweep_id = studies[0].split("/")[0]
    assert sweep_id.startswith("scen-") and studies == [f"{sweep_id}/alpha=10", f"{sweep_id}/alpha=0.1"]
    storage = parent.data.tags["fedsweep.optuna_storage"]
    assert [len(optuna.load_study(study_name=s, storage=storage).trials) for s in studies] == [2, 2]
    assert [a.path for a in client.list_artifacts(parent.info.run_id, "optuna")] == ["optuna/cell-001",
                                                                                      "optuna/cell-002"]

    # two trials per cell, each child tagged with its cell; the scenario value is in the config, not the sampler
    by_cell = {}
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id and child.info.status == "FINISHED"
        by_cell.setdefault(child.data.tags["fedsweep.scenario"], []).append(child)
        assert "partition.alpha" not in child.data.tags["fedsweep.sampled"]
    assert sorted(by_cell) == ["partition.alpha=0.1", "partition.alpha=10"]
    seeds = []
    for index, alpha in enumerate(ALPHAS):
        cell = by_cell[f"partition.alpha={alpha}"]
        assert len(cell) == 2
        assert {c.data.tags["fedsweep.scenario_cell"] for c in cell} == {str(index + 1)}
        assert all(float(c.data.params["partition.alpha"]) == alpha for c in cell)
        seed = {c.data.tags["fedsweep.sampler_seed"] for c in cell}
        assert seed == {str(cell_sampler_seed(0, index))}
        seeds.append(int(seed.pop()))
        # no shared sampler history: the cell's values are exactly the first two draws of a fresh sampler with the
        # cell's seed; a sampler shared with the cell before would have continued its stream instead
        values = sorted(float(c.data.params["clients.lr"]) for c in cell)
        assert values == sorted(fresh_draws(seeds[-1], 2)), (alpha, values)
        if index:
            assert values != sorted(fresh_draws(seeds[0], 4)[2:])
    assert len(set(seeds)) == 2

    # one best per cell: printed, on the parent run's table and metrics, and it is the cell's best child
    lines = [line for line in out.splitlines() if line.startswith("  cell ")]
    assert len(lines) == 2 and lines[0].startswith("  cell 1/2 partition.alpha=10: val_accuracy ")
    assert lines[1].startswith("  cell 2/2 partition.alpha=0.1: val_accuracy ")
    assert all("test_accuracy" in line and "(2 finished, 0 failed) | clients.lr=" in line for line in lines)
    directory = client.download_artifacts(parent.info.run_id, "scenarios", str(tmp_path / "artifacts"))
    with open(f"{directory}/best_per_cell.csv") as fh:
        table = list(csv.DictReader(fh))
    with open(f"{directory}/best_per_cell.json") as fh:
        rows = json.load(fh)
    assert len(table) == 2 and len(rows) == 2
    for index, (alpha, line, row) in enumerate(zip(ALPHAS, table, rows)):
        cell = by_cell[f"partition.alpha={alpha}"]
        best = max(cell, key=lambda c: c.data.metrics["final_val_accuracy"])
        assert float(line["partition.alpha"]) == alpha and line["trials_finished"] == "2"
        assert line["best_run_id"] == best.info.run_id and int(line["sampler_seed"]) == seeds[index]
        ranks = {c.data.metrics["rank"]: c.info.run_id for c in cell}  # ranked per cell: the MLflow view's order
        assert sorted(ranks) == [1, 2] and ranks[1] == line["best_run_id"]
        assert math.isclose(float(line["val_accuracy"]), best.data.metrics["final_val_accuracy"])
        assert math.isclose(float(line["test_accuracy"]), best.data.metrics["final_test_accuracy"])
        assert math.isclose(float(line["best.clients.lr"]), float(best.data.params["clients.lr"]))
        assert row["values"] == {"partition.alpha": alpha} and row["trials_finished"] == 2
        assert math.isclose(parent.data.metrics[f"cell_0{index + 1}/best_val_accuracy"],
                            best.data.metrics["final_val_accuracy"])
    assert parent.data.metrics["trials_completed"] == 4

    # a completed sweep is not resumed (its parent stays FINISHED) ...
    assert main([*args, "--resume"]) == 2
    assert "--resume: no unfinished sweep of 'scen'" in capsys.readouterr().err
    # ... but one interrupted after its cells finished skips every cell: the same bests, no new trial
    from platform.sweep.state import STATE_FILE

    (sweep_dir,) = (tmp_path / "tune").iterdir()
    state = json.loads((sweep_dir / STATE_FILE).read_text())
    assert state["status"] == "completed" and state["invocation"]["name"] == args[0]
    (sweep_dir / STATE_FILE).write_text(json.dumps({**state, "status": "interrupted"}))
    rc = main([*args, "--resume"])
    again = capsys.readouterr().out
    assert rc == 0, again
    assert again.count("finished in the interrupted run, skipped") == 2
    assert [line for line in again.splitlines() if line.startswith("  cell ")] == lines
    _, runs = mlflow_runs(tracking_uri, "scen")
    assert len(runs) == 5 and all(r.info.status == "FINISHED" for r in runs)
