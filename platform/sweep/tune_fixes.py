"""Fixes of Ray Tune applied before a sweep runs: the retry of a trial whose reused (cached) actor is dead, and
whole writes of the experiment state.

The defect (Ray 2.50–2.60 at least, ``ray/tune/execution/tune_controller.py``). With ``reuse_actors=True`` a
finished trial's actor is cached and handed to the next trial through a ``reset`` task, while that trial is still
PENDING. When the cached actor has died meanwhile (its node was lost, its process killed), the reset task fails
with a ``RayActorError`` and Tune handles that one failure twice:

1. the actor's error callback (``_actor_failed``) sees a PENDING trial, counts a failure and requeues the trial
   for a retry (PENDING again);
2. the reset task's own error callback then calls ``_trial_task_failure`` with the same exception: a second
   failure is counted and, the trial being PENDING rather than RUNNING, it is not retried but ended as ERROR.

Also the trial stays in ``_resetting_trials`` (only a *successful* reset removes it), so a retry would take the
"already resetting" shortcut and never get an actor.

So a trial that was being handed a dead cached actor failed for good whatever ``search.max_failures`` said, and,
having never run, had no MLflow run (reproduced with plain Tune by killing a cached actor's process between trials:
``tests/integration/test_sweep.py::test_a_trial_handed_a_dead_reused_actor_is_run_again``). The fix: the second
call for the same trial and exception object is skipped, and a trial whose failure is handled leaves
``_resetting_trials``. Applied once per process, only where Tune still has the methods it wraps.

Also: a trial that fails with a config error (:func:`deterministic`) is failed once, not retried. Tune retries
every failure up to ``search.max_failures``, but the same sampled config fails the same way every time: a retry
only doubled the tracebacks and the wait. The trial's ``max_failures`` is set to 0 before Tune decides.

Also: Tune's experiment state is written whole (:func:`whole_state_writes`). Tune 2.60 writes the experiment state
(``experiment_state-*.json``) into the driver's staging directory with a plain ``open(..., "w")``, and its syncer
copies the staging directory to the storage with ``pyarrow.fs.copy_files``, which on a local path writes each file in
place. A driver that dies mid-copy (a full disk, kill -9) leaves a truncated state in the storage; a save while the
previous copy still runs (the copy is a background thread) hands the copy a half-written file. ``--resume`` of a
truncated searcher pickle hangs in Tune's restore without a word. With the fix, the staging JSON is a temporary file
renamed into place, and a copy to a local storage writes each file to a temporary name in its destination directory,
fsyncs it and renames it into place (then fsyncs the directory): every state file in the storage is the old one or
the new one, whole. A bucket needs nothing: an object is one PUT, never seen partial. ``--resume`` refuses, in one
line, a state that is unreadable all the same (``platform.sweep.state.check_state_readable``).
"""
from __future__ import annotations

import functools
import json
import os
import secrets

_APPLIED = False
_WHOLE: list[str] = []  # the parts of whole_state_writes in place


def apply() -> bool:
    """Wrap the two controller methods, and make the state writes whole (:func:`whole_state_writes`); returns
    whether the retry fix is in place (False: Tune changed, left alone)."""
    global _APPLIED
    whole_state_writes()
    if _APPLIED:
        return True
    try:
        from ray.tune.execution.tune_controller import TuneController
    except ImportError:
        return False
    if not all(hasattr(TuneController, m) for m in ("_actor_failed", "_trial_task_failure")):
        return False
    actor_failed, task_failure = TuneController._actor_failed, TuneController._trial_task_failure

    @functools.wraps(actor_failed)
    def _actor_failed(self, tracked_actor, exception):
        trial = self._actor_to_trial.get(tracked_actor)
        waiting = trial is not None and trial in (self._pending_trials | self._paused_trials)
        actor_failed(self, tracked_actor, exception)
        if waiting:  # the original handled this trial's failure: its task's error callback follows, same exception
            self.__dict__.setdefault("_fedsweep_handled_failures", {})[trial.trial_id] = exception

    @functools.wraps(task_failure)
    def _trial_task_failure(self, trial, exception):
        handled = self.__dict__.setdefault("_fedsweep_handled_failures", {})
        if handled.get(trial.trial_id) is exception:
            del handled[trial.trial_id]
            return None
        getattr(self, "_resetting_trials", set()).discard(trial)
        return task_failure(self, trial, exception)

    TuneController._actor_failed = _actor_failed
    TuneController._trial_task_failure = _trial_task_failure
    if hasattr(TuneController, "_process_trial_failure"):
        process_failure = TuneController._process_trial_failure

        @functools.wraps(process_failure)
        def _process_trial_failure(self, trial, exception):
            if deterministic(exception):  # the same config fails the same way: fail it once, never retry
                trial.max_failures = 0
            return process_failure(self, trial, exception)

        TuneController._process_trial_failure = _process_trial_failure
    _APPLIED = True
    return True


def whole_state_writes() -> bool:
    """Make Tune write its experiment state whole (see the module doc): the staging JSON by rename, the copy to a
    local storage file by file by rename. Each part only where Tune still has what it replaces; returns whether both
    are in place."""
    try:
        from ray.train._internal import storage as train_storage
        from ray.tune.execution.tune_controller import TuneController
    except ImportError:
        return False
    syncer = getattr(train_storage, "_FilesystemSyncer", None)
    if "copy" not in _WHOLE and syncer is not None and hasattr(syncer, "_sync_up_command"):
        sync_up_command = syncer._sync_up_command

        @functools.wraps(sync_up_command)
        def _sync_up_command(self, local_path, uri, exclude=None):
            import pyarrow.fs as pafs

            if exclude or not isinstance(getattr(self, "storage_filesystem", None), pafs.LocalFileSystem):
                return sync_up_command(self, local_path=local_path, uri=uri, exclude=exclude)
            return copy_whole, {"local_path": local_path, "fs_path": uri}

        syncer._sync_up_command = _sync_up_command
        _WHOLE.append("copy")
    import inspect

    try:
        source = inspect.getsource(TuneController.save_to_dir)
    except (OSError, TypeError):
        source = ""
    if "save" not in _WHOLE and "json.dump(runner_state, f, cls=TuneFunctionEncoder)" in source and all(
            hasattr(TuneController, name) for name in ("_get_trial_checkpoints", "experiment_state_file_name")):
        TuneController.save_to_dir = _save_to_dir
        _WHOLE.append("save")
    return len(_WHOLE) == 2


def _save_to_dir(self):
    """``TuneController.save_to_dir`` of Ray 2.60 (the trials, the controller's own state, the searcher's and the
    callbacks'), its experiment-state JSON written to a temporary file and renamed into place."""
    from ray.tune.utils.serialization import TuneFunctionEncoder

    runner_state = {"trial_data": list(self._get_trial_checkpoints().values()), "runner_data": self.__getstate__(),
                    "stats": {"start_time": self._start_time}}
    staging = self._storage.experiment_driver_staging_path
    os.makedirs(staging, exist_ok=True)
    data = json.dumps(runner_state, cls=TuneFunctionEncoder).encode()
    _replace_whole(os.path.join(staging, self.experiment_state_file_name), lambda fh: fh.write(data), sync=False)
    self._search_alg.save_to_dir(staging, session_str=self._session_str)
    self._callbacks.save_to_dir(staging, session_str=self._session_str)


def copy_whole(local_path: str, fs_path: str) -> None:
    """Copy the file or directory tree ``local_path`` to the local path ``fs_path``, each file whole: written to a
    temporary name beside its destination, fsynced and renamed into place, then its directory fsynced. A source file
    gone meanwhile (a staging temporary file renamed) is skipped."""
    import shutil

    if os.path.isfile(local_path):
        pairs = [(local_path, fs_path)]
    else:
        pairs = [(os.path.join(root, name), os.path.join(fs_path, os.path.relpath(root, local_path), name))
                 for root, _, names in os.walk(local_path) for name in names]
    directories = set()
    for source, destination in pairs:
        destination = os.path.normpath(destination)
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        try:
            with open(source, "rb") as fin:
                _replace_whole(destination, lambda fh: shutil.copyfileobj(fin, fh, 1 << 20))
        except FileNotFoundError:
            if os.path.exists(source):
                raise
            continue
        directories.add(os.path.dirname(destination))
    for directory in directories:
        _fsync_dir(directory)


def _replace_whole(path: str, write, sync: bool = True) -> None:
    """``write(file)`` into a temporary file beside ``path`` (a dot name no Tune pattern matches), flushed (and
    fsynced when ``sync``), then renamed over ``path``; the temporary file is removed if anything fails."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _fsync_dir(directory: str) -> None:
    """Make the renames in ``directory`` durable (where the platform allows opening a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def deterministic(exception: BaseException | None) -> bool:
    """Whether a trial's failure is one a retry would repeat: a :class:`~platform.errors.UserError` (a
    ``ConfigError`` of the sampled configuration, e.g. ``clients.clients_per_round`` above the sampled
    ``clients.num_clients``) anywhere in its chain, however Ray wrapped it (``RayTaskError.cause``, ``__cause__``,
    ``__context__``). A lost node, a killed process or an out-of-memory error is not: those are retried
    (``search.max_failures``)."""
    from platform.errors import UserError

    seen, todo = set(), [exception]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, UserError):
            return True
        todo.extend([getattr(err, "cause", None), err.__cause__, err.__context__])
    return False
