"""The stores under the machine's faults, for real and without a sweep: a SQLite store locked by another process (a
second process holding ``BEGIN EXCLUSIVE``), the MLflow store on a real tmpfs filled to its last byte, and an Optuna
storage deleted or truncated under the recorder that writes to it."""
import os
import sqlite3
import time

import pytest

from tests.integration.test_driver_faults import _fill, _hold_lock, small_disk  # noqa: F401 - a fixture


def test_a_store_locked_for_a_moment_is_waited_for(tmp_path):
    """A lock let go within the wait: the write waits for it (tries again with backoff) and lands, once."""
    from mlflow.tracking import MlflowClient

    from platform.results.tracking import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()
    holder = _hold_lock(str(tmp_path / "mlflow.db"), 3)
    started = time.monotonic()
    tracker = Tracker(uri, "waited")
    run_id = tracker.start_run("run", {"status": "running"})
    assert time.monotonic() - started >= 2
    holder.wait(timeout=30)
    assert [r.info.run_id for r in tracker.client.search_runs([tracker.experiment_id])] == [run_id]


def test_a_store_locked_past_the_wait_is_one_line_naming_it(tmp_path):
    """A lock held longer than the wait: the write is tried again with backoff until the wait has passed, then
    :class:`StoreLocked`, whose line names the store and how long it waited, and which the command prints as it is;
    nothing was written."""
    from platform.errors import error_line
    from platform.results.store_faults import StoreLocked, wait_out_lock

    db = str(tmp_path / "store.db")
    sqlite3.connect(db).execute("CREATE TABLE runs (id INTEGER)").connection.commit()
    tries = []

    def write() -> None:
        tries.append(time.monotonic())
        with sqlite3.connect(db, timeout=0.1) as connection:
            connection.execute("INSERT INTO runs VALUES (1)")

    holder = _hold_lock(db, 60)
    try:
        with pytest.raises(StoreLocked) as caught:
            wait_out_lock(write, f"sqlite:///{db}", wait_s=2.0)
    finally:
        holder.kill()
        holder.wait()
    assert len(tries) >= 3 and tries[-1] - tries[0] < 2.0 + 0.5, tries  # backed off, gave up once 2 s had passed
    line = str(caught.value)
    assert line.startswith(f"the MLflow store {db} is locked by another process, still after ") and \
        line.endswith(" s of waiting (a sweep tries again for 2 s; database is locked)"), line
    assert error_line(caught.value) == line
    assert sqlite3.connect(db).execute("SELECT count(*) FROM runs").fetchone() == (0,)  # nothing written


def test_runs_a_full_disk_has_no_room_to_close_are_closed_in_place(small_disk):  # noqa: F811 - the fixture
    """MLflow cannot end a run on a full disk (SQLite needs a new block for its journal); the runs' own rows can be
    rewritten in place: the parent and its RUNNING child end, the store stays sound."""
    from platform.results.store_faults import close_runs_in_place
    from platform.results.tracking import Tracker
    from platform.sweep.faults import fault_line

    uri = f"sqlite:///{small_disk / 'mlflow.db'}"
    tracker = Tracker(uri, "full")
    parent = tracker.start_run("sweep", {"status": "running"})
    child = tracker.start_run("trial", {"status": "running"}, parent_run_id=parent)
    filler = _fill(small_disk)
    with pytest.raises(Exception) as caught:
        tracker.end_run(parent, "FAILED")
    assert fault_line(caught.value, uri) == (f"the disk holding {small_disk / 'mlflow.db'} is full (ENOSPC: no space "
                                             f"left on device)")
    assert close_runs_in_place(uri, parent, "FAILED", "failed") == 2
    os.unlink(filler)
    runs = {r.info.run_id: r for r in tracker.client.search_runs([tracker.experiment_id])}
    assert (runs[parent].info.status, runs[parent].data.tags["status"]) == ("FAILED", "failed")
    assert (runs[child].info.status, runs[child].data.tags["status"]) == ("KILLED", "interrupted")
    assert runs[child].info.end_time and runs[parent].info.end_time
    with sqlite3.connect(small_disk / "mlflow.db") as connection:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


@pytest.mark.parametrize("fault", ["deleted", "truncated"])
def test_an_optuna_storage_that_goes_away_is_a_lost_study(tmp_path, capsys, fault):
    """A recorder whose SQLite file is deleted (SQLite would write on to the unlinked file) or truncated after its
    first trial: the next trial finds it, one warning line, :func:`lost_studies` names it, nothing more is written
    and no new file is made."""
    from platform.sweep.optuna_store import StudyRecorder, lost_studies

    path = tmp_path / "optuna.db"
    name = f"lost-{fault}"
    recorder = StudyRecorder(f"sqlite:///{path}", name, [("val_accuracy", "max")], {})
    recorder.record({}, {"val_accuracy": 0.5}, {1: 0.5}, "complete", {"run_name": "#1"})
    assert len(recorder.study.trials) == 1 and recorder.lost is None
    if fault == "deleted":
        path.unlink()
    else:
        os.truncate(path, 0)
    for number in (2, 3):
        recorder.record({}, {"val_accuracy": 0.6}, {1: 0.6}, "complete", {"run_name": f"#{number}"})
    said = "was deleted" if fault == "deleted" else "was truncated or overwritten (0 bytes, no SQLite header)"
    assert recorder.lost == lost_studies()[name] == f"{path} {said}"
    warnings = [line for line in capsys.readouterr().err.splitlines() if " is lost: " in line]
    assert warnings == [f"warning: Optuna study {name} is lost: {path} {said}; the sweep goes on without it (every "
                        f"trial is in MLflow), and optuna-dashboard has nothing of it to open"]
    assert (not path.exists()) if fault == "deleted" else path.stat().st_size == 0


def test_runs_a_store_still_locked_cannot_close_are_left_to_repair(tmp_path):
    """Closing in place fails too while another process still holds the store's lock: the reason names the lock, the
    line names the ``--repair`` that closes the runs, and that command, run once the lock is let go, does (the
    parent's driver has exited)."""
    import socket
    import subprocess
    import sys

    from tests.conftest import run_cli

    from platform.results.store_faults import close_runs_in_place
    from platform.results.tracking import Tracker
    from platform.sweep.faults import repair_line

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()  # a driver that has exited: its pid is free
    tracker = Tracker(uri, "stuck")
    parent = tracker.start_run("sweep", {"status": "running", "fedsweep.search_space": "stuck",
                                         "fedsweep.driver": f"{socket.gethostname()}:{exited.pid}"})
    child = tracker.start_run("trial", {"status": "running"}, parent_run_id=parent)
    holder = _hold_lock(str(db), 60)
    try:
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            close_runs_in_place(uri, parent, "FAILED", "failed")
    finally:
        holder.kill()
        holder.wait()
    line = repair_line("database is locked", uri)
    assert line.endswith(f"close them with: python -m platform.sweep --repair --tracking-uri {uri}"), line
    repaired = run_cli("platform.sweep", "--repair", "--tracking-uri", uri, timeout=300)
    assert repaired.returncode == 0 and "repaired 1 sweep(s)" in repaired.stdout, repaired.stdout + repaired.stderr
    runs = {r.info.run_id: r for r in tracker.client.search_runs([tracker.experiment_id])}
    assert [runs[r].info.status for r in (parent, child)] == ["KILLED", "KILLED"]
