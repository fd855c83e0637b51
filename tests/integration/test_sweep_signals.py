"""Faults a sweep's driver meets from outside, injected for real: a SIGTERM while the sweep starts, a kill -9
just after a trial starts and then ``--resume``, and ``--repair`` run while a resumed sweep is alive. Each is a real
``python -m platform.sweep`` process with its own local Ray, a real SQLite MLflow store and real Optuna; the asserts
are what a user would see: the exit code, the printed lines, and the runs in the store (none lost, none twice, none
left RUNNING)."""
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import REPO_ROOT, mlflow_runs, process_cmdlines, process_running, run_cli
from tests.integration.test_sweep import FAST_SPACE, _sweep_until

ONE_TRIAL = {**FAST_SPACE, "parameters": {"clients.lr": {"grid": [0.05]}},
             "base": {**FAST_SPACE["base"], "rounds": 3},
             "search": {"searcher": "grid", "num_samples": 1, "seeds": [0], "metric": "val_accuracy", "mode": "max"}}


def _space(tmp_path, name: str, space: dict) -> list[str]:
    """The ``platform.sweep`` arguments of ``space``, saved as ``<name>.yaml``, with a store and storage in tmp_path."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return [str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--storage-path",
            str(tmp_path / "tune")]


def _runs_in_store(db: str) -> int:
    """How many MLflow runs the SQLite store ``db`` holds now (0 before its schema exists)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("select count(*) from runs").fetchone()[0]
    except sqlite3.Error:
        return 0


def _sigterm_when(args: list[str], ready, every: float = 0.05) -> tuple[int, str]:
    """Run ``python -m platform.sweep args``; send SIGTERM as soon as ``ready(proc)`` holds (checked ``every`` s).
    Returns the exit code and everything printed."""
    proc = subprocess.Popen([sys.executable, "-m", "platform.sweep", *args], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    while proc.poll() is None and not ready(proc):
        time.sleep(every)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    return proc.returncode, out


def _ends_cleanly(code: int, out: str) -> None:
    """Ended as a SIGTERM later in the sweep ends: exit 130, no traceback, no Ray abort (exit 134, its C++ stack)."""
    assert code == 130, out[-3000:]
    for sign in ("Traceback", "SystemExit", "SIGABRT", "*** ", "Stack trace"):
        assert sign not in out, out[-3000:]


def test_sigterm_once_the_parent_run_exists_closes_it_and_prints_one_resume_line(tmp_path):
    """SIGTERM as soon as the sweep's parent run is in the store: the signal may land between the run's creation
    and the code that closes it, and the parent must still be closed, with one resume line."""
    args = _space(tmp_path, "early", ONE_TRIAL)
    code, out = _sigterm_when(args, lambda proc: _runs_in_store(str(tmp_path / "mlflow.db")) > 0)
    _ends_cleanly(code, out)
    lines = [line for line in out.splitlines() if "continue with: " in line]
    assert len(lines) == 1, out[-3000:]
    sweep_id = lines[0].split("--resume ")[1].split()[0]
    assert (tmp_path / "tune" / sweep_id / "fedsweep_sweep.json").is_file()  # the line names a sweep --resume finds
    _, runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "early")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert (parent.info.status, parent.data.tags["status"]) == ("KILLED", "interrupted")
    assert not [r for r in runs if r.info.status == "RUNNING"]


def test_sigterm_while_ray_starts_ends_the_command_with_nothing_left(tmp_path):
    """SIGTERM while the driver's local Ray is starting (its processes exist, no run yet): Ray's own
    handler would raise SystemExit in the middle of the start (a traceback, at times Ray's C++ abort, exit 134).
    The signal waits for the start to end: exit 130, no run left RUNNING, and Ray's processes go with it."""
    args = _space(tmp_path, "starting", ONE_TRIAL)

    seen: set[int] = set()
    ray_seen = []  # whether Ray's processes ran when the signal was sent (they may be gone once the command ends)

    def ray_starting(proc) -> bool:
        from platform.cli import descendant_processes

        seen.update(descendant_processes(proc.pid))
        if any("gcs_server" in c or "raylet" in c for c in process_cmdlines(seen).values()):
            ray_seen.append(True)
        return bool(ray_seen)

    code, out = _sigterm_when(args, ray_starting, every=0.2)
    _ends_cleanly(code, out)
    assert ray_seen, out[-3000:]  # the signal came while Ray started, not after the command ended on its own
    deadline = time.time() + 40  # the reaper's work, short of the 60 s Ray's agents linger without it
    while [p for p in seen if process_running(p)] and time.time() < deadline:
        time.sleep(0.25)
    assert not [p for p in seen if process_running(p)], process_cmdlines(seen)
    if os.path.exists(tmp_path / "mlflow.db") and _runs_in_store(str(tmp_path / "mlflow.db")):
        _, runs = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "starting")
        assert not [r for r in runs if r.info.status == "RUNNING"]
        assert sum("continue with:" in line for line in out.splitlines()) == 1, out[-3000:]


@pytest.mark.slow
def test_a_trial_restored_under_a_new_id_after_kill_9_keeps_its_run(tmp_path):
    """kill -9 of the driver just after trials start, then --resume. Tune restores a trial it had
    not saved under a new trial id, which must not get a second child run beside the first driver's (6 runs for a
    4-trial sweep, an interrupted orphan per configuration): it continues the run made for the same trial key:
    one run per configuration, every round logged once, none left RUNNING."""
    space = {**FAST_SPACE, "parameters": {"clients.lr": {"grid": [0.02, 0.05, 0.1, 0.2]}},
             "base": {**FAST_SPACE["base"], "rounds": 4},
             # no trial checkpoints: Tune then syncs its experiment state to the storage only at the start (a
             # checkpoint forces a sync), so the trials it creates later are unknown to --resume: new ids
             "search": {"searcher": "grid", "num_samples": 1, "seeds": [0], "metric": "val_accuracy", "mode": "max",
                        "max_concurrent_trials": 2}}
    args = _space(tmp_path, "restored", space)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _sweep_until(args, "[trial 4/4] start", signal.SIGKILL)
    _, runs = mlflow_runs(uri, "restored")
    assert [r for r in runs if r.info.status == "RUNNING"]  # what the killed driver left open
    resumed = run_cli("platform.sweep", *args, "--resume", cwd=REPO_ROOT, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    client, runs = mlflow_runs(uri, "restored")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    described = [(c.info.run_name, c.info.status, c.data.tags["status"]) for c in children]
    assert sorted(float(c.data.params["clients.lr"]) for c in children) == [0.02, 0.05, 0.1, 0.2], described
    assert all(c.info.status == "FINISHED" and c.data.tags["status"] == "completed" for c in children), described
    trial_ids = [c.data.tags["fedsweep.trial_id"] for c in children]
    assert len(set(trial_ids)) == 4, trial_ids
    for child in children:
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy")]
        assert steps == [1, 2, 3, 4], (child.info.run_name, steps)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert (parent.info.status, parent.data.tags["status"]) == ("FINISHED", "completed")


@pytest.mark.slow
def test_repair_leaves_a_live_resumed_sweep_alone(tmp_path):
    """kill -9, then --resume, then --repair while the resumed sweep runs. The parent names the
    resumed driver, not the dead first one, so --repair leaves the live sweep's parent alone. The resumed driver is held
    with SIGSTOP while --repair looks (it is alive, whatever the machine's speed), then let go."""
    space = {**ONE_TRIAL, "base": {**ONE_TRIAL["base"], "rounds": 6},
             "search": {**ONE_TRIAL["search"], "checkpoint_every": 2}}
    args = _space(tmp_path, "repaired", space)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _sweep_until(args, "[trial 1/1] round 2/6", signal.SIGKILL)
    resumed = subprocess.Popen([sys.executable, "-m", "platform.sweep", *args, "--resume"], cwd=REPO_ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in resumed.stdout:
        seen.append(line)
        if "[trial 1/1] round" in line:
            break
    resumed.send_signal(signal.SIGSTOP)
    try:
        repair = run_cli("platform.sweep", "--repair", "--tracking-uri", uri, cwd=REPO_ROOT, timeout=300)
    finally:
        resumed.send_signal(signal.SIGCONT)
    rest, _ = resumed.communicate(timeout=600)
    out = "".join(seen) + rest
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert "repaired 0 sweep(s)" in repair.stdout and f":{resumed.pid}" in repair.stdout, repair.stdout
    assert resumed.returncode == 0, out[-3000:]
    _, runs = mlflow_runs(uri, "repaired")
    assert [(r.info.status, r.data.tags["status"]) for r in runs] == [("FINISHED", "completed")] * 2
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.data.tags["fedsweep.driver"].endswith(f":{resumed.pid}")
