"""Scenario grids (a search space's ``scenarios:`` block): parsing, validation, cell enumeration, per-cell configs."""
import json
import os

import pytest
import yaml

from platform.errors import ConfigError, UserError
from platform.config.search_space import cell_label, cell_sampler_seed, load_search_space

BASE = {"dataset": {"name": "digits"}, "partition": {"kind": "dirichlet", "alpha": 0.5}, "rounds": 2,
        "clients": {"num_clients": 4, "clients_per_round": 4, "batch_size": 16}}


def write(tmp_path, scenarios, parameters=None, search=None, base=None, name="scen"):
    space = {"description": "scenario test", "base": base or BASE,
             "parameters": parameters if parameters is not None else {"clients.lr": {"loguniform": [0.01, 0.2]}},
             "search": search or {"searcher": "tpe", "num_samples": 3, "seeds": [0]}, "resources": {"cpu": 1}}
    if scenarios is not None:
        space["scenarios"] = scenarios
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return str(path)


def load_error(path, overrides=None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_search_space(path, overrides)
    assert "\n" not in str(info.value)  # one line
    return info.value


def test_cells_are_the_cross_product_first_key_slowest(tmp_path):
    space = load_search_space(write(tmp_path, {"partition.alpha": [10, 1, 0.1], "clients.batch_size": [16, 32]}))
    assert space.scenarios == {"partition.alpha": (10, 1, 0.1), "clients.batch_size": (16, 32)}
    assert space.cells() == [{"partition.alpha": a, "clients.batch_size": b} for a in (10, 1, 0.1) for b in (16, 32)]
    assert cell_label(space.cells()[3]) == "partition.alpha=1, clients.batch_size=32"


def test_a_space_without_scenarios_has_one_empty_cell(tmp_path):
    space = load_search_space(write(tmp_path, None))
    assert space.scenarios == {} and space.cells() == [{}]


def test_cell_space_builds_the_cells_config_with_its_own_sampler_seed(tmp_path):
    space = load_search_space(write(tmp_path, {"partition.alpha": [10, 0.01]}, search={
        "searcher": "tpe", "num_samples": 3, "seeds": [0, 1], "sampler_seed": 7}))
    seeds = set()
    for index, alpha in enumerate((10, 0.01)):
        cell = space.cell_space(index)
        assert cell.scenarios == {} and list(cell.parameters) == ["clients.lr"]
        assert cell.search.num_samples == 3 and cell.seeds == [0, 1]  # seeds stay replicates inside each trial
        assert cell.search.sampler_seed == cell_sampler_seed(7, index)
        seeds.add(cell.search.sampler_seed)
        config = cell.trial_config({"clients.lr": 0.03})
        assert config.partition.alpha == alpha and config.clients.lr == 0.03 and config.rounds == 2
    assert len(seeds) == 2  # no two cells draw from the same sampler stream
    assert space.trial_config({}).partition.alpha == 0.5  # the space's own base is untouched
    assert cell_sampler_seed(7, 0) != cell_sampler_seed(8, 0) and cell_sampler_seed(7, 1) != cell_sampler_seed(8, 0)


def test_expected_trials_count_every_cell(tmp_path):
    from platform.sweep.study import count_expected_trials

    tpe = load_search_space(write(tmp_path, {"partition.alpha": [10, 1, 0.1]}))
    assert count_expected_trials(tpe) == 9
    grid = load_search_space(write(tmp_path, {"partition.alpha": [10, 1]}, {"clients.lr": {"grid": [0.01, 0.1]}},
                                   {"searcher": "grid", "num_samples": 1}, name="grid"))
    assert count_expected_trials(grid) == 4  # each cell runs its own full grid


def test_when_on_a_scenario_key_keeps_the_parameter_only_where_it_holds(tmp_path):
    from platform.sweep.study import count_expected_trials

    path = write(tmp_path, {"algorithm.name": ["fedavg", "fedprox"]},
                 {"algorithm.mu": {"loguniform": [0.001, 1.0], "when": {"algorithm.name": "fedprox"}}},
                 {"searcher": "tpe", "num_samples": 3})
    space = load_search_space(path)
    fedavg, fedprox = space.cell_space(0), space.cell_space(1)
    assert fedavg.parameters == {} and (fedavg.search.searcher, fedavg.search.num_samples) == ("grid", 1)
    assert list(fedprox.parameters) == ["algorithm.mu"] and fedprox.parameters["algorithm.mu"].when == {}
    assert fedprox.search.searcher == "tpe" and count_expected_trials(space) == 1 + 3


def test_set_on_a_scenario_key_pins_that_dimension(tmp_path):
    space = load_search_space(write(tmp_path, {"partition.alpha": [10, 1]}), {"partition.alpha": 0.3})
    assert space.cells() == [{"partition.alpha": 0.3}]
    assert space.cell_space(0).trial_config({}).partition.alpha == 0.3


def test_set_on_a_swept_parameter_pins_it_instead_of_being_ignored(tmp_path):
    params = {"clients.lr": {"loguniform": [0.01, 0.2]}, "algorithm.name": {"choice": ["fedavg", "fedprox"]},
              "algorithm.mu": {"loguniform": [0.001, 1.0], "when": {"algorithm.name": "fedprox"}}}
    path = write(tmp_path, None, parameters=params)
    space = load_search_space(path, {"clients.lr": 0.07})
    assert "clients.lr" not in space.parameters  # the sampler no longer draws it ...
    assert space.trial_config({"algorithm.name": "fedavg"}).clients.lr == 0.07  # ... every trial runs the value
    prox = load_search_space(path, {"algorithm.name": "fedprox"})
    assert set(prox.parameters) == {"clients.lr", "algorithm.mu"}
    assert prox.parameters["algorithm.mu"].when == {}  # its condition holds for every trial now
    assert prox.trial_config({"clients.lr": 0.1, "algorithm.mu": 0.5}).algorithm.name == "fedprox"
    avg = load_search_space(path, {"algorithm.name": "fedavg"})
    assert set(avg.parameters) == {"clients.lr"}  # mu applies only to fedprox: dropped with its condition


def test_pinning_every_parameter_runs_the_base_once(tmp_path):
    space = load_search_space(write(tmp_path, None), {"clients.lr": 0.07}, num_samples=5)
    assert space.parameters == {}
    assert (space.search.searcher, space.search.num_samples) == ("grid", 1)


def test_a_pinned_parameter_is_pinned_in_every_scenario_cell(tmp_path):
    space = load_search_space(write(tmp_path, {"partition.alpha": [10, 1]}), {"clients.lr": 0.07})
    for index in range(2):
        cell = space.cell_space(index)
        assert "clients.lr" not in cell.parameters and cell.trial_config({}).clients.lr == 0.07


@pytest.mark.parametrize("scenarios, field, words", [
    ({"partition.alpha": []}, "scenarios.partition.alpha", "non-empty list"),
    ({"partition.alpha": 0.1}, "scenarios.partition.alpha", "non-empty list"),
    ({"partition.alpha": [1, 0.1, 1.0]}, "scenarios.partition.alpha", "twice"),
    ({"partition.alpha": [1, -0.1]}, "scenarios.partition.alpha", "value -0.1 is invalid"),
    ({"partition.alphaa": [1]}, "scenarios.partition.alphaa", "is invalid"),
    ({"clients.lr": [0.1, 0.2]}, "scenarios.clients.lr", "also a parameter"),
    ({"clients": [{"lr": 0.1}]}, "scenarios.clients", "overlaps clients.lr"),
    ({"seed": [1, 2]}, "scenarios.seed", "search.seeds"),
    ([1, 2], "scenarios", "must map"),
    ({}, "scenarios", "must map"),
])
def test_bad_scenarios_are_refused_naming_the_field(tmp_path, scenarios, field, words):
    err = load_error(write(tmp_path, scenarios))
    assert err.field == field and words in str(err), str(err)
    assert str(err).startswith(f"{field}: ")


def test_a_value_invalid_only_in_combination_names_the_scenario_and_the_cell(tmp_path):
    base = {**BASE, "partition": {"kind": "dirichlet"}}
    err = load_error(write(tmp_path, {"partition.kind": ["dirichlet", "iid"], "partition.equal_sizes": [False, True]},
                           base=base))
    assert err.field.startswith("scenarios.partition.") and "in cell partition.kind=iid, partition.equal_sizes=true" in str(err)


def test_parameter_values_are_checked_in_every_cell(tmp_path):
    err = load_error(write(tmp_path, {"clients.num_clients": [8, 4]},
                           {"clients.clients_per_round": {"choice": [4, 8]}}))
    assert err.field == "parameters.clients.clients_per_round"
    assert "in scenario cell clients.num_clients=4" in str(err) and "value 8 is invalid" in str(err)


def test_asha_rules_apply_to_every_cell(tmp_path):
    asha = {"searcher": "tpe", "num_samples": 2, "scheduler": {"kind": "asha", "grace_period": 3}}
    err = load_error(write(tmp_path, {"rounds": [6, 2]}, search=asha))
    assert err.field == "search.scheduler.grace_period" and "rounds=2" in str(err)

    fedpa = {**BASE, "algorithm": {"name": "fedpa", "burnin_rounds": 2}, "rounds": 30}
    burn = {"searcher": "tpe", "num_samples": 2,
            "scheduler": {"kind": "asha", "grace_period": 5, "burnin_margin": 0}}
    load_search_space(write(tmp_path, {"algorithm.burnin_rounds": [2, 4]}, base=fedpa, search=burn, name="ok"))
    err = load_error(write(tmp_path, {"algorithm.burnin_rounds": [2, 10]}, base=fedpa, search=burn, name="late"))
    assert err.field == "search.scheduler.grace_period" and "burn-in" in str(err)
    assert "in scenario cell algorithm.burnin_rounds=10" in str(err)


def test_selection_metric_is_checked_against_every_cells_algorithm(tmp_path):
    err = load_error(write(tmp_path, {"server.val_fraction": [0.1, 0.0]}, search={"metric": "val_accuracy"}))
    assert err.field == "search.metric" and "val_fraction" in str(err)


def test_the_cli_refuses_a_bad_scenario_in_one_line_before_writing_anything(tmp_path, capsys):
    from platform.sweep.command import main

    path = write(tmp_path, {"partition.alpha": [10, 0]})
    rc = main([path, "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--storage-path",
               str(tmp_path / "tune")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: scenarios.partition.alpha: value 0 is invalid")
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "tune").exists()


def test_resume_refuses_a_run_with_other_cells(tmp_path):
    from platform.sweep.state import STATE_FILE, check_resumable

    space = load_search_space(write(tmp_path, {"partition.alpha": [10, 1]}))
    run = tmp_path / "tune" / "scen-20260101-000000"
    os.makedirs(run)
    state = {"parent_run_id": "x", "scenarios": ["partition.alpha=10", "partition.alpha=1"], "cells_done": {}}
    (run / STATE_FILE).write_text(json.dumps(state))
    check_resumable(str(run), space)  # the same cells: fine
    (run / STATE_FILE).write_text(json.dumps({**state, "scenarios": ["partition.alpha=10"]}))
    with pytest.raises(UserError, match="--resume: .* has scenario cells partition.alpha=10, the space now has"):
        check_resumable(str(run), space)
    (run / STATE_FILE).write_text(json.dumps({"parent_run_id": "x"}))  # a run of the space before it had scenarios
    with pytest.raises(UserError, match="has no scenarios"):
        check_resumable(str(run), space)


def test_best_per_cell_table_has_one_row_per_cell(tmp_path):
    from platform.sweep.cells import cells_csv

    space = load_search_space(write(tmp_path, {"partition.alpha": [10, 0.1]}, search={"metric": "val_accuracy"}))
    rows = [{"cell": 1, "scenario": "partition.alpha=10", "values": {"partition.alpha": 10}, "sampler_seed": 5,
             "trials_finished": 3, "trials_failed": 0, "best_trial": "trial-002", "best_run_id": "r2", "round": 2,
             "val_accuracy": 0.9, "test_accuracy": 0.88, "test_loss": 0.4, "params": {"clients.lr": 0.05}},
            {"cell": 2, "scenario": "partition.alpha=0.1", "values": {"partition.alpha": 0.1}, "sampler_seed": 6,
             "trials_finished": 0, "trials_failed": 3}]
    lines = cells_csv(rows, space).strip().splitlines()
    assert lines[0] == ("cell,scenario,partition.alpha,sampler_seed,trials_finished,trials_failed,best_trial,"
                        "best_run_id,round,val_accuracy,val_accuracy_std,test_accuracy,test_accuracy_std,test_loss,"
                        "test_loss_std,lead,lead_se,lead_p,within_noise,best.clients.lr")
    assert lines[1] == "1,partition.alpha=10,10,5,3,0,trial-002,r2,2,0.9,,0.88,,0.4,,,,,,0.05"
    assert lines[2] == "2,partition.alpha=0.1,0.1,6,0,3,,,,,,,,,,,,,,"
