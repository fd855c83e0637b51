"""Multi-objective sweeps end to end: real Ray Tune, real Optuna (multi-objective study), a real MLflow store."""
import json
import math
import warnings

import pytest
import yaml

from tests.conftest import REPO_ROOT, mlflow_runs, run_cli

BASE = {"rounds": 2, "clients": {"num_clients": 4, "clients_per_round": 4, "batch_size": 16}}
OBJECTIVES = [("val_accuracy", "max"), ("train_loss", "min")]


def write_space(tmp_path, name, parameters, search):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"description": "multi-objective test", "base": BASE, "parameters": parameters,
                                    "search": search, "resources": {"cpu": 1}}, sort_keys=False))
    return str(path)


def front_lines(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Pareto front of "))
    front = []
    for line in lines[start + 1:]:
        if not (line.startswith("  ") and " | " in line):
            break
        front.append(line)
    return front


def non_dominated(points: dict[str, tuple]) -> set[str]:
    """Brute force, independent of platform.sweep.pareto: keys whose point no other point beats (objectives: max, min)."""
    def beats(a, b):
        return a[0] >= b[0] and a[1] <= b[1] and (a[0] > b[0] or a[1] < b[1])
    return {k for k, p in points.items() if not any(beats(q, p) for q in points.values())}


def test_grid_multiobjective_logs_the_pareto_front(ray_local, tracking_uri, tmp_path, capsys):
    from platform.sweep.command import main

    path = write_space(tmp_path, "multi_grid", {"clients.lr": {"grid": [0.01, 0.05, 0.2]}},
                       {"searcher": "grid", "num_samples": 1, "metric": ["val_accuracy", "train_loss"], "seeds": [0]})
    rc = main([path, "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Pareto front of val_accuracy (max), train_loss (min)" in out  # modes resolved to the declared ones
    assert "round 2/2  val_accuracy " in out and "  train_loss " in out  # every objective on the per-round lines
    lines = front_lines(out)
    assert len(lines) >= 1
    for line in lines:
        assert line.startswith("  val_accuracy ") and "  train_loss " in line and "| clients.lr=" in line

    client, runs = mlflow_runs(tracking_uri, "multi_grid")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert parent.info.status == "FINISHED" and len(children) == 3
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"pareto_front.json", "pareto_front.csv", "pareto_front.png"} <= artifacts
    assert parent.data.metrics["pareto_size"] == len(lines)

    directory = client.download_artifacts(parent.info.run_id, "", str(tmp_path / "artifacts"))
    with open(f"{directory}/pareto_front.json") as fh:
        front = json.load(fh)
    with open(f"{directory}/pareto_front.png", "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(f"{directory}/pareto_front.csv") as fh:
        csv_lines = fh.read().strip().splitlines()
    assert csv_lines[0].startswith("trial,name,run_id,round,val_accuracy,") and len(csv_lines) == len(front) + 1

    finals = {c.info.run_id: (c.data.metrics["final_val_accuracy"], c.data.metrics["final_train_loss"])
              for c in children}
    assert {row["run_id"] for row in front} == non_dominated(finals)
    assert len(front) == len(lines)
    for row in front:
        child = next(c for c in children if c.info.run_id == row["run_id"])
        assert math.isclose(row["val_accuracy"], finals[row["run_id"]][0])
        assert math.isclose(row["train_loss"], finals[row["run_id"]][1])
        assert float(child.data.params["clients.lr"]) == row["params"]["clients.lr"] and row["round"] == 2
        assert "best_val_accuracy" in child.data.metrics and "best_train_loss" in child.data.metrics
    # every trial ranked, the front first in the console's order (the MLflow view sorts by rank)
    assert [row["run_id"] for row in front] == [c.info.run_id for c in sorted(children, key=lambda c: c.data.metrics[
        "rank"])][:len(front)]
    assert sorted(c.data.metrics["rank"] for c in children) == [1, 2, 3]
    printed = [float(line.split()[1]) for line in lines]
    assert printed == sorted(printed, reverse=True)  # the front by val_accuracy, its first objective


@pytest.mark.slow
def test_scenario_cells_rank_each_front_first(ray_local, tracking_uri, tmp_path, capsys):
    """With scenario cells, each cell ranks its own trials (1 = the first of its front, in the order the console
    prints the front); the MLflow view sorts by that rank."""
    from platform.sweep.command import main

    path = tmp_path / "multi_cells.yaml"
    path.write_text(yaml.safe_dump({"description": "multi-objective cells", "base": BASE,
                                    "scenarios": {"partition.alpha": [0.5, 5.0]},
                                    "parameters": {"clients.lr": {"grid": [0.01, 0.2]}},
                                    "search": {"searcher": "grid", "num_samples": 1, "seeds": [0],
                                               "metric": ["val_accuracy", "train_loss"]},
                                    "resources": {"cpu": 1}}, sort_keys=False))
    rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune")])
    out = capsys.readouterr().out
    assert rc == 0, out
    client, runs = mlflow_runs(tracking_uri, "multi_cells")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 4
    for alpha in ("0.5", "5.0"):
        cell = sorted((r for r in children if r.data.params["partition.alpha"] == alpha),
                      key=lambda r: r.data.metrics["rank"])
        assert [r.data.metrics["rank"] for r in cell] == [1, 2]
        finals = [(r.data.metrics["final_val_accuracy"], r.data.metrics["final_train_loss"]) for r in cell]
        (v1, l1), (v2, l2) = finals
        assert not (v2 >= v1 and l2 <= l1 and (v2 > v1 or l2 < l1))  # rank 2 never dominates rank 1
        assert v1 >= v2  # one front: by val_accuracy, its first objective; two layers: rank 1 dominates


@pytest.mark.slow
def test_tpe_multiobjective_runs(ray_local, tracking_uri, tmp_path, capsys):
    from platform.sweep.command import main

    path = write_space(tmp_path, "multi_tpe", {"clients.lr": {"loguniform": [0.01, 0.2]}},
                       {"searcher": "tpe", "num_samples": 3, "metric": ["val_accuracy", "train_loss"],
                        "mode": ["max", None], "seeds": [0]})
    rc = main([path, "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune")])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = front_lines(out)
    client, runs = mlflow_runs(tracking_uri, "multi_tpe")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert len(runs) == 4 and parent.data.metrics["pareto_size"] == len(lines) >= 1


def test_asha_with_two_metrics_is_refused(tmp_path):
    path = write_space(tmp_path, "multi_asha", {"clients.lr": {"grid": [0.01, 0.05]}},
                       {"searcher": "grid", "metric": ["val_accuracy", "train_loss"],
                        "scheduler": {"kind": "asha", "grace_period": 1}})
    proc = run_cli("platform.sweep", path, "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
                   "--storage-path", str(tmp_path / "tune"), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: search.scheduler.kind:"), proc.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "tune").exists()  # nothing written


@pytest.mark.slow
def test_fedaux_dp_epsilon_infinity_is_the_non_private_end_not_a_divergence(ray_local, tracking_uri, tmp_path,
                                                                           capsys):
    """in a fedaux_dp sweep with ε ∈ {0.4, ∞} no trial is diverged; ε = ∞ is on the front as "∞" (± 0 over
    its seeds, not "inf ± nan"), and MLflow holds it as a tag "∞", not the metric 1.797e308. Shrunk: one λ, one
    round, no pre-training, 8 clients, 2 seeds."""
    from platform.sweep.command import main

    with open(f"{REPO_ROOT}/search_spaces/fedaux_dp.yaml") as fh:
        space = yaml.safe_load(fh)
    for key in ("presets", "scenarios"):
        space.pop(key)
    space["base"].pop("pretrain")
    space["base"].update(rounds=1)
    space["base"]["clients"].update(num_clients=8, clients_per_round=4, local_epochs=1)
    space["base"]["algorithm"].update(distill_epochs=1)
    space["base"]["partition"].update(alpha=0.01)  # the setting (seeded) whose one round puts ε = ∞ on the front
    space["parameters"] = {"algorithm.epsilon": {"grid": [0.4, math.inf]}}
    space["search"].update(seeds=[0, 1])
    path = tmp_path / "fedaux_dp_inf.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune"),
                   "--cache-dir", str(tmp_path / "cache")])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    assert "diverged" not in out and "nan" not in out, out
    assert "NaN or Inf" not in out + err, err  # Tune's TensorBoard logger on an infinite result
    numpy = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not [m for m in numpy if "overflow" in m or "invalid value" in m], numpy
    assert "privacy_epsilon ∞ ± 0.0000" in out, out
    lines = front_lines(out)
    assert any("privacy_epsilon ∞" in line and "algorithm.epsilon=inf" in line for line in lines), lines

    client, runs = mlflow_runs(tracking_uri, "fedaux_dp_inf")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.tags["status"] for r in children) == ["completed", "completed"]
    private = next(r for r in children if r.data.params["algorithm.epsilon"] == "inf")
    assert private.data.tags["privacy_epsilon"] == "∞" and "privacy_epsilon" not in private.data.metrics
    assert private.data.metrics["privacy_epsilon_std"] == 0.0
