"""What a sweep publishes besides its runs: trial names, the parent's description, the persistent Optuna study and
its plots (no Ray: a real Optuna SQLite storage in tmp_path)."""
import optuna
import pytest

from platform.results.mlflow_ui import run_link
from platform.sweep.optuna_store import StudyRecorder, load_study, storage_url, write_study_plots
from platform.config.search_space import load_search_space
from platform.sweep.outputs import SweepAnswer, description
from platform.results.tracking import trial_run_name


@pytest.fixture
def smoke():
    return load_search_space("smoke", {}, None)


def test_trial_names_come_from_the_swept_values(smoke):
    params = {"algorithm.name": "fedprox", "algorithm.mu": 0.0123456, "clients.lr": 0.05}
    assert trial_run_name(params, smoke.parameters) == "fedprox mu=0.01235 lr=0.05"
    assert trial_run_name({"clients.lr": 0.05}, smoke.parameters, {"partition.alpha": 0.1}) == "lr=0.05 [alpha=0.1]"
    assert trial_run_name({}, {}) == "base config"
    # two swept keys with the same last part keep their full names
    assert trial_run_name({"clients.lr": 0.1, "server.lr": 1.0}, {}) == "clients.lr=0.1 server.lr=1"


def test_description_names_the_best_trial_with_a_link(smoke):
    best = {"run_id": "abc", "name": "fedavg lr=0.05", "val_accuracy": 0.91, "val_accuracy_std": 0.02,
            "test_accuracy": 0.9, "round": 10, "params": {"algorithm.name": "fedavg", "clients.lr": 0.05}}
    text = description(smoke, "7", SweepAnswer(status="completed", best=best, studies=["smoke-1"]))
    assert f"[fedavg lr=0.05]({run_link('7', 'abc')}) with val_accuracy 0.9100 ± 0.0200 at round 10" in text
    assert "test_accuracy 0.9000" in text and "- `clients.lr` = 0.05" in text
    assert "`algorithm.mu`: loguniform [0.001, 1.0] when algorithm.name = fedprox" in text
    assert "Best trial" not in description(smoke, "7", SweepAnswer())  # a sweep just started: the question only


def test_description_and_best_params_give_4_significant_digits(smoke):
    """0.8333, not 0.8333333333333334, in the description and the parent's best.* values."""
    from types import SimpleNamespace

    from platform.sweep.outputs import log_best

    best = {"run_id": "abc", "name": "fedprox", "val_accuracy": 5 / 6, "val_accuracy_std": 1 / 3, "round": 10,
            "params": {"algorithm.name": "fedprox", "clients.lr": 0.18483120598659894, "algorithm.mu": 5 / 6}}
    text = description(smoke, "7", SweepAnswer(status="completed", best=best))
    assert "val_accuracy 0.8333 ± 0.3333" in text and "- `clients.lr` = 0.1848" in text
    assert "- `algorithm.mu` = 0.8333" in text and "0.83333" not in text and "0.18483" not in text
    logged = {}
    tracker = SimpleNamespace(log_params=lambda run, params: logged.update(params),
                              set_tag=lambda run, key, value: logged.update({key: value}))
    log_best(tracker, "parent", best)
    assert logged == {"best.algorithm.name": "fedprox", "best.clients.lr": "0.1848", "best.algorithm.mu": "0.8333",
                      "best_trial_run_id": "abc"}


def test_study_records_every_state_and_draws_its_plots(smoke, tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    recorder = StudyRecorder(url, "smoke-1", smoke.search.objectives, smoke.parameters)
    draws = [({"algorithm.name": "fedavg", "clients.lr": 0.01}, 0.5, "complete"),
             ({"algorithm.name": "fedprox", "algorithm.mu": 0.1, "clients.lr": 0.1}, 0.7, "complete"),
             ({"algorithm.name": "fedprox", "algorithm.mu": 0.01, "clients.lr": 0.05}, 0.6, "complete"),
             ({"algorithm.name": "fedavg", "clients.lr": 0.005}, 0.2, "pruned"),
             ({"algorithm.name": "fedavg", "clients.lr": 0.2}, float("nan"), "complete"),  # diverged
             ({"algorithm.name": "fedavg", "clients.lr": 0.02}, None, "fail")]
    for i, (params, value, state) in enumerate(draws):
        recorder.record(params, {"val_accuracy": value}, {1: 0.1, 2: value} if value is not None else {}, state,
                        {"mlflow_run_id": f"run{i}"})
    study = load_study(url, "smoke-1")  # a fresh connection: what optuna-dashboard sees
    assert study.metric_names == ["val_accuracy"]
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "COMPLETE", "COMPLETE", "PRUNED", "FAIL", "FAIL"]
    assert [t.value for t in study.trials[:3]] == [0.5, 0.7, 0.6] and study.best_trial.user_attrs["mlflow_run_id"] == "run1"
    assert study.trials[3].intermediate_values == {1: 0.1, 2: 0.2}
    assert "algorithm.mu" not in study.trials[0].params  # inactive: not a param of that trial
    files = write_study_plots(study, str(tmp_path / "plots"), "smoke", ["val_accuracy"])
    html = open(files[0]).read()
    assert files[0].endswith("optuna_plots.html") and html.count("<h2>") == 4 and "plotly" in html
    pngs = [f for f in files if f.endswith(".png")]
    assert len(pngs) == 4 and all(open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_a_study_too_small_to_plot_says_why(smoke, tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    StudyRecorder(url, "one", smoke.search.objectives, smoke.parameters).record(
        {"algorithm.name": "fedavg", "clients.lr": 0.01}, {"val_accuracy": 0.5}, {}, "complete", {})
    files = write_study_plots(optuna.load_study(study_name="one", storage=url), str(tmp_path), "one",
                              ["val_accuracy"])
    assert files == [str(tmp_path / "optuna_plots.html")]
    assert "not drawn: 1 complete trial(s); needs 2" in open(files[0]).read()


def test_storage_defaults_beside_a_sqlite_mlflow_store(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDSWEEP_OPTUNA_STORAGE", raising=False)
    assert storage_url(f"sqlite:///{tmp_path}/mlflow.db") == f"sqlite:///{tmp_path}/optuna.db"
    assert storage_url("sqlite:///x.db", "postgresql://h/db") == "postgresql://h/db"
    monkeypatch.setenv("FEDSWEEP_OPTUNA_STORAGE", "sqlite:///elsewhere.db")
    assert storage_url(f"sqlite:///{tmp_path}/mlflow.db") == "sqlite:///elsewhere.db"
