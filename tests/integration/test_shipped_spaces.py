"""Every shipped search space loads and builds every configuration of every scenario cell; each sweep asks one
question: scenario keys never reach the sampler, selection is on val_accuracy, seeds are replicates;
and a tiny copy of fedpa_shrinkage_burnin, run with real Ray Tune, Optuna and MLflow, reports one best ρ per
burn-in."""
import glob
import math
import os

import pytest
import yaml

from tests.conftest import REPO_ROOT, check_best_per_cell, mlflow_runs, run_tiny_sweep

SHIPPED = sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(f"{REPO_ROOT}/search_spaces/*.yaml"))
REWRITTEN = ["fedpa_shrinkage_burnin", "mnfl_rho", "fedaux_dp", "single_image_pruning", "fedkp_bandwidth"]


def _raw(name: str) -> dict:
    with open(f"{REPO_ROOT}/search_spaces/{name}.yaml") as fh:
        return yaml.safe_load(fh)


def _cell_configs(cell) -> list:
    """Every configuration the sweep can build in one cell: the whole grid (grid searcher), or the base and every
    candidate value of every parameter with its conditions (the others)."""
    from platform.config.search_space import grid_points

    if cell.search.searcher == "grid":
        return [cell.trial_config(point) for point in grid_points(cell)]
    configs = [cell.trial_config({})]
    for key, dist in cell.parameters.items():
        context = {k: (w[0] if isinstance(w, list) else w) for k, w in dist.when.items()}
        configs += [cell.trial_config({**context, key: value}) for value in dist.candidates]
    return configs


def test_the_rewritten_spaces_are_shipped():
    assert set(REWRITTEN) <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_space_loads_and_builds_every_cell(name):
    from platform.config.search_space import load_search_space

    space = load_search_space(name)
    assert not set(space.scenarios) & set(space.parameters)  # a scenario key never enters the sampler
    assert all(not k.startswith(s + ".") for k in space.parameters for s in space.scenarios)
    assert "val_accuracy" in space.search.metrics  # selected on validation (one objective of several at most)
    assert not any(m.startswith("test_") for m in space.search.metrics)
    assert dict(space.search.objectives)["val_accuracy"] == "max"
    cells = space.cells()
    assert len(cells) == math.prod(len(v) for v in space.scenarios.values())
    for index, cell in enumerate(cells):
        cell_space = space.cell_space(index)
        assert not cell_space.scenarios
        configs = _cell_configs(cell_space)
        for config in configs:
            for key, value in cell.items():  # the cell's value reaches every configuration built in it
                section, field = key.split(".", 1)
                target = (config.algorithm if key == "algorithm.name" else config.algorithm.params
                          if section == "algorithm" else getattr(config, section))
                assert getattr(target, field) == value, (name, key)


@pytest.mark.parametrize("name", REWRITTEN)
def test_the_rewritten_spaces_ask_one_question(name):
    from platform.config.search_space import load_search_space

    space = load_search_space(name)
    assert space.description.startswith("One question: ")
    for said in ("Held at the paper's values" if name in ("mnfl_rho", "fedaux_dp", "single_image_pruning")
                 else "Held at the thesis's", "Scaled", "val_accuracy", "never selected on"):
        assert said in space.description, (name, said)
    assert space.seeds == [0, 1, 2] and space.base.get("seed", 0) == 0
    assert "seed" not in space.scenarios and "seed" not in space.parameters


def test_fedpa_sweeps_rho_per_burn_in():
    from platform.config.search_space import grid_points, load_search_space

    space = load_search_space("fedpa_shrinkage_burnin")
    assert space.scenarios == {"algorithm.burnin_rounds": (12, 25, 37)}
    assert list(space.parameters) == ["algorithm.rho"]  # server lr, burn-in: held or scenario, never drawn
    assert space.search.searcher == "grid" and space.search.scheduler.kind == "none"
    assert space.search.metric == "val_accuracy"
    for index, burn_in in enumerate((12, 25, 37)):
        cell = space.cell_space(index)
        assert [p["algorithm.rho"] for p in grid_points(cell)] == [0.0, 0.001, 0.01, 0.1, 1.0]
        config = cell.trial_config({"algorithm.rho": 0.01})
        hp = config.algorithm.params
        assert (config.algorithm.name, hp.rho, hp.burnin_rounds, hp.weighting) == ("fedpa", 0.01, burn_in, "uniform")
        assert (config.server.lr, config.server.momentum) == (0.5, 0.0)  # Table 4.1
        assert (config.rounds, config.clients.local_epochs, config.clients.batch_size, config.clients.momentum) == \
            (50, 5, 16, 0.9)
        assert config.partition.kind == "lda" and config.partition.alpha == 0.1
        assert config.server.val_fraction > 0


def test_mnfl_rho_sweeps_rho_alone():
    from platform.config.search_space import grid_points, load_search_space

    space = load_search_space("mnfl_rho")
    assert space.scenarios == {} and list(space.parameters) == ["algorithm.rho"]
    assert [p["algorithm.rho"] for p in grid_points(space)] == [0.0, 0.01, 0.1, 0.3, 0.5, 0.7, 1.0, 3.0]
    assert space.search.searcher == "grid" and space.search.metric == "val_accuracy"
    config = space.trial_config({"algorithm.rho": 0.3})
    hp = config.algorithm.params
    assert config.algorithm.name == "mnfl"  # the baselines are benchmarks/mnfl_learning.py's question
    assert (hp.rho, hp.lam, hp.coefficient_lr, hp.distill_passes, hp.temperature) == (0.3, 1.0, 0.01, 1, 1.0)
    assert (config.clients.local_epochs, config.clients.batch_size, config.clients.lr) == (20, 128, 0.01)
    assert config.clients.clients_per_round == config.clients.num_clients == 12  # blocks of 3 of 4 architectures
    assert (config.partition.kind, config.partition.alpha, config.partition.min_per_class) == ("unequal_classes", 0.5, 5)
    assert config.partition.val_fraction == 0.2  # 13-20 images a client, 200 in all (tests/unit/test_default_signal.py)
    assert "benchmarks.mnfl_learning" in space.description and "cannot be seen in accuracy at this scale" in \
        space.description
    assert "benchmarks.mnfl_coefficients" in space.description  # c's distance from uniform, measured per rho


def test_fedaux_dp_sweeps_epsilon_per_lambda():
    from platform.config.search_space import grid_points, load_search_space

    space = load_search_space("fedaux_dp")
    assert space.scenarios == {"algorithm.lam": (0.001, 0.01, 0.1, 1.0)}
    assert list(space.parameters) == ["algorithm.epsilon"]  # δ and the distillation lr are held
    assert space.search.searcher == "grid" and space.search.scheduler.kind == "none"
    assert space.search.objectives == [("val_accuracy", "max"), ("privacy_epsilon", "min")]
    for index, lam in enumerate((0.001, 0.01, 0.1, 1.0)):
        cell = space.cell_space(index)
        assert [p["algorithm.epsilon"] for p in grid_points(cell)] == [0.01, 0.04, 0.1, 0.4, math.inf]
        hp = cell.trial_config({"algorithm.epsilon": 0.04}).algorithm.params
        assert (hp.lam, hp.epsilon, hp.delta, hp.distill_lr, hp.distill_epochs) == (lam, 0.04, 1e-5, 1e-3, 10)
    config = space.trial_config({"algorithm.epsilon": math.inf})
    # off chance: alpha 0.16 (Table III's grid), the paper's steps per round, Fig. 8's 10 rounds
    assert (config.partition.alpha, config.clients.local_epochs, config.rounds) == (0.16, 20, 10)


def test_single_image_arms_are_cells_with_their_own_knobs():
    from platform.config.search_space import load_search_space

    space = load_search_space("single_image_pruning")
    assert space.scenarios == {"algorithm.kmeans": (False, True), "algorithm.entropy": (False, True)}
    knobs = {"algorithm.distill_lr", "algorithm.distill_steps"}
    expected = [knobs, knobs | {"algorithm.entropy_rate"},
                knobs | {"algorithm.kmeans_k", "algorithm.kmeans_factor", "algorithm.kmeans_variant"},
                knobs | {"algorithm.entropy_rate", "algorithm.kmeans_k", "algorithm.kmeans_factor",
                         "algorithm.kmeans_variant", "algorithm.kmeans_keep_ratio"}]
    assert [set(space.cell_space(i).parameters) for i in range(4)] == expected
    assert space.search.metric == "val_accuracy" and space.search.searcher == "tpe"


@pytest.mark.slow
def test_a_tiny_fedpa_sweep_reports_one_best_rho_per_burn_in(ray_local, one_torch_thread, tracking_uri, tmp_path,
                                                            capsys):
    burn_ins, rhos = [1, 2], [0.0, 0.1]
    space = _raw("fedpa_shrinkage_burnin")
    space["scenarios"]["algorithm.burnin_rounds"] = burn_ins
    space["parameters"]["algorithm.rho"] = {"grid": rhos}
    space["search"]["seeds"] = [0]
    space["base"]["rounds"] = 3
    space["base"]["clients"].update({"num_clients": 4, "clients_per_round": 4, "local_epochs": 2})
    out = run_tiny_sweep(space, "fedpa_tiny", tracking_uri, tmp_path, capsys)
    assert "2 scenario cell(s) of algorithm.burnin_rounds (one study each), 4 trial(s)" in out

    client, runs = mlflow_runs(tracking_uri, "fedpa_tiny")
    children = check_best_per_cell(client, runs, "algorithm.burnin_rounds", burn_ins, "algorithm.rho", rhos,
                                   str(tmp_path / "artifacts"), cast=int)  # one best rho per burn-in, on validation
    assert all(r.data.tags["status"] == "completed" for r in children)  # no early stopping
    for burn_in in burn_ins:
        cell = [c for c in children if c.data.tags["fedsweep.scenario"] == f"algorithm.burnin_rounds={burn_in}"]
        assert all(c.data.params["algorithm.burnin_rounds"] == str(burn_in) for c in cell)
