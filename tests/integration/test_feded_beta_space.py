"""The feded_beta search space asks one question: FedED-w2's β on the thesis's grid, one study per
Dirichlet α, seeds 1–10 that also seed the partition, selected on val_accuracy; and a tiny copy of it, run with real
Ray Tune, Optuna and MLflow, reports one best β per α."""

import pytest
import yaml

from tests.conftest import REPO_ROOT, check_best_per_cell, mlflow_runs, run_tiny_sweep

ALPHAS = [10.0, 1.0, 0.1, 0.01]
BETAS = [1, 2, 3, 4, 5, 6, 7]
SEEDS = list(range(1, 11))


def _raw(name: str) -> dict:
    with open(f"{REPO_ROOT}/search_spaces/{name}.yaml") as fh:
        return yaml.safe_load(fh)


def test_feded_beta_loads_as_one_question():
    from algorithms.feded import FedED, FedEDHyperparams
    from platform.runtime.seeding import replicate_over_seeds
    from platform.config.search_space import grid_points, load_search_space

    space = load_search_space("feded_beta")
    assert space.scenarios == {"partition.alpha": tuple(ALPHAS)} and len(space.cells()) == 4
    assert list(space.parameters) == ["algorithm.beta"]  # nothing else is drawn beside β
    beta = space.parameters["algorithm.beta"]
    assert beta.kind == "grid" and list(beta.args) == BETAS
    assert space.search.searcher == "grid" and space.search.num_samples == 1
    assert space.search.metric == "val_accuracy" and space.search.mode == "max"
    assert space.seeds == SEEDS
    for index, alpha in enumerate(ALPHAS):
        cell = space.cell_space(index)
        assert [p["algorithm.beta"] for p in grid_points(cell)] == BETAS  # every cell runs the whole grid
        config = cell.trial_config({"algorithm.beta": 3})
        hp = config.algorithm.params
        assert config.partition.alpha == alpha and config.algorithm.name == "feded" and hp.beta == 3.0
        assert (hp.scheme, hp.loss, hp.public_size) == ("w2", "mse_logits", None)
        # the student schedule scaled to digits: lr 1e-3 for 2000 steps; the algorithm keeps the thesis's
        assert (hp.student_lr, hp.student_steps) == (1e-3, 2000)
        assert FedEDHyperparams().student_lr is None and FedED(FedEDHyperparams()).student_lr() == 1e-5
        # FedED's client defaults are the thesis's; the base sets the digits scaling explicitly and it wins
        c = config.clients
        assert (c.local_epochs, c.batch_size, c.optimizer, c.lr, c.momentum) == (20, 16, "sgd", 0.05, 0.9)
        assert config.server.val_fraction > 0 and config.mode == "one_round"
        # the partition seed of replicate s is s itself, as the authors' code seeds its Dirichlet split
        assert config.seeds.partition_from_seed and config.seeds.partition is None
        assert [c.stream_seed("partition") for c in replicate_over_seeds(config, space.seeds)] == SEEDS
    for said in ("mse_logits", "val_accuracy", "feded_beta_continuous", "student_lr 1e-3", "student_steps 2000",
                 "student_val_agreement", "within 3 points", "ensemble_w2_accuracy", "benchmarks.feded_learning"):
        assert said in space.description, said


def test_the_continuation_differs_only_in_beta():
    from platform.config.search_space import load_search_space

    grid, continuous = _raw("feded_beta"), _raw("feded_beta_continuous")
    assert continuous["base"] == grid["base"] and continuous["scenarios"] == grid["scenarios"]
    assert continuous["resources"] == grid["resources"]
    assert {k: v for k, v in continuous["search"].items() if k not in ("searcher", "num_samples")} == \
        {k: v for k, v in grid["search"].items() if k not in ("searcher", "num_samples")}
    space = load_search_space("feded_beta_continuous")
    assert list(space.parameters) == ["algorithm.beta"] and space.search.searcher == "tpe"
    beta = space.parameters["algorithm.beta"]
    assert beta.kind == "loguniform" and beta.args == (0.5, 10.0)
    assert len(space.cells()) == 4 and space.seeds == SEEDS and space.search.metric == "val_accuracy"


@pytest.mark.slow
def test_a_tiny_feded_beta_reports_one_best_beta_per_alpha(ray_local, one_torch_thread, tracking_uri, tmp_path,
                                                           capsys):
    alphas, betas = [10.0, 0.01], [1, 6]
    space = _raw("feded_beta")
    space["scenarios"]["partition.alpha"] = alphas
    space["parameters"]["algorithm.beta"] = {"grid": betas}
    space["search"]["seeds"] = [1]
    space["base"]["clients"].update({"num_clients": 4, "clients_per_round": 4, "local_epochs": 1})
    space["base"]["algorithm"].update({"ae_epochs": 1, "student_steps": 5})
    out = run_tiny_sweep(space, "feded_beta_tiny", tracking_uri, tmp_path, capsys)
    assert "2 scenario cell(s) of partition.alpha (one study each), 4 trial(s)" in out

    client, runs = mlflow_runs(tracking_uri, "feded_beta_tiny")
    children = check_best_per_cell(client, runs, "partition.alpha", alphas, "algorithm.beta", betas,
                                   str(tmp_path / "artifacts"))  # one best beta per alpha, on validation
    assert all(r.data.params["seeds.partition_from_seed"] == "True" for r in children)
    lines = [line for line in out.splitlines() if line.startswith("  cell ")]
    assert len(lines) == 2 and all(" val_accuracy " in line and "algorithm.beta=" in line for line in lines)
