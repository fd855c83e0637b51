"""The sweep's MLflow view (its column order and widths) and the trials' run names, without a browser or Ray: the
view as ``platform.sweep.outputs`` publishes it (a stand-in MLflow client keeps the experiment tag), the names as the
sweep's callback gives them (a stand-in tracker keeps the runs). The real UI is checked at 1600 px in
``tests/integration/test_smoke_sweep.py``."""
import json
import math
import random
import re
from types import SimpleNamespace

import pytest

from platform.config.run_schema import TAG_SCENARIO, TAG_STATUS, TAG_STOPPED_EARLY
from platform.config.search_space import load_search_space
from platform.results.mlflow_ui import (NAME_WIDTH, RANK_WIDTH, SHARED_VIEW_TAG_PREFIX, VALUE_WIDTH, metric_order,
                                        sweep_view)
from platform.results.tracking import trial_run_name

NAME = "attributes.`Run Name`"


class _Client:
    """The two MlflowClient calls publish_sweep_view makes, on one experiment's tags."""

    def __init__(self):
        self.tags = {}

    def get_experiment(self, experiment_id):
        return SimpleNamespace(tags=dict(self.tags))

    def set_experiment_tag(self, experiment_id, key, value):
        self.tags[key] = value


def _published_view(space, by_rank: bool) -> dict:
    from platform.sweep.outputs import _publish_view

    client = _Client()
    tracker = SimpleNamespace(client=client, experiment_id="1", uri="sqlite:///unused.db")
    link = _publish_view(tracker, "parent0", space, by_rank=by_rank)
    key = re.search(r"viewStateShareKey=([^&]+)", link).group(1)
    return json.loads(client.tags[SHARED_VIEW_TAG_PREFIX + key])


def test_published_view_puts_rank_and_the_search_metric_next_to_the_run_names():
    """The smoke sweep's view, ranked: Run Name, rank, val_accuracy, the other metrics, then the params, then the
    tags -- the order in which the UI lays out the columns (the pinned ones aside) -- and sorted by rank."""
    space = load_search_space("smoke", {}, None)
    view = _published_view(space, by_rank=True)
    assert view["columnOrder"] == view["selectedColumns"] == [
        NAME, "metrics.`rank`", "metrics.`val_accuracy`", "metrics.`test_accuracy`",
        *(f"params.`{p}`" for p in space.parameters), f"tags.`{TAG_STATUS}`", f"tags.`{TAG_STOPPED_EARLY}`"]
    assert sorted(space.parameters) == ["algorithm.mu", "algorithm.name", "clients.lr"]
    assert (view["orderByKey"], view["orderByAsc"]) == ("metrics.`rank`", True)
    widths = view["columnWidths"]
    assert set(widths) == set(view["columnOrder"])
    assert widths[NAME] == NAME_WIDTH and widths["metrics.`rank`"] == RANK_WIDTH < VALUE_WIDTH
    assert widths["metrics.`val_accuracy`"] == VALUE_WIDTH


def test_published_view_without_a_rank_leads_with_the_sort_metric_and_its_std():
    """Not ranked (no best named): sorted by the search metric, which comes first, its seeds' std beside it; a space
    with scenarios adds the scenario keys (first among the params) and the scenario tag."""
    space = load_search_space("fedkp_bandwidth", {}, None)  # seeds 0-2: *_std columns; a scenario key
    view = _published_view(space, by_rank=False)
    order = view["columnOrder"]
    assert order[:5] == [NAME, "metrics.`val_accuracy`", "metrics.`val_accuracy_std`", "metrics.`test_accuracy`",
                         "metrics.`test_accuracy_std`"]
    assert order[5:] == ["params.`algorithm.name`", "params.`algorithm.bandwidth_scaling`", f"tags.`{TAG_STATUS}`",
                         f"tags.`{TAG_STOPPED_EARLY}`", f"tags.`{TAG_SCENARIO}`"]
    assert "metrics.`rank`" not in order and view["orderByKey"] == "metrics.`val_accuracy`"
    assert view["orderByAsc"] is False  # val_accuracy is maximised: best first


def test_metric_order_moves_rank_then_the_sort_metric_to_the_front():
    assert metric_order(["test_accuracy", "val_accuracy", "rank"], "val_accuracy") == [
        "rank", "val_accuracy", "test_accuracy"]
    assert metric_order(["test_accuracy", "val_loss"], "val_loss") == ["val_loss", "test_accuracy"]
    assert metric_order(["rank", "val_accuracy"], "rank") == ["rank", "val_accuracy"]
    assert metric_order(["val_accuracy"], "test_loss") == ["test_loss", "val_accuracy"]  # a sort key is a column
    view = sweep_view("p", ["a.b"], ["test_accuracy", "val_accuracy", "rank"], [], "val_accuracy", False)
    assert view["columnOrder"] == [NAME, "metrics.`rank`", "metrics.`val_accuracy`", "metrics.`test_accuracy`",
                                   "params.`a.b`"]


def test_run_names_round_to_4_significant_digits_behind_the_trial_number():
    smoke = load_search_space("smoke", {}, None)
    params = {"algorithm.name": "fedprox", "algorithm.mu": 5 / 6, "clients.lr": 0.18483120598659894}
    assert trial_run_name(params, smoke.parameters, number=3) == "#3 fedprox mu=0.8333 lr=0.1848"
    assert trial_run_name({"clients.lr": 1.23456e-5}, smoke.parameters, number=12) == "#12 lr=1.235e-05"
    # a scenario cell's values last, in brackets; a string stands alone there
    assert trial_run_name({"clients.lr": 0.05}, smoke.parameters, {"partition.alpha": 0.1}, "2.7") == (
        "#2.7 lr=0.05 [alpha=0.1]")
    fedkp = load_search_space("fedkp_bandwidth", {}, None).cell_space(1)
    assert trial_run_name({"algorithm.bandwidth_scaling": 0.05198123456}, fedkp.parameters,
                          {"algorithm.name": "fedkp_cm"}, "2.5") == "#2.5 bandwidth_scaling=0.05198 [fedkp_cm]"
    assert trial_run_name({}, {}, number=1) == "#1 base config"


@pytest.fixture
def forty_trials():
    """fedkp_bandwidth's 40 trials (2 cells x 20) named by the sweep's callback as each starts; a stand-in tracker
    keeps each run's name and params. Some draws agree to 4 significant digits, so only the numbers tell them
    apart."""
    from platform.sweep.callback import MlflowSweepCallback

    space = load_search_space("fedkp_bandwidth", {}, None)
    runs = {}

    def start_run(name, tags, parent_run_id=None):
        runs[f"run{len(runs)}"] = {"name": name, "params": {}, "tags": tags}
        return f"run{len(runs) - 1}"

    tracker = SimpleNamespace(
        start_run=start_run, log_params=lambda run_id, params: runs[run_id]["params"].update(params),
        set_tag=lambda *a: None, experiment_id="1",
        client=SimpleNamespace(search_runs=lambda *a, **k: []))
    rng = random.Random(7)
    cells = space.cells()
    for index, cell in enumerate(cells):
        cell_space = space.cell_space(index)
        info = {"number": index + 1, "cells": len(cells), "label": f"algorithm.name={cell['algorithm.name']}",
                "values": dict(cell), "sampler_seed": 0}
        callback = MlflowSweepCallback(tracker, "parent0", cell_space, 1, 20, quiet=True, cell=info)
        draws = [10 ** rng.uniform(-2, 1) for _ in range(18)] + [0.123451, 0.123456]  # both 0.1235 rounded
        for number, value in enumerate(draws):
            trial = SimpleNamespace(trial_id=f"c{index}t{number}",
                                    config={"params": {"algorithm.bandwidth_scaling": value}})
            callback.on_trial_start(0, [], trial)
    return list(runs.values())


def test_forty_trial_names_differ_at_their_start_and_keep_the_exact_values_in_the_params(forty_trials):
    assert len(forty_trials) == 40
    names = [run["name"] for run in forty_trials]
    assert len(set(names)) == 40, names
    # the number leads and is unique in the sweep: rows differ within a few characters of the Run Name column
    numbers = [name.split()[0] for name in names]
    assert len(set(numbers)) == 40 and all(re.fullmatch(r"#[12]\.\d{1,2}", n) for n in numbers), numbers
    for run in forty_trials:
        exact = run["params"]["algorithm.bandwidth_scaling"]
        assert isinstance(exact, float)  # the exact draw, not the rounded one
        assert re.fullmatch(r"#(\d)\.(\d+) bandwidth_scaling=(\S+) \[(fedkp|fedkp_cm)\]", run["name"]), run["name"]
        shown = run["name"].split("=")[1].split()[0]
        assert shown == f"{exact:.4g}" and math.isclose(float(shown), exact, rel_tol=5e-4), (shown, exact)
        assert len(shown.replace(".", "").lstrip("0")) <= 4
        # the cell after the value: the varying value is among the first characters
        assert run["name"].index("bandwidth_scaling=") < 8
        assert f"[{run['params']['algorithm.name']}]" in run["name"]
    twins = [run for run in forty_trials if run["name"].split("=")[1].startswith("0.1235 ")]
    assert len(twins) == 4 and len({run["params"]["algorithm.bandwidth_scaling"] for run in twins}) == 2
    assert len({run["name"] for run in twins}) == 4  # same rounded value, same cell: the number tells them apart
    # numbered in their order of start in their cell, as the console's "[cell 2/2, trial 3/20]"
    assert [n for n in numbers if n.startswith("#2.")] == [f"#2.{i}" for i in range(1, 21)]
