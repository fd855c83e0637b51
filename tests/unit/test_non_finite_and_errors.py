"""Non-finite values are refused at load with one line naming the field; errors survive pickling (Ray sends a
trial's exception to the driver); a trial whose search metric ends NaN is diverged, never the best."""
import math
import pickle
from types import SimpleNamespace

import cloudpickle
import pytest

from platform.config.experiment import build_experiment
from platform.errors import ConfigError
from platform.config.search_space import parse_distribution


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_config_error_survives_pickling_whole(dumps):
    error = pickle.loads(dumps(ConfigError("partition.alpha", "must be > 0, got 0")))
    assert isinstance(error, ConfigError) and error.field == "partition.alpha"
    assert str(error) == "partition.alpha: must be > 0, got 0"


@pytest.mark.parametrize("config, message", [
    ({"partition": {"alpha": math.inf}}, "partition.alpha: must be a finite number, got inf"),
    ({"clients": {"weight_decay": math.inf}}, "clients.weight_decay: must be a finite number, got inf"),
    ({"clients": {"lr": math.nan}}, "clients.lr: must be a finite number, got nan"),
    ({"server": {"lr": -math.inf}}, "server.lr: must be a finite number, got -inf"),
])
def test_non_finite_values_are_refused_at_load(config, message):
    with pytest.raises(ConfigError) as caught:
        build_experiment(config)
    assert str(caught.value) == message


def test_a_field_that_means_something_by_inf_takes_it():
    """FedAUX's ε = inf is the non-private arm; NaN is still refused there."""
    public = {"source": "train_split"}
    assert build_experiment({"algorithm": {"name": "fedaux", "epsilon": math.inf}, "public": public}
                            ).algorithm.params.epsilon == math.inf
    with pytest.raises(ConfigError, match=r"algorithm.epsilon: must be a finite number \(or .inf\), got nan"):
        build_experiment({"algorithm": {"name": "fedaux", "epsilon": math.nan}, "public": public})


def test_search_space_ranges_must_be_finite():
    with pytest.raises(ConfigError, match=r"parameters.clients.lr.loguniform: bounds must be finite numbers"):
        parse_distribution("clients.lr", {"loguniform": [0.001, math.inf]})


def test_a_diverged_trial_is_never_the_best():
    from platform.sweep.study import ranked_results

    def result(value, error=None):
        return SimpleNamespace(error=error, metrics={"val_loss": value})

    grid = [result(0.5), result(math.nan), result(-math.inf), result(0.4), result(None, error=RuntimeError("x"))]
    ranked, diverged = ranked_results(grid, "val_loss")
    assert [r.metrics["val_loss"] for r in ranked] == [0.5, 0.4] and diverged == 2


def test_a_trial_ending_on_nan_is_tagged_diverged(tmp_path):
    """The Tune callback on a real SQLite MLflow store: a trial whose last search metric is NaN ends "diverged"
    (and FAIL in the Optuna record), not "completed"."""
    from mlflow.tracking import MlflowClient

    from platform.sweep.optuna_store import StudyRecorder, load_study
    from platform.config.search_space import load_search_space
    from platform.sweep.callback import MlflowSweepCallback
    from platform.results.tracking import Tracker

    uri, storage = f"sqlite:///{tmp_path / 'mlflow.db'}", f"sqlite:///{tmp_path / 'optuna.db'}"
    space = load_search_space("smoke", {}, None)
    tracker = Tracker(uri, "smoke")
    parent = tracker.start_run("sweep", {})
    callback = MlflowSweepCallback(tracker, parent, space, total_rounds=2, num_samples=2, quiet=True,
                                   study=StudyRecorder(storage, "s", space.search.objectives, space.parameters))
    for trial_id, last in (("nan", math.nan), ("fine", 0.8)):
        trial = SimpleNamespace(trial_id=trial_id, config={"params": {"algorithm.name": "fedavg", "clients.lr": 0.1}},
                                error_file=None)
        callback.on_trial_start(0, [], trial)
        for step, value in ((1, 0.5), (2, last)):
            callback.on_trial_result(0, [], trial, {"round": step, "val_accuracy": value})
        callback.on_trial_complete(0, [], trial)
    client = MlflowClient(uri)
    assert client.get_run(callback.runs["nan"]).data.tags["status"] == "diverged"
    assert client.get_run(callback.runs["fine"]).data.tags["status"] == "completed"
    assert [t.state.name for t in load_study(storage, "s").trials] == ["FAIL", "COMPLETE"]


def test_the_callback_keeps_only_ids_of_ended_trials(tmp_path):
    """Driver memory per trial: once a trial ended, the callback (pickled into Tune's experiment state) keeps its
    run id, name, number and last round, not its metrics or history."""
    import pickle

    from platform.config.search_space import load_search_space
    from platform.sweep.callback import MlflowSweepCallback
    from platform.results.tracking import Tracker

    space = load_search_space("smoke", {}, None)
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "smoke")
    callback = MlflowSweepCallback(tracker, tracker.start_run("sweep", {}), space, total_rounds=3, num_samples=20,
                                   quiet=True)
    sizes = []
    for i in range(20):
        trial = SimpleNamespace(trial_id=f"t{i}", config={"params": {"algorithm.name": "fedavg", "clients.lr": 0.1}},
                                error_file=None)
        callback.on_trial_start(0, [], trial)
        for step in (1, 2, 3):
            callback.on_trial_result(0, [], trial, {"round": step, "val_accuracy": 0.5, **{
                f"metric_{k}": float(k) for k in range(50)}})
        callback.on_trial_complete(0, [], trial)
        sizes.append(len(pickle.dumps(callback.get_state())))
    assert callback.history == {} and callback.best == {}
    assert all(entry == {"round": 3} for entry in callback.last.values())
    assert sizes[-1] - sizes[9] < 10 * 400  # a few hundred bytes of ids per ended trial, whatever it reported


def test_a_trial_restored_under_a_new_id_continues_the_run_made_for_it(tmp_path):
    """The callback's part on a real SQLite MLflow store: a driver creates runs for two trials and
    dies (its callback state is lost, as when Tune had not saved it); the next driver's Tune restores them under new
    ids. Each continues the run made for its configuration (round 1 not logged twice), the run's trial id becomes the
    new one, and a third trial of the same configuration, which the first driver never started, gets a run of its
    own. Runs a trial Tune knows by id are never taken."""
    from mlflow.tracking import MlflowClient

    from platform.config.search_space import load_search_space
    from platform.sweep.callback import MlflowSweepCallback
    from platform.results.tracking import Tracker

    space = load_search_space("smoke", {}, None)
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "smoke")
    parent = tracker.start_run("sweep", {})

    def trial(trial_id, lr):
        return SimpleNamespace(trial_id=trial_id, config={"params": {"algorithm.name": "fedavg", "clients.lr": lr}},
                               error_file=None)

    first = MlflowSweepCallback(tracker, parent, space, total_rounds=2, num_samples=3, quiet=True)
    for old in (trial("a_1", 0.1), trial("a_2", 0.2)):
        first.on_trial_start(0, [], old)
        first.on_trial_result(0, [], old, {"round": 1, "val_accuracy": 0.5})
    known = trial("a_9", 0.2)  # a trial of the same configuration that Tune knows by id: its run is its own
    first.on_trial_start(0, [], known)
    orphans = {first.runs["a_1"], first.runs["a_2"]}
    second = MlflowSweepCallback(Tracker(tracker.uri, "smoke"), parent, space, total_rounds=2, num_samples=3,
                                 quiet=True)
    restored = [trial("b_1", 0.1), trial("b_2", 0.2), trial("b_3", 0.2)]
    for new in restored:
        second.on_trial_start(0, [*restored, known], new)
        for step in (1, 2):
            second.on_trial_result(0, [], new, {"round": step, "val_accuracy": 0.5 + step / 10})
        second.on_trial_complete(0, [], new)
    assert {second.runs["b_1"], second.runs["b_2"]} == orphans
    assert second.runs["b_3"] not in orphans | {first.runs["a_9"]}
    client = MlflowClient(tracker.uri)
    for trial_id in ("b_1", "b_2", "b_3"):
        run = client.get_run(second.runs[trial_id])
        assert run.data.tags["fedsweep.trial_id"] == trial_id and run.data.tags["status"] == "completed"
        assert [m.step for m in client.get_metric_history(run.info.run_id, "val_accuracy")] == [1, 2]
