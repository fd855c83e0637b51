"""Faults of the driver's world, injected for real while a sweep runs: the disk under its results fills up (a 30 MB
tmpfs as its results home), its MLflow store is locked by another process (``BEGIN EXCLUSIVE`` held 60 s, at the
start and once round 1 has printed), its terminal hangs up (SIGHUP), its own raylet is killed (kill -9), its Optuna
storage is deleted or truncated. Each is a real ``python -m platform.sweep`` with its own local Ray, a real SQLite
MLflow store and real Optuna. A sweep that cannot go on closes every run it opened, prints one line saying why and the
line that continues it, and exits non-zero; the asserts are the exit code, those lines, and the runs in the store
(none left RUNNING, none twice, every round logged once)."""
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import REPO_ROOT, mlflow_runs, process_cmdlines, run_cli
from tests.integration.test_sweep import FAST_SPACE, _sweep_until
from tests.integration.test_sweep_signals import ONE_TRIAL, _space

pytestmark = pytest.mark.slow  # every test runs a sweep, most of them two

TWO_TRIALS = {**FAST_SPACE, "parameters": {"clients.lr": {"grid": [0.02, 0.05]}},
              "base": {**FAST_SPACE["base"], "rounds": 4},
              "search": {"searcher": "grid", "num_samples": 1, "seeds": [0], "metric": "val_accuracy", "mode": "max",
                         "max_concurrent_trials": 1}}

HOLD_LOCK = ("import sqlite3, sys, time\n"
             "c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)\n"
             "c.execute('BEGIN EXCLUSIVE')\n"
             "print('locked', flush=True)\n"
             "time.sleep(float(sys.argv[2]))\n"
             "c.execute('COMMIT')\n")


def _sweep_acting(args: list[str], marker, act, env: dict | None = None, timeout: int = 600) -> tuple[int, str, float]:
    """Run ``python -m platform.sweep args`` as a user would; once a printed line contains ``marker`` (None: never),
    call ``act(proc)``, once. Returns the exit code, everything printed and the seconds it ran."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "platform.sweep", *args], cwd=REPO_ROOT,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen, acted = [], False
    for line in proc.stdout:
        seen.append(line)
        if not acted and marker is not None and marker in line:
            acted = True
            act(proc)
    proc.wait(timeout=timeout)
    return proc.returncode, "".join(seen), time.monotonic() - started


def _hold_lock(db: str, seconds: float) -> subprocess.Popen:
    """Another process holding ``BEGIN EXCLUSIVE`` on the SQLite file ``db`` for ``seconds``, from when this returns."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, db, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def _fill(directory) -> str:
    """Fill the filesystem holding ``directory`` to its last byte with one file; its path."""
    path = os.path.join(directory, "filler")
    handle = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    os.write(handle, b"\0" * chunk)
            except OSError:
                continue
    finally:
        os.close(handle)
    return path


@pytest.fixture
def small_disk(tmp_path):
    """A real 30 MB tmpfs mounted at ``tmp_path/disk``, unmounted after the test; skipped where mounting is refused
    (mounting needs root)."""
    path = tmp_path / "disk"
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=30m", "tmpfs", str(path)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 30 MB tmpfs to fill ({done.stderr.strip() or 'mount refused'}; needs root)")
    yield path
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _lines(out: str, prefix: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(prefix)]


def _stopped_cleanly(code: int, out: str, why: str) -> str:
    """Exit 1 with our two lines: one ``error:`` saying ``why``, one ``continue with:``; no traceback, none of Ray's
    lines. Returns the continue-with line's arguments."""
    assert code == 1, out[-3000:]
    errors = _lines(out, "error: ")
    assert len(errors) == 1 and why in errors[0], out[-3000:]
    log = errors[0].rsplit("(traceback: ", 1)[1].rstrip(")")
    assert os.path.isfile(log) and "Traceback" in open(log).read(), log  # the traceback is kept, off the console
    for noise in ("Traceback", "(raylet)", "[state-dump]", "Logging error", "core_worker"):
        assert noise not in out, out[-3000:]
    (resume,) = _lines(out, "continue with: ")
    return resume.split("continue with: ", 1)[1].split()[3:]


def _closed(uri: str, name: str):
    """The sweep's runs, after asserting none is RUNNING; (client, parent, children)."""
    client, runs = mlflow_runs(uri, name)
    assert not [r for r in runs if r.info.status == "RUNNING"], [(r.info.run_name, r.info.status) for r in runs]
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return client, parent, [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def _each_round_once(client, children, rounds: int) -> None:
    for child in children:
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy")]
        assert steps == list(range(1, rounds + 1)), (child.info.run_name, steps)


def test_a_disk_that_fills_mid_sweep_stops_it_in_one_line_with_every_run_closed(small_disk, tmp_path):
    """The results home (MLflow store, Tune storage, stage cache, Optuna storage) on a 30 MB tmpfs filled to its last
    byte as trial 1 starts: the sweep stops at its next write, closes its runs in place (MLflow's own writes need
    room for SQLite's journal), says which disk is full, and the printed line continues it once there is room."""
    path = tmp_path / "full.yaml"
    path.write_text(yaml.safe_dump(TWO_TRIALS, sort_keys=False))
    env = {"FEDSWEEP_HOME": str(small_disk)}
    filler = []
    code, out, _ = _sweep_acting([str(path)], "[trial 1/2] start", lambda proc: filler.append(_fill(small_disk)),
                                 env=env)
    resume = _stopped_cleanly(code, out, "is full (ENOSPC: no space left on device)")
    error = _lines(out, "error: ")[0]
    assert f"the disk holding {small_disk}" in error and len(out.splitlines()) <= 6, out
    log = error.rsplit("(traceback: ", 1)[1].rstrip(")")
    if not log.startswith(str(tmp_path)):
        os.unlink(log)  # the full disk refused it: in the system's temporary directory
    uri = f"sqlite:///{small_disk / 'mlflow.db'}"
    _, parent, children = _closed(uri, "full")
    assert (parent.info.status, parent.data.tags["status"]) == ("FAILED", "failed")  # rows rewritten in place:
    assert "fedsweep.stopped_by" not in parent.data.tags  # a new tag needs room the disk does not have
    assert [(c.info.status, c.data.tags["status"]) for c in children] == [("KILLED", "interrupted")]
    os.unlink(filler[0])  # room again: the printed line continues the sweep
    resumed = run_cli("platform.sweep", *resume, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    client, parent, children = _closed(uri, "full")
    assert (parent.info.status, parent.data.tags["status"]) == ("FINISHED", "completed")
    assert sorted(float(c.data.params["clients.lr"]) for c in children) == [0.02, 0.05]  # one run per trial
    _each_round_once(client, children, 4)


def test_a_full_disk_under_the_tune_storage_alone_stops_the_sweep_naming_that_disk(small_disk, tmp_path):
    """Only Tune's storage on the 30 MB tmpfs, filled as trial 1 starts; MLflow and Optuna elsewhere keep working.
    Tune only logs a failed save of its state and goes on: the sweep stops when Tune reports that (or at its own next
    write there), names that disk, closes its runs, and continues from the printed line once there is room."""
    path = tmp_path / "tune_full.yaml"
    path.write_text(yaml.safe_dump(TWO_TRIALS, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = [str(path), "--tracking-uri", uri, "--storage-path", str(small_disk / "tune")]
    filler, home = [], {"FEDSWEEP_HOME": str(tmp_path / "home")}  # where the log goes: the Tune storage is full
    code, out, _ = _sweep_acting(args, "[trial 1/2] start", lambda proc: filler.append(_fill(small_disk)), env=home)
    resume = _stopped_cleanly(code, out, "is full (ENOSPC")
    assert f"the disk holding {small_disk / 'tune'}" in _lines(out, "error: ")[0], out[-3000:]
    client, parent, children = _closed(uri, "tune_full")
    assert (parent.info.status, parent.data.tags["status"]) == ("FAILED", "failed")
    assert "ENOSPC" in parent.data.tags["fedsweep.stopped_by"]  # the MLflow store had room for it
    os.unlink(filler[0])
    resumed = run_cli("platform.sweep", *resume, env=home, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    client, parent, children = _closed(uri, "tune_full")
    assert parent.data.tags["status"] == "completed" and "fedsweep.stopped_by" not in parent.data.tags
    assert sorted(float(c.data.params["clients.lr"]) for c in children) == [0.02, 0.05]
    _each_round_once(client, children, 4)


def test_an_mlflow_store_locked_at_the_start_is_tried_for_30_s_then_one_line(tmp_path):
    """Another process holds ``BEGIN EXCLUSIVE`` on the MLflow store for 60 s as the sweep starts: the sweep tries
    again for 30 s (backoff between tries), then stops with one line naming the store and the wait, and has written
    nothing."""
    from mlflow.tracking import MlflowClient

    args = _space(tmp_path, "locked", ONE_TRIAL)
    db = str(tmp_path / "mlflow.db")
    MlflowClient(f"sqlite:///{db}").search_experiments()  # the store exists: its lock is what stops the sweep
    holder = _hold_lock(db, 60)
    try:  # the results home takes the traceback's file
        code, out, seconds = _sweep_acting(args, None, None, env={"FEDSWEEP_HOME": str(tmp_path / "home")})
    finally:
        holder.wait(timeout=120)
    assert code == 1, out[-3000:]
    (error,) = _lines(out, "error: ")
    assert error.startswith(f"error: the MLflow store {db} is locked by another process, still after "), error
    assert "s of waiting (a sweep tries again for 30 s; database is locked)" in error and seconds >= 30, error
    assert len(out.strip().splitlines()) == 1 and "Traceback" not in out, out[-3000:]
    assert MlflowClient(f"sqlite:///{db}").search_runs(["0"]) == []
    assert not [e for e in MlflowClient(f"sqlite:///{db}").search_experiments() if e.name == "locked"]


def test_an_mlflow_store_locked_mid_sweep_stops_it_and_closes_its_runs_once_free(tmp_path):
    """The same lock taken once round 1 has printed: the sweep's next write waits 30 s, the sweep stops; closing
    waits for the store again and closes the runs once the other process lets go (60 s). Every round it logged is
    there once."""
    space = {**ONE_TRIAL, "base": {**ONE_TRIAL["base"], "rounds": 4}}
    args = _space(tmp_path, "locked_late", space)
    db = str(tmp_path / "mlflow.db")
    holders = []
    try:
        code, out, _ = _sweep_acting(args, "[trial 1/1] round 1/4", lambda proc: holders.append(_hold_lock(db, 60)))
    finally:
        for holder in holders:
            holder.wait(timeout=120)
    assert holders, out[-3000:]
    _stopped_cleanly(code, out, f"the MLflow store {db} is locked by another process, still after ")
    client, parent, (child,) = _closed(f"sqlite:///{db}", "locked_late")
    assert (parent.info.status, parent.data.tags["status"]) == ("FAILED", "failed")
    assert "is locked by another process" in parent.data.tags["fedsweep.stopped_by"]
    assert (child.info.status, child.data.tags["status"]) == ("KILLED", "interrupted")
    steps = [m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy")]
    assert steps and steps == sorted(set(steps)) and steps[0] == 1, steps  # logged once each, none lost before


def test_sighup_to_the_driver_ends_the_sweep_as_sigterm_does(tmp_path):
    """SIGHUP (the driver's terminal closed) once round 1 has printed: as with SIGTERM, the open runs are closed as
    interrupted, one line says so and continues the sweep, exit 130; the process does not just die (exit 129)."""
    args = _space(tmp_path, "hangup", ONE_TRIAL)
    code, out = _sweep_until(args, "[trial 1/1] round 1/3", signal.SIGHUP)
    assert code == 130, out[-3000:]
    (line,) = [line for line in out.splitlines() if "continue with: " in line]
    assert line.startswith("interrupted by SIGHUP (its terminal closed); continue with: python -m platform.sweep "
                           "--resume hangup-"), line
    assert "Traceback" not in out, out[-3000:]
    _, parent, children = _closed(f"sqlite:///{tmp_path / 'mlflow.db'}", "hangup")
    assert (parent.info.status, parent.data.tags["status"]) == ("KILLED", "interrupted")
    assert [(c.info.status, c.data.tags["status"]) for c in children] == [("KILLED", "interrupted")]


def test_the_sweeps_own_raylet_killed_stops_it_in_one_line_before_ray_ends_the_process(tmp_path):
    """kill -9 of the raylet of the sweep's own local Ray once round 1 has printed. Ray ends a driver whose raylet
    is gone from C++ (exit 1, nothing closed) once it notices; the sweep notices first, closes its runs as
    interrupted, says its node was lost (Ray's dump of the raylet's log goes to the log file the line names), and
    the printed line continues it on a new Ray."""
    from platform.cli import descendant_processes

    space = {**ONE_TRIAL, "base": {**ONE_TRIAL["base"], "rounds": 4}}
    args = _space(tmp_path, "nodeless", space)
    killed = []

    def kill_raylet(proc) -> None:
        for pid, cmdline in process_cmdlines(descendant_processes(proc.pid)).items():
            if cmdline.split(" ", 1)[0].endswith("/raylet"):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    code, out, _ = _sweep_acting(args, "[trial 1/1] round 1/4", kill_raylet)
    assert killed, out[-3000:]
    resume = _stopped_cleanly(code, out, f"this sweep's Ray node was lost: its raylet (pid {killed[0]}) died")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _, parent, children = _closed(uri, "nodeless")
    assert (parent.info.status, parent.data.tags["status"]) == ("KILLED", "interrupted")
    assert parent.data.tags["fedsweep.stopped_by"].startswith("this sweep's Ray node was lost")
    assert [(c.info.status, c.data.tags["status"]) for c in children] == [("KILLED", "interrupted")]
    resumed = run_cli("platform.sweep", *resume, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    client, parent, children = _closed(uri, "nodeless")
    assert parent.data.tags["status"] == "completed" and len(children) == 1
    _each_round_once(client, children, 4)


@pytest.mark.parametrize("fault", ["deleted", "truncated"])
def test_an_optuna_storage_lost_mid_sweep_is_said_once_and_never_advertised(tmp_path, fault):
    """The sweep's Optuna SQLite file deleted (SQLite would go on writing to the unlinked file, unseen) or truncated
    to 0 bytes once trial 1 has completed: one warning line, the parent run tagged with what was lost, the sweep
    completes from MLflow, and its closing lines offer no optuna-dashboard for the study that is gone."""
    args = _space(tmp_path, "studyless", TWO_TRIALS)
    study = tmp_path / "optuna.db"

    def lose(proc) -> None:
        if fault == "deleted":
            study.unlink()
        else:
            os.truncate(study, 0)

    code, out, _ = _sweep_acting(args, "[trial 1/2] completed", lose)
    assert code == 0, out[-3000:]
    (warning,) = [line for line in out.splitlines() if " is lost: " in line]
    said = "was deleted" if fault == "deleted" else "was truncated or overwritten (0 bytes, no SQLite header)"
    assert warning.startswith("warning: Optuna study studyless-") and f"{study} {said}" in warning, warning
    assert not _lines(out, "optuna: ") and "optuna-dashboard sqlite" not in out, out[-3000:]
    client, parent, children = _closed(f"sqlite:///{tmp_path / 'mlflow.db'}", "studyless")
    assert f"{study} {said}" in parent.data.tags["fedsweep.optuna_lost"]
    assert "lost mid-sweep" in parent.data.tags["mlflow.note.content"]
    assert [c.data.tags["status"] for c in children] == ["completed", "completed"]
    _each_round_once(client, children, 4)
    if fault == "deleted":
        assert not study.exists()  # not made again, empty, for a dashboard to show nothing
    else:
        assert study.stat().st_size == 0
        with pytest.raises(sqlite3.DatabaseError):
            sqlite3.connect(f"file:{study}?mode=ro", uri=True).execute("select * from studies").fetchall()
