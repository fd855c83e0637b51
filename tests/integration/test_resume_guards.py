"""``--resume`` runs the sweep that was started, by one driver, from a state it can read: two ``--resume`` of the same
interrupted sweep at once (one runs it, the other is refused naming the live driver), a space file edited since the
sweep started (refused, naming the file), and a state file cut short (refused in one line, never a hang). Each is a
real ``python -m platform.sweep`` process with its own local Ray, a real SQLite MLflow store and real Optuna,
interrupted with SIGINT as a user's Ctrl-C."""
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import REPO_ROOT, mlflow_runs, run_cli
from tests.integration.test_sweep import FAST_SPACE, _sweep_until

# Three TPE trials of three rounds, one at a time, checkpointed every round: the searcher's pickle is in the state.
SPACE = {**FAST_SPACE, "parameters": {"clients.lr": {"loguniform": [0.01, 0.2]}},
         "base": {**FAST_SPACE["base"], "rounds": 3},
         "search": {"searcher": "tpe", "num_samples": 3, "seeds": [0], "metric": "val_accuracy", "mode": "max",
                    "max_concurrent_trials": 1, "checkpoint_every": 1}}


def _interrupted_sweep(tmp_path, name: str) -> tuple[list[str], str, str]:
    """Write the space, start its sweep and interrupt it (SIGINT) during the first trial: (the ``platform.sweep``
    arguments, the tracking URI, the sweep's Tune directory)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [str(path), "--tracking-uri", uri, "--storage-path", str(tmp_path / "tune"),
            "--cache-dir", str(tmp_path / "cache")]
    code, out = _sweep_until(args, "[trial 1/3] round 2/3", signal.SIGINT)
    assert code == 130, out[-3000:]
    (sweep_dir,) = (tmp_path / "tune").iterdir()
    return args, uri, str(sweep_dir)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.slow
def test_two_resumes_at_once_run_the_sweep_once(tmp_path):
    """Two ``--resume`` of the same interrupted sweep started together: one holds the sweep's lease and runs it, the
    other is refused in one line naming the live driver (exit 2) and runs nothing. Afterwards every trial has one
    run, every round is logged once, nothing is left RUNNING and the lease is gone."""
    args, uri, sweep_dir = _interrupted_sweep(tmp_path, "twice")
    command = [sys.executable, "-m", "platform.sweep", *args, "--resume"]
    procs = [subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in procs]
    codes = sorted((p.returncode, i) for i, p in enumerate(procs))
    (ran_code, ran), (refused_code, refused) = codes
    assert (ran_code, refused_code) == (0, 2), outputs
    refused_out, refused_err = outputs[refused]
    line = _error_lines(refused_err)
    assert len(line) == 1 and line[0].startswith("error: --resume: sweep ") and "is being run by driver " in line[0], \
        refused_err
    assert f":{procs[ran].pid} since " in line[0], (line, procs[ran].pid)
    assert "[trial" not in refused_out, refused_out
    client, runs = mlflow_runs(uri, "twice")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert not [r for r in runs if r.info.status == "RUNNING"]
    keys = [c.data.tags["fedsweep.trial_key"] for c in children]
    assert len(children) == 3 and len(set(keys)) == 3, keys
    for child in children:
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy")]
        assert steps == [1, 2, 3], (child.info.run_name, steps)
    assert not os.path.exists(os.path.join(sweep_dir, "fedsweep_driver.lease"))


@pytest.mark.slow
def test_resume_refuses_an_edited_space_and_a_truncated_state_in_one_line(tmp_path):
    """An interrupted sweep whose space file is then edited, and whose state files are then cut short one at a time
    (its own state, Tune's experiment state, the searcher's pickle): each ``--resume`` ends at once with one line
    saying what is wrong and what can still be done, exit 2, no Ray started and nothing written. With the file and
    the state put back, ``--resume`` continues the sweep to its end."""
    args, uri, sweep_dir = _interrupted_sweep(tmp_path, "guarded")
    space_file = args[0]
    original = open(space_file, "rb").read()
    with open(space_file, "w") as fh:
        yaml.safe_dump({**SPACE, "parameters": {"clients.lr": {"loguniform": [0.001, 0.01]}}}, fh, sort_keys=False)
    edited = run_cli("platform.sweep", *args, "--resume", timeout=120)
    line = _error_lines(edited.stderr)
    assert edited.returncode == 2 and len(line) == 1, edited.stderr
    assert line[0].startswith(f"error: --resume: {space_file} changed since sweep {os.path.basename(sweep_dir)} "
                              f"started"), line
    assert "put the file back as it was" in line[0] and "or start a new sweep: python -m platform.sweep " in line[0]
    with open(space_file, "wb") as fh:
        fh.write(original)

    names = sorted(os.listdir(sweep_dir))
    damaged = ["fedsweep_sweep.json", max(n for n in names if n.startswith("experiment_state-")),
               max(n for n in names if n.startswith("searcher-state-"))]
    for name in damaged:
        path = os.path.join(sweep_dir, name)
        whole = open(path, "rb").read()
        with open(path, "wb") as fh:
            fh.write(whole[: len(whole) // 2])
        started = time.monotonic()
        refused = run_cli("platform.sweep", *args, "--resume", timeout=60)  # a hang fails here, not a slow machine
        took = time.monotonic() - started
        line = _error_lines(refused.stderr)
        assert refused.returncode == 2 and len(line) == 1, (name, refused.stderr[-3000:])
        assert f"cannot be continued: its state {path} (" in line[0] and "truncated or unreadable" in line[0], line
        assert "--repair" in line[0] and "start a new sweep: python -m platform.sweep " in line[0], line
        assert "[trial" not in refused.stdout and "Ray" not in refused.stdout, (name, refused.stdout, took)
        with open(path, "wb") as fh:
            fh.write(whole)

    resumed = run_cli("platform.sweep", *args, "--resume", timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    client, runs = mlflow_runs(uri, "guarded")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 3 and all(r.info.status == "FINISHED" for r in runs)
