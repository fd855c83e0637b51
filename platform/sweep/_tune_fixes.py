"""A fix for Ray Tune's retry of a trial whose reused (cached) actor is dead, applied before a sweep runs.

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
"""
from __future__ import annotations

import functools

_APPLIED = False


def apply() -> bool:
    """Wrap the two controller methods; returns whether the fix is in place (False: Tune changed, left alone)."""
    global _APPLIED
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
