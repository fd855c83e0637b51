"""ε = ∞ (the non-private arm of fedaux_dp) is a value, not a divergence: the divergence rule, the std over seeds,
how MLflow records it (a tag reading "∞", never 1.797e308) and read back, the console, the Pareto front and its
plot, all without NaN or overflow warnings."""
import math
import warnings
from types import SimpleNamespace

import pytest

from platform.config.run_schema import INFINITY, diverged, figure, seed_std, setting_metrics


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's overflow or invalid value fails the test
        yield


def test_privacy_epsilon_is_a_setting_and_an_infinite_setting_is_not_a_divergence():
    settings = setting_metrics()
    assert {"privacy_epsilon", "privacy_delta"} <= settings and "val_accuracy" not in settings
    names = ["val_accuracy", "privacy_epsilon"]
    assert not diverged({"val_accuracy": 0.7, "privacy_epsilon": math.inf}, names, settings)
    assert diverged({"val_accuracy": math.nan, "privacy_epsilon": math.inf}, names, settings)
    assert diverged({"val_accuracy": 0.7, "privacy_epsilon": math.nan}, names, settings)  # NaN is never a value
    assert diverged({"val_loss": math.inf}, ["val_loss"], settings)  # a measured metric that blew up
    assert not diverged({"val_loss": 0.3}, ["val_loss", "absent"], settings)


def test_the_std_of_equal_infinities_is_zero(no_warnings):
    assert seed_std([math.inf, math.inf, math.inf]) == 0.0
    assert seed_std([0.4, 0.4]) == 0.0
    assert seed_std([1.0, 2.0]) == 0.5
    assert math.isnan(seed_std([math.inf, 1.0])) and math.isnan(seed_std([math.nan, math.nan]))


def test_a_trial_summarises_epsilon_infinity_over_seeds_without_nan(no_warnings):
    from platform.runtime.trial import summarise_seeds

    per_seed = [{"round": 3, "val_accuracy": a, "privacy_epsilon": math.inf} for a in (0.5, 0.7)]
    out = summarise_seeds(per_seed)
    assert out["privacy_epsilon"] == math.inf and out["privacy_epsilon_std"] == 0.0
    assert out["val_accuracy_std"] == pytest.approx(0.1)


def test_figures_show_infinity():
    assert (figure(math.inf), figure(-math.inf), figure(0.83333333), figure(math.nan)) == ("∞", "-∞", "0.8333", "nan")


def test_epsilon_infinity_is_completed_logged_as_a_tag_and_read_back(tmp_path, capsys, no_warnings):
    """The Tune callback on a real SQLite MLflow store, on one cell of fedaux_dp (objectives val_accuracy,
    privacy_epsilon): the ε = ∞ trial is "completed" (and COMPLETE in the Optuna study), its ε a tag "∞" (no
    1.797e308 metric), its std 0; the sweep's read-back holds ε = ∞ again."""
    from mlflow.tracking import MlflowClient

    from platform.config.search_space import load_search_space
    from platform.results.sweep_results import trial_row
    from platform.results.tracking import Tracker
    from platform.sweep.callback import MlflowSweepCallback
    from platform.sweep.optuna_store import StudyRecorder, load_study

    uri, storage = f"sqlite:///{tmp_path / 'mlflow.db'}", f"sqlite:///{tmp_path / 'optuna.db'}"
    space = load_search_space("fedaux_dp", {}, None).cell_space(0)
    tracker = Tracker(uri, "fedaux_dp")
    parent = tracker.start_run("sweep", {})
    callback = MlflowSweepCallback(tracker, parent, space, total_rounds=1, num_samples=2, quiet=False,
                                   study=StudyRecorder(storage, "s", space.search.objectives, space.parameters))
    for epsilon in (0.4, math.inf):
        trial = SimpleNamespace(trial_id=str(epsilon), config={"params": {"algorithm.epsilon": epsilon}},
                                error_file=None)
        callback.on_trial_start(0, [], trial)
        callback.on_trial_result(0, [], trial, {"round": 1, "val_accuracy": 0.5, "val_accuracy_std": 0.1,
                                                "privacy_epsilon": epsilon, "privacy_epsilon_std": 0.0,
                                                "privacy_epsilon/seed_0": epsilon})
        callback.on_trial_complete(0, [], trial)
    out = capsys.readouterr().out
    assert "diverged" not in out and "nan" not in out
    assert f"privacy_epsilon {INFINITY} ± 0.0000" in out and f"completed  val_accuracy 0.5000  privacy_epsilon ∞" in out
    client = MlflowClient(uri)
    run = client.get_run(callback.runs["inf"])
    assert run.data.tags["status"] == "completed"
    assert run.data.tags["privacy_epsilon"] == INFINITY and run.data.tags["final_privacy_epsilon"] == INFINITY
    assert "privacy_epsilon" not in run.data.metrics and "final_privacy_epsilon" not in run.data.metrics
    assert run.data.metrics["privacy_epsilon_std"] == 0.0
    assert [t.state.name for t in load_study(storage, "s").trials] == ["COMPLETE", "COMPLETE"]
    read = trial_row(run, {}, {}, (0,))
    assert read.metrics["privacy_epsilon"] == math.inf and read.per_seed("privacy_epsilon") == {0: math.inf}
    finite = client.get_run(callback.runs["0.4"])
    assert finite.data.metrics["privacy_epsilon"] == 0.4 and "privacy_epsilon" not in finite.data.tags


def test_the_pareto_front_and_its_plot_put_epsilon_infinity_at_the_non_private_end(tmp_path, no_warnings):
    from platform.results.sweep_artifacts import infinity_position
    from platform.sweep.pareto import front_plot, pareto_front

    objectives = [("val_accuracy", "max"), ("privacy_epsilon", "min")]
    rows = [{"val_accuracy": 0.60, "privacy_epsilon": 0.1}, {"val_accuracy": 0.55, "privacy_epsilon": 0.4},
            {"val_accuracy": 0.75, "privacy_epsilon": math.inf}]
    front = pareto_front(rows, objectives)
    assert [r["privacy_epsilon"] for r in front] == [0.1, math.inf]  # the non-private arm is on the front
    assert infinity_position([0.1, 0.4, math.inf]) == pytest.approx(0.4 + 0.3 / 5)  # past the largest finite ε
    assert infinity_position([0.01, 0.1, math.inf], "log") > 0.1 and infinity_position([0.1, 0.4]) is None
    path = tmp_path / "front.png"
    front_plot(rows, front, objectives, str(path), "fedaux_dp: Pareto front")
    assert path.stat().st_size > 0
