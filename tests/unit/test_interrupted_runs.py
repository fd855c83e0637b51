"""A SIGTERM or Ctrl-C while the driver starts a trial's MLflow run: the run is the sweep's own
from its creation, so the interrupt closes it as interrupted with the others, and the end-of-sweep sweep for orphans
no longer reports it as "left RUNNING by an earlier driver". A real SQLite MLflow store throughout."""
import time
import types

import pytest

from platform.config.run_schema import STATUS_INTERRUPTED, TAG_STATUS
from platform.results.tracking import Tracker, close_orphan_runs


def _children(tracker, parent):
    return tracker.client.search_runs([tracker.experiment_id], f"tags.mlflow.parentRunId = '{parent}'")


class _SignalDuringThePartition:
    """The sweep's shared data, asked whether it serves the trial just after the trial's run was created (the
    partition summary is written next): the signal arrives there."""

    def serves(self, config):
        raise KeyboardInterrupt("signal 15")


def test_a_run_interrupted_while_it_starts_is_closed_with_the_sweep_and_is_no_orphan(tmp_path):
    from platform.config.search_space import load_search_space
    from platform.sweep.callback import MlflowSweepCallback

    space = load_search_space("smoke", {"rounds": 1})
    tracker = Tracker(f"sqlite:///{tmp_path}/m.db", "smoke")
    parent = tracker.start_run(name="sweep", tags={})
    started_ms = int(time.time() * 1000)
    callback = MlflowSweepCallback(tracker, parent, space, 1, 1, quiet=True, shared=_SignalDuringThePartition())
    trial = types.SimpleNamespace(trial_id="t1", config={"params": {"algorithm.name": "fedavg", "clients.lr": 0.05}})
    with pytest.raises(KeyboardInterrupt):
        callback.on_trial_start(0, [trial], trial)
    (child,) = _children(tracker, parent)
    assert child.info.status == "RUNNING"  # created, then interrupted
    callback.close_open_runs(STATUS_INTERRUPTED, "KILLED")  # what the sweep does on Ctrl-C / SIGTERM
    assert close_orphan_runs(tracker, parent, started_since_ms=started_ms) == (0, 0)  # nothing left to report
    (child,) = _children(tracker, parent)
    assert (child.info.status, child.data.tags[TAG_STATUS]) == ("KILLED", STATUS_INTERRUPTED)


def test_orphans_are_told_apart_by_the_driver_that_created_them(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path}/m.db", "smoke")
    parent = tracker.start_run(name="sweep", tags={})
    tracker.start_run(name="earlier", tags={}, parent_run_id=parent)  # a killed driver's trial run
    time.sleep(0.01)  # ordering of two creation stamps (ms), not a timing assert
    started_ms = int(time.time() * 1000)
    time.sleep(0.01)
    tracker.start_run(name="own", tags={}, parent_run_id=parent)  # this driver's, never held by its callback
    assert close_orphan_runs(tracker, parent, started_since_ms=started_ms) == (1, 1)
    runs = _children(tracker, parent)
    assert sorted((r.info.run_name, r.info.status, r.data.tags[TAG_STATUS]) for r in runs) == [
        ("earlier", "KILLED", STATUS_INTERRUPTED), ("own", "KILLED", STATUS_INTERRUPTED)]
    assert close_orphan_runs(tracker, parent) == 0  # closed once: none left RUNNING
