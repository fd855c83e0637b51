"""Two sweeps' first use of a new SQLite MLflow store and Optuna storage at the same time: real processes,
real stores. Without the store lock one of them fails creating the schema ("table ... already exists")."""
import subprocess
import sys

FIRST_USE = """
import sys
from platform.sweep.optuna_store import StudyRecorder
from platform.config.search_space import load_search_space
from platform.results.tracking import Tracker

uri, storage, name = sys.argv[1:4]
tracker = Tracker(uri, "smoke")
run = tracker.start_run(name, {})
space = load_search_space("smoke", {}, None)
StudyRecorder(storage, name, space.search.objectives, space.parameters).record(
    {"algorithm.name": "fedavg", "clients.lr": 0.1}, {"val_accuracy": 0.5}, {}, "complete", {"mlflow_run_id": run})
print(run)
"""


def test_sweeps_starting_together_on_a_new_store_all_succeed(tmp_path):
    import optuna
    from mlflow.tracking import MlflowClient

    uri, storage = f"sqlite:///{tmp_path / 'mlflow.db'}", f"sqlite:///{tmp_path / 'optuna.db'}"
    processes = [subprocess.Popen([sys.executable, "-c", FIRST_USE, uri, storage, f"sweep-{i}"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    outcomes = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in processes]
    for code, _, err in outcomes:
        assert code == 0, err[-3000:]
    client = MlflowClient(uri)
    experiments = [e for e in client.search_experiments() if e.name == "smoke"]
    assert len(experiments) == 1
    runs = client.search_runs([experiments[0].experiment_id])
    assert sorted(r.info.run_id for r in runs) == sorted(out.strip() for _, out, _ in outcomes)
    assert sorted(s.study_name for s in optuna.get_all_study_summaries(storage)) == ["sweep-0", "sweep-1", "sweep-2"]
