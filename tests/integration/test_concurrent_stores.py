"""Two sweeps' first use of a new SQLite MLflow store and Optuna storage at the same time: real processes,
real stores. Without the store lock one of them fails creating the schema ("table ... already exists")."""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a race between whole sweep processes: the slow tier

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


PUBLISH = """
import os, sys, time
from platform.results.mlflow_ui import deep_link, publish_sweep_view, ui_url
from platform.results.tracking import Tracker

uri, barrier, me, others = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
names = sys.argv[5:]
for name in names:
    tracker = Tracker(uri, name)
    parent = tracker.start_run(f"sweep-{me}", {})
    # both processes publish the view of a new experiment at once: each waits here for the other
    open(os.path.join(barrier, f"{name}-{me}"), "w").close()
    waited = time.monotonic()
    while len([f for f in os.listdir(barrier) if f.startswith(name + "-")]) < others:
        if time.monotonic() - waited > 120:
            sys.exit("the other process never came: it failed before")
        time.sleep(0.001)
    key = publish_sweep_view(tracker.client, tracker.experiment_id, parent, ["clients.lr"], ["val_accuracy"],
                             ["status"], "val_accuracy", False)
    print("open:", deep_link(ui_url(uri), tracker.experiment_id, key), flush=True)
"""


def test_sweeps_publishing_their_views_together_both_keep_theirs(tmp_path):
    """Two sweeps of one new space ending at the same moment: both store their MLflow view and
    print its link. MLflow reads an experiment tag, then inserts it, so the slower of two first writes of the
    experiment's kind tag failed ("UNIQUE constraint failed: experiment_tags") and that sweep lost its view. Real
    processes on a real store, released together on each of 30 new experiments."""
    from mlflow.tracking import MlflowClient

    from platform.results.mlflow_ui import EXPERIMENT_KIND_TAG, SHARED_VIEW_TAG_PREFIX

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    names = [f"space-{i}" for i in range(30)]
    (tmp_path / "barrier").mkdir()
    processes = [subprocess.Popen([sys.executable, "-c", PUBLISH, uri, str(tmp_path / "barrier"), str(i), "2",
                                   *names], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(2)]
    outcomes = [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in processes]
    for code, out, err in outcomes:
        assert code == 0, err[-3000:]
        assert sum(line.startswith("open: http") for line in out.splitlines()) == len(names), out
    client = MlflowClient(uri)
    for name in names:
        experiment = client.get_experiment_by_name(name)
        views = [k for k in experiment.tags if k.startswith(SHARED_VIEW_TAG_PREFIX)]
        assert len(views) == 2 and EXPERIMENT_KIND_TAG in experiment.tags, (name, experiment.tags.keys())
