"""The sweep CLI end to end in one process: real Ray Tune, real Optuna, a real MLflow store."""
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import REPO_ROOT, mlflow_runs, process_cmdlines, process_running

FAST_SPACE = {
    "description": "test sweep",
    "base": {"rounds": 3, "clients": {"num_clients": 6, "clients_per_round": 6, "batch_size": 16, "momentum": 0.9}},
    "parameters": {
        "algorithm.name": {"choice": ["fedavg", "fedprox"]},
        "algorithm.mu": {"choice": [0.01, 0.1], "when": {"algorithm.name": "fedprox"}},
        "clients.momentum": {"choice": [0.5], "when": {"algorithm.name": "fedavg"}},
        "clients.lr": {"grid": [0.05]},
    },
    "search": {"searcher": "grid", "num_samples": 1, "seeds": [0, 1], "metric": "test_accuracy", "mode": "max"},
    "resources": {"cpu": 1},
}


@pytest.mark.slow  # the fast tier sweeps a conditional parameter in test_smoke_sweep.py
def test_grid_with_conditional_parameter_and_seeds(ray_local, tracking_uri, tmp_path, capsys):
    from platform.sweep.command import main

    path = tmp_path / "conditional.yaml"
    path.write_text(yaml.safe_dump(FAST_SPACE))
    rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune")])
    out = capsys.readouterr().out
    assert rc == 0, out
    client, runs = mlflow_runs(tracking_uri, "conditional")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    # fedavg once, fedprox once per mu: 3 grid points
    combos = sorted((r.data.params["algorithm.name"], r.data.params.get("algorithm.mu")) for r in children)
    assert combos == [("fedavg", None), ("fedprox", "0.01"), ("fedprox", "0.1")]
    for child in children:
        assert child.data.tags["status"] == "completed"
        std = client.get_metric_history(child.info.run_id, "test_accuracy_std")
        assert len(std) == 3 and all(m.value >= 0 for m in std)
        assert child.data.params["search.seeds"] == "[0, 1]"
        # an inactive conditional parameter (momentum is swept for fedavg only) is not logged
        assert ("clients.momentum" in child.data.params) == (child.data.params["algorithm.name"] == "fedavg")
        per_seed = [child.data.metrics[f"test_accuracy/seed_{s}"] for s in (0, 1)]
        assert child.data.metrics["test_accuracy"] == pytest.approx(sum(per_seed) / 2)
        assert child.data.metrics["test_accuracy_std"] == pytest.approx(abs(per_seed[0] - per_seed[1]) / 2)
    assert "over 2 seeds" in out


def test_failed_trial_is_marked_failed(ray_local, tracking_uri, tmp_path, capsys):
    """A trial that raises ends FAILED in MLflow with status tag 'failed'. Here it raises a ConfigError (bad input
    only the trial can find): every trial failed on it, so the sweep ends with its line and exit 2, as bad input
    found at load does."""
    from platform.sweep.command import main

    space = dict(FAST_SPACE)
    # a partition no draw can satisfy (12 clients, 10 classes, α tiny, every client needs > 0.99 of a class):
    # every trial raises inside the trainable, after its MLflow run exists
    space["base"] = {**FAST_SPACE["base"], "partition": {"alpha": 0.001, "min_share": 0.99},
                     "clients": {"num_clients": 12, "clients_per_round": 12}}
    space["parameters"] = {"clients.lr": {"choice": [0.05]}}
    space["search"] = {**FAST_SPACE["search"], "seeds": [0]}
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(space))
    rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune")])
    captured = capsys.readouterr()
    assert rc == 2
    assert captured.err.strip().splitlines()[-1] == (
        "error: partition.min_share: no Dirichlet draw gave every client a share > 0.99 after 10000 tries; lower it "
        "or raise alpha (every trial failed on it)")
    _, runs = mlflow_runs(tracking_uri, "broken")
    statuses = sorted((r.info.status, r.data.tags.get("status")) for r in runs)
    assert statuses == [("FAILED", "failed"), ("FAILED", "failed")]
    # one line per failed trial: the exception's last line and where its full traceback is; Tune's own traceback
    # and warnings go to the study's log (tune_driver.log), not between our lines
    printed = captured.out + captured.err
    assert "Traceback" not in printed and "Trial task failed" not in printed, printed
    errors = [ln for ln in captured.out.splitlines() if "] error: " in ln]
    assert len(errors) == 1 and "(traceback: " in errors[0], captured.out
    # a config error is deterministic: the trial fails once, not retried (search.max_failures is 1 here), and
    # its one line is the error
    assert "running it again" not in captured.out and "run again after a failure" not in captured.out, captured.out
    assert [ln for ln in captured.out.splitlines() if ln.startswith("[trial 1/1]")] == [
        next(ln for ln in captured.out.splitlines() if ln.startswith("[trial 1/1] start")), errors[0]], captured.out
    traceback_file = errors[0].rsplit("(traceback: ", 1)[1].rstrip(")")
    assert "partition.min_share: no Dirichlet draw" in errors[0]
    assert os.path.isfile(traceback_file) and "partition.min_share" in open(traceback_file).read(), traceback_file
    sweep_dir = next(p for p in (tmp_path / "tune").iterdir() if p.name.startswith("broken-"))
    assert "Trial task failed" in (sweep_dir / "tune_driver.log").read_text()
    (error_file,) = [p for p in sweep_dir.rglob("error.txt")]
    assert error_file.read_text().count("Failure # ") == 1  # Tune ran the trial once


@pytest.mark.slow
def test_a_long_study_runs_as_several_tune_experiments(ray_local, tracking_uri, tmp_path, capsys):
    """search.trials_per_experiment 2, 5 trials: three Tune experiments, one study: each trial one run, numbered
    on, new draws in every experiment, the best chosen among all five."""
    from platform.sweep.command import main

    space = {**FAST_SPACE, "base": {**FAST_SPACE["base"], "rounds": 1},
             "parameters": {"clients.lr": {"loguniform": [0.005, 0.2]}},
             "search": {"searcher": "random", "num_samples": 5, "trials_per_experiment": 2, "seeds": [0],
                        "metric": "val_accuracy", "mode": "max"}}
    path = tmp_path / "segmented.yaml"
    path.write_text(yaml.safe_dump(space))
    rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "experiment 3/3 of this study: 1 trial(s)" in out and "[trial 5/5] completed" in out
    _, runs = mlflow_runs(tracking_uri, "segmented")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 5 and all(r.data.tags["status"] == "completed" for r in children)
    assert len({r.data.params["clients.lr"] for r in children}) == 5
    best = max(r.data.metrics["val_accuracy"] for r in children)
    assert f"best of 5 trial(s) (0 failed): val_accuracy = {best:.4f}" in out
    (sweep_dir,) = (tmp_path / "tune").iterdir()
    assert {"segment-002", "segment-003", "segments.json"} <= {p.name for p in sweep_dir.iterdir()}


def test_interrupted_sweep_resumes_without_duplicate_rounds(tracking_uri, tmp_path):
    """Ctrl-C mid-sweep, then --resume: every run ends FINISHED and no round is logged twice. The study runs as
    three Tune experiments of one trial each (search.trials_per_experiment), interrupted in the second: --resume
    skips the first, restores the second and starts the third."""
    from tests.conftest import run_cli

    uri, args = _resumable_sweep(tmp_path, "resumable", trials_per_experiment=1)
    code, out = _sweep_until(args, "[trial 2/3] round 3/6", signal.SIGINT)
    assert code != 0, out
    # the printed hint alone continues it, from another directory: the sweep's stored invocation supplies the
    # space file, the store and the overrides
    hint = next(line for line in out.splitlines() if "continue with: " in line).split("continue with: ")[1]
    module, *hint_args = hint.split()[2:]
    assert module == "platform.sweep" and hint_args[0] == "--resume" and str(tmp_path / "tune") in hint_args
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    conflicting = run_cli("platform.sweep", *hint_args, "--set", "rounds=7", cwd=str(elsewhere), timeout=120)
    assert conflicting.returncode == 2 and "--resume: --set ['rounds=7'] conflicts" in conflicting.stderr
    resumed = run_cli("platform.sweep", *hint_args, cwd=str(elsewhere), timeout=480)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "experiment 1/3" not in resumed.stdout and "experiment 3/3" in resumed.stdout
    assert "resuming experiment 2 from its Tune state" in resumed.stdout
    assert "resuming experiment 3" not in resumed.stdout  # a fresh experiment, not a restore
    client, runs = mlflow_runs(uri, "resumable")
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    for child in (r for r in runs if "mlflow.parentRunId" in r.data.tags):
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "test_accuracy")]
        assert steps == list(range(1, 7)), steps
        assert child.data.tags["status"] == "completed"


@pytest.mark.slow  # the fast tier keeps one test of the path (docs/how-to/testing.md)
def test_trial_stopped_by_asha_is_tagged_with_its_round(ray_local, tracking_uri, tmp_path, capsys):
    """A trial ASHA stops ends "early-stopped" with the round it stopped at as a tag, and is PRUNED (with its
    rounds' values) in the persistent Optuna study."""
    import optuna

    from platform.sweep.command import main

    space = {**FAST_SPACE, "parameters": {"clients.lr": {"grid": [0.05, 0.00001]}},
             "base": {**FAST_SPACE["base"], "rounds": 3},
             "search": {"searcher": "grid", "num_samples": 1, "seeds": [0], "metric": "val_accuracy", "mode": "max",
                        "max_concurrent_trials": 1, "scheduler": {"kind": "asha", "grace_period": 2}}}
    path = tmp_path / "stopped.yaml"
    path.write_text(yaml.safe_dump(space))
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune"),
               "--optuna-storage", storage])
    capsys.readouterr()
    assert rc == 0
    _, runs = mlflow_runs(tracking_uri, "stopped")
    children = {r.data.params["clients.lr"]: r for r in runs if "mlflow.parentRunId" in r.data.tags}
    slow = children["1e-05"]  # barely moves: below the first trial at ASHA's rung (round 2)
    assert slow.data.tags["status"] == "early-stopped" and slow.data.tags["stopped_early_at_round"] == "2"
    assert children["0.05"].data.tags["status"] == "completed"
    assert "stopped_early_at_round" not in children["0.05"].data.tags
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    study = optuna.load_study(study_name=parent.data.tags["fedsweep.optuna_studies"], storage=storage)
    states = {t.params["clients.lr"]: t.state for t in study.trials}
    assert states == {0.05: optuna.trial.TrialState.COMPLETE, 0.00001: optuna.trial.TrialState.PRUNED}


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_late_interrupt_is_reported_as_interrupted(tracking_uri, tmp_path, signum):
    """Ctrl-C (or SIGTERM) once every trial has started: exit 130, the resume hint, the parent KILLED with status
    interrupted, and no child run left RUNNING (Tune marks the stopped trials TERMINATED, like finished ones)."""
    space = {**FAST_SPACE, "parameters": {"clients.lr": {"grid": [0.05]}},  # one trial: all have started
             "base": {**FAST_SPACE["base"], "rounds": 300},
             "search": {"searcher": "grid", "num_samples": 1, "seeds": [0], "metric": "val_accuracy", "mode": "max"}}
    path = tmp_path / "late.yaml"
    path.write_text(yaml.safe_dump(space))
    uri = tracking_uri
    code, out = _sweep_until([str(path), "--tracking-uri", uri, "--storage-path", str(tmp_path / "tune")],
                             " round 2/300", signum)
    assert code == 130, out[-3000:]
    assert "continue with: python -m platform.sweep --resume late-" in out and "best of" not in out
    # one resume line, ours: not Tune's "Resume experiment with: Tuner.restore(...)" (it goes to the study's log)
    assert "Tuner.restore" not in out and "Trials did not complete" not in out, out[-3000:]
    assert sum("continue with:" in line for line in out.splitlines()) == 1, out[-3000:]
    _, runs = mlflow_runs(uri, "late")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert parent.info.status == "KILLED" and parent.data.tags["status"] == "interrupted"
    assert [(c.info.status, c.data.tags["status"]) for c in children] == [("KILLED", "interrupted")]


@pytest.mark.slow
def test_resume_after_the_driver_was_killed_leaves_one_run_per_trial(tracking_uri, tmp_path):
    """kill -9 of the sweep's driver mid-trial, then --resume: each Tune trial has exactly one child run (a trial
    the restored state did not know continues the run it had), every run ends, and none is left RUNNING."""
    from tests.conftest import run_cli

    uri, args = _resumable_sweep(tmp_path, "killed")
    ray_processes: list[int] = []
    _sweep_until(args, "[trial 2/3] round 3/6", signal.SIGKILL, ray_processes)  # its open runs stay RUNNING
    # the driver's local Ray cluster goes with it (Ray's own agents would linger 60 s: platform/reaper.py)
    assert len(ray_processes) > 3
    deadline = time.time() + 40  # well past the reaper's work, short of the 60 s they would linger without it
    while [pid for pid in ray_processes if process_running(pid)] and time.time() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in ray_processes if process_running(pid)], process_cmdlines(ray_processes)
    # --repair closes what the dead driver left RUNNING (its parent and the trials it had open)
    _, runs = mlflow_runs(uri, "killed")
    assert [r for r in runs if r.info.status == "RUNNING"]
    repair = run_cli("platform.sweep", "--repair", "--tracking-uri", uri, cwd=REPO_ROOT, timeout=120)
    assert repair.returncode == 0 and "repaired 1 sweep(s)" in repair.stdout, repair.stdout + repair.stderr
    _, runs = mlflow_runs(uri, "killed")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    resumed = run_cli("platform.sweep", *args, "--resume", cwd=REPO_ROOT, timeout=480)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    client, runs = mlflow_runs(uri, "killed")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert not [r for r in runs if r.info.status == "RUNNING"]
    trial_ids = [c.data.tags["fedsweep.trial_id"] for c in children]
    assert len(trial_ids) == len(set(trial_ids)), trial_ids  # one run per trial
    finished = [c for c in children if c.data.tags["status"] == "completed"]
    assert len(finished) == 3, [(c.info.run_name, c.data.tags["status"]) for c in children]
    for child in finished:
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "test_accuracy")]
        assert steps == list(range(1, 7)), steps
    assert all(c.info.status == "KILLED" and c.data.tags["status"] == "interrupted"
               for c in children if c not in finished)  # a trial Tune had not saved: its run closed, not left


@pytest.mark.slow
def test_a_trial_whose_process_is_killed_is_run_again_from_its_checkpoint(ray_local, tracking_uri, tmp_path,
                                                                           capsys, monkeypatch):
    """kill -9 of a trial's own process mid-trial (a node or worker lost): Tune runs it again from its last
    checkpoint (search.max_failures, default 1); its one MLflow run continues, each round logged once."""
    from platform.cli import descendant_processes
    from platform.sweep.command import main
    from platform.sweep.callback import MlflowSweepCallback

    # The kill happens in the driver (main runs in this process) as Tune hands it round 2: the trial, blocked in
    # tune.report until the driver asks for its next result, is then at most a round ahead, far from its last round.
    rounds = 40
    space = {**FAST_SPACE, "parameters": {"clients.lr": {"grid": [0.05]}},
             "base": {**FAST_SPACE["base"], "rounds": rounds},
             "search": {"searcher": "grid", "num_samples": 1, "seeds": [0], "metric": "val_accuracy", "mode": "max",
                        "checkpoint_every": 2}}
    path = tmp_path / "retried.yaml"
    path.write_text(yaml.safe_dump(space))
    killed = []
    on_trial_result = MlflowSweepCallback.on_trial_result

    def kill_the_trial_after_round_2(self, iteration, trials, trial, result, **info):
        on_trial_result(self, iteration, trials, trial, result, **info)  # round 2 logged first, as before
        if killed or self.last.get(trial.trial_id, {}).get("round", 0) < 2:
            return
        # the trial's own process (Ray sets its title), in this test's Ray instance (ray_local: our descendants;
        # never another run's trials on this machine)
        for pid in _processes_titled("ray::ImplicitFunc", descendant_processes(os.getpid())):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    monkeypatch.setattr(MlflowSweepCallback, "on_trial_result", kill_the_trial_after_round_2)
    rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune")])
    out = capsys.readouterr().out
    assert killed and rc == 0, out
    assert "running it again (retry 1)" in out and "1 run again after a failure" in out
    client, runs = mlflow_runs(tracking_uri, "retried")
    (child,) = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert child.info.status == "FINISHED" and child.data.tags["status"] == "completed"
    assert [m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy")] == list(range(1, rounds + 1))



def _resumable_sweep(tmp_path, name: str, **search) -> tuple[str, list[str]]:
    """A 3-trial, 6-round sweep, one trial at a time, checkpointed every 2 rounds, in space ``name`` (``search``:
    more search settings): (tracking URI, the ``platform.sweep`` arguments that run it). The store is the test's
    ``tracking_uri`` (tmp_path/mlflow.db)."""
    space = dict(FAST_SPACE)
    space["base"] = {**FAST_SPACE["base"], "rounds": 6}  # signalled at round 3: 3 rounds left, the trial still runs
    space["search"] = {**FAST_SPACE["search"], "seeds": [0], "checkpoint_every": 2, "max_concurrent_trials": 1,
                       **search}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return uri, [str(path), "--tracking-uri", uri, "--storage-path", str(tmp_path / "tune")]


def _processes_titled(prefix: str, among=None) -> list[int]:
    """Pids (of ``among``, else of this machine) whose command line starts with ``prefix``."""
    return [pid for pid, cmd in process_cmdlines(among).items() if cmd.startswith(prefix)]


def _sweep_until(args: list[str], marker: str, signum: int,
                 descendants: list[int] | None = None) -> tuple[int, str]:
    """Run ``python -m platform.sweep args`` as a user would, send ``signum`` once a printed line contains
    ``marker`` (or after 240 s), and return its exit code and everything it printed. ``descendants``, if given,
    receives the pids of the driver's child processes (its local Ray cluster) just before the signal."""
    from platform.cli import descendant_processes

    proc = subprocess.Popen([sys.executable, "-m", "platform.sweep", *args], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen, deadline = [], time.time() + 240
    for line in proc.stdout:
        seen.append(line)
        if marker in line or time.time() > deadline:
            if descendants is not None:
                descendants.extend(descendant_processes(proc.pid))
            proc.send_signal(signum)
            break
    rest, _ = proc.communicate(timeout=240)
    return proc.returncode, "".join(seen) + rest


def test_a_trial_handed_a_dead_reused_actor_is_run_again(ray_local, tmp_path):
    """Ray Tune with reuse_actors (as the sweeps run it) hands a finished trial's cached actor to the next trial; when
    that actor has died meanwhile (its node lost, its process killed), Tune counted the one failure twice and ended
    the trial as ERROR without a retry (platform/sweep/tune_fixes.py). With the fix, the trial is run again and
    completes. Plain Tune, a real process killed with SIGKILL while its actor sits in Tune's cache."""
    from ray import tune

    from platform.sweep import tune_fixes

    assert tune_fixes.apply()

    def trainable(config):
        for step in range(2):
            tune.report({"value": config["a"] * 10 + step, "pid": os.getpid()})

    class KillTheCachedActor(tune.Callback):
        killed: list = []

        def on_trial_complete(self, iteration, trials, trial, **info):
            if not self.killed:  # Tune caches this trial's actor for the next trial, which it has not handed out yet
                os.kill(trial.last_result["pid"], signal.SIGKILL)
                self.killed.append(trial.last_result["pid"])

    tuner = tune.Tuner(trainable, param_space={"a": tune.grid_search([1, 2, 3])},
                       tune_config=tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
                       run_config=tune.RunConfig(storage_path=str(tmp_path), callbacks=[KillTheCachedActor()],
                                                 failure_config=tune.FailureConfig(max_failures=1), verbose=0))
    results = tuner.fit()
    assert KillTheCachedActor.killed
    assert sorted(r.metrics["value"] for r in results if r.error is None) == [11, 21, 31]
    assert results.num_errors == 0
