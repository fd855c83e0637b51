"""A command's own process (``python -m platform.run``) starts its local Ray in the background while it imports torch
and checks the config, and leaves that instance to the reaper (``platform/reaper.py``) when it exits instead of
``ray.shutdown`` (``platform.cli.start_ray_early``, ``exit_command``). Whether it ends normally or refuses its
input while Ray is still starting, its MLflow run is closed and every process it started is gone soon after."""
import subprocess
import sys
import threading
import time

import yaml

from tests.conftest import REPO_ROOT, mlflow_runs, process_cmdlines, process_running

TINY = {"dataset": {"name": "digits"}, "partition": {"kind": "iid"}, "model": {"name": "cnn"},
        "algorithm": {"name": "fedavg"},
        "clients": {"num_clients": 4, "clients_per_round": 4, "local_epochs": 1, "batch_size": 16, "lr": 0.05},
        "rounds": 2, "seed": 0}



def _run_watched(args: list[str], cwd: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, set[int]]:
    """Run ``python -m platform.run args`` as a user would, collecting every descendant it has while it runs."""
    import os

    from platform.cli import descendant_processes

    proc = subprocess.Popen([sys.executable, "-m", "platform.run", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    seen: set[int] = set()

    def watch():
        while proc.poll() is None:
            seen.update(descendant_processes(proc.pid))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, err = proc.communicate(timeout=600)
    watcher.join()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), seen


def _all_gone(pids: set[int], within: float = 40.0) -> list[int]:
    """The ``pids`` still running after up to ``within`` s: room for the reaper under load, short of the 60 s that
    Ray's agents linger without it (platform/reaper.py)."""
    deadline = time.time() + within
    while [p for p in pids if process_running(p)] and time.time() < deadline:
        time.sleep(0.25)
    return [p for p in pids if process_running(p)]


def test_a_run_leaves_its_local_ray_to_the_reaper_with_its_mlflow_run_closed(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done, seen = _run_watched([str(config), "--tracking-uri", uri, "--address", "local"], cwd=REPO_ROOT,
                              env={"FEDSWEEP_HOME": str(tmp_path / "home")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "round   2" in done.stdout, done.stdout
    assert not done.stderr.strip(), done.stderr
    cmdlines = process_cmdlines(seen)
    assert any("raylet" in c for c in cmdlines.values()) or len(seen) > 3, cmdlines  # its own local instance
    left = _all_gone(seen)
    assert not left, process_cmdlines(left)
    _, runs = mlflow_runs(uri, "tiny")
    assert [(r.info.status, r.data.tags.get("status")) for r in runs] == [("FINISHED", "completed")]


def test_a_refused_config_ends_before_ray_starts_and_leaves_nothing(tmp_path):
    """Every load-time check runs before Ray starts: a bad --set value starts no Ray process at all."""
    done, seen = _run_watched(["smoke", "--set", "clients.lr=-1", "--address", "local"], cwd=str(tmp_path),
                              env={"MLFLOW_TRACKING_URI": "", "FEDSWEEP_HOME": str(tmp_path / "home")})
    assert done.returncode == 2, done.stderr
    assert [ln for ln in done.stderr.splitlines() if ln.strip()] == ["error: clients.lr: must be > 0, got -1.0"]
    assert not done.stdout.strip()
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())  # nothing written (no results home either)
    assert not seen, process_cmdlines(seen)  # no Ray process was started for a refused config
