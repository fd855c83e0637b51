"""The study a sweep runs (the whole sweep, or one scenario cell): Optuna's define-by-run space, the searcher and
scheduler, the Tune trainable and Tuner, the study run as consecutive Tune experiments (segments, restored on
``--resume``), and the best trial (or the Pareto front) of its results.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys

from platform.config.run_schema import (METRIC_BEST, METRIC_BEST_TRIAL, REPORTED_TEST_METRICS, diverged, figure,
                                        setting_metrics)
from platform.sweep.pareto import report_pareto
from platform.sweep.state import join_storage


class DefineByRun:
    """Optuna define-by-run space: conditional parameters are suggested only where their ``when`` holds.

    A class, not a closure, so Tune can pickle the searcher into its experiment checkpoint.
    """

    def __init__(self, parameters: dict):
        self.parameters = parameters

    def __call__(self, trial) -> None:
        import optuna  # deferred: start-up time

        from platform.sweep.segments import distributions

        chosen: dict = {}
        # one mapping from the space's kinds to Optuna's distributions, shared with a later segment's warm start
        for key, made in distributions(self.parameters).items():
            if not self.parameters[key].applies(chosen):
                continue
            if isinstance(made, optuna.distributions.FloatDistribution):
                chosen[key] = trial.suggest_float(key, made.low, made.high, log=made.log)
            elif isinstance(made, optuna.distributions.IntDistribution):
                chosen[key] = trial.suggest_int(key, made.low, made.high, log=made.log)
            else:
                chosen[key] = trial.suggest_categorical(key, list(made.choices))
        return None


def make_searcher(space, segment_index: int = 0, history=()):
    """Optuna TPE or random sampling (both sample for several objectives when ``search.metric`` is a list: Optuna
    then runs a multi-objective study); None for the grid searcher, whose Pareto front comes from the results.
    A later segment of a long study (platform/sweep/segments.py) gets its own sampler seed, and its study starts
    with the finished trials of the earlier segments (``history``)."""
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    from platform.sweep.segments import segment_sampler_seed, warm_start_study

    search = space.search
    if search.searcher == "grid":
        return None
    seed = segment_sampler_seed(search.sampler_seed, segment_index)
    sampler = (optuna.samplers.TPESampler(seed=seed) if search.searcher == "tpe"
               else optuna.samplers.RandomSampler(seed=seed))

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = {}
    if history:
        storage, _ = warm_start_study(space, list(history), "history")
        study = {"study_name": "history", "storage": storage}
    if search.multi_objective:  # lists of the same length: a study with one direction per objective
        return OptunaSearch(space=DefineByRun(space.parameters), metric=list(search.metrics),
                            mode=[mode for _, mode in search.objectives], sampler=sampler, **study)
    return OptunaSearch(space=DefineByRun(space.parameters), metric=search.metric, mode=search.mode, sampler=sampler,
                        **study)


def make_scheduler(space, rounds: int):
    sched = space.search.scheduler
    if sched.kind != "asha":
        return None
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr="round", max_t=rounds, grace_period=sched.grace_period,
                         reduction_factor=sched.reduction_factor)


def pin_public_image(space, base_config):
    """The search space with a relative ``public.image`` path made absolute in its base config (as the loaded
    config holds it), so trials, which run in their own directories, and a driver that leaves a Ray job's
    directory still find the file. Swept image paths should be absolute."""
    public = space.base.get("public")
    if not isinstance(public, dict) or public.get("image", base_config.public.image) == base_config.public.image:
        return space
    return dataclasses.replace(space, base={**space.base, "public": {**public, "image": base_config.public.image}})


def count_expected_trials(space) -> int:
    """Trials the sweep runs: ``num_samples`` (grid: times the grid); with scenarios, summed over the cells."""
    from platform.config.search_space import grid_points

    if space.scenarios:
        return sum(count_expected_trials(space.cell_space(i)) for i in range(len(space.cells())))
    return space.search.num_samples * (len(grid_points(space)) if space.search.searcher == "grid" else 1)


def sweep_trainable(space, base_config, shared, args):
    """The Tune trainable: :func:`platform.runtime.trial.trial_trainable` with the sweep's fixed arguments."""
    from platform.runtime.trial import trial_trainable
    from platform.stages.cache import default_cache_root
    from platform.stages.storage import normalise

    return trial_trainable(space.base, space.seeds, shared, base_config.resources,
                           normalise(args.cache_dir or default_cache_root()), use_cache=not args.no_cache,
                           checkpoint_every=space.search.checkpoint_every,
                           search_metrics=tuple(space.search.metrics))


def _tuner(trainable, space, base_config, storage, name, callback, segment, history=()):
    """A new Tuner for ``segment`` of ``space``'s study (a sweep without scenarios, or one scenario cell) in
    ``storage``/``name``; ``history``: the study's trials that ended in earlier segments."""
    from ray import tune

    from platform.stages.storage import tune_storage

    search = space.search
    storage_path, filesystem = tune_storage(storage)
    param_space = ({"params": tune.grid_search(list(segment.grid_points))} if search.searcher == "grid" else None)
    # Multi-objective: the searcher holds the metric and mode lists; Tune's own metric/mode take one metric only
    # (and no scheduler needs one: ASHA is refused at load), so Tune gets none and report_best computes the front.
    metric, mode = (None, None) if search.multi_objective else (search.metric, search.mode)
    return tune.Tuner(
        trainable, param_space=param_space,
        tune_config=tune.TuneConfig(
            search_alg=make_searcher(space, segment.index, history),
            scheduler=make_scheduler(space, base_config.rounds),
            num_samples=segment.num_samples, metric=metric, mode=mode,
            max_concurrent_trials=search.max_concurrent_trials,
            reuse_actors=True),  # a finished trial's process and actors serve the next (WarmActors)
        run_config=tune.RunConfig(name=name, storage_path=storage_path, storage_filesystem=filesystem,
                                  callbacks=[callback], verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=search.max_failures),
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=1)))


REPORTED = REPORTED_TEST_METRICS  # the test figures reported beside the selection metric (as numbers to Tune)


TUNE_LOG = "tune_driver.log"  # in a study's directory: Tune's own log records while the study ran
TUNE_LOGGERS = ("ray.tune", "ray.train", "ray.air")


def tune_log_path(study_dir: str) -> str:
    """Where :func:`tune_log_to` writes a study's Tune log: in the study's directory, or with the storage in a bucket,
    under ``<results home>/logs``."""
    from platform.cli import results_home
    from platform.stages.storage import is_uri

    if not is_uri(study_dir):
        return os.path.join(study_dir, TUNE_LOG)
    return os.path.join(results_home(), "logs", study_dir.split("://", 1)[1].strip("/").replace("/", "_") + ".log")


class _QuietFileHandler(logging.FileHandler):
    """A log file that drops a record it cannot write (a full disk) instead of printing logging's own traceback to
    the console: what stops the sweep is reported once, by the command (platform/sweep/faults.py)."""

    def handleError(self, record: logging.LogRecord) -> None:
        return None


@contextlib.contextmanager
def tune_log_to(path: str):
    """Tune's own log records while a study runs (its performance warnings, each failed trial's traceback, the
    ``Tuner.restore(...)`` hint of an interrupted run, its "Trials did not complete") go to the file ``path``, not
    between the sweep's lines: the callback prints one line per failed trial (its exception and where its traceback
    is), the command its own resume line."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handler = _QuietFileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = []
    for name in TUNE_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate))
        logger.addHandler(handler)
        logger.propagate = False  # not on to Ray's console handler on the "ray" logger
    try:
        yield path
    finally:
        for logger, propagate in saved:
            logger.removeHandler(handler)
            logger.propagate = propagate
        with contextlib.suppress(OSError):  # its last lines on a full disk: the log is Tune's, not the sweep's
            handler.close()


def fit_study(trainable, space, base_config, parent_dir: str, name: str, callback, log):
    """Run one study (the sweep's, or one scenario cell's) in ``parent_dir``/``name`` as consecutive Tune
    experiments of at most ``search.trials_per_experiment`` trials (platform/sweep/segments.py). On --resume the
    segments that ended cleanly are skipped and the others restored (their unfinished and failed trials run again).
    Returns (every ended trial's outcome, the callback), or (None, the callback) when the sweep was interrupted."""
    from ray import tune

    from platform.sweep import segments as study_segments
    from platform.stages.storage import tune_storage

    study_dir = join_storage(parent_dir, name)
    segments = study_segments.plan(space)
    record = study_segments.read_record(study_dir)
    if record.get("callback"):  # trial numbers and MLflow runs of the segments that ended before --resume
        callback.set_state(record["callback"])
    results = study_segments.StudyResults(study_dir)
    kept = (*space.search.metrics, *REPORTED)
    if len(segments) > 1 and space.search.scheduler.kind == "asha":
        log(f"note: {len(segments)} Tune experiments of at most {space.search.trials_per_experiment} trials "
            f"(search.trials_per_experiment); ASHA compares a trial only with those of its own experiment",
            flush=True)
    for segment in segments:
        ended = study_segments.ended_cleanly(record, segment)
        if ended is not None:
            results.extend(ended)
            continue
        where = (parent_dir, name) if segment.index == 0 else (study_dir, segment.dir_name)
        path, filesystem = tune_storage(join_storage(*where))
        if len(segments) > 1:
            log(f"experiment {segment.number}/{len(segments)} of this study: {segment.trials} trial(s)", flush=True)
        if tune.Tuner.can_restore(path, storage_filesystem=filesystem):
            log(f"resuming {'this study' if len(segments) == 1 else f'experiment {segment.number}'} from its Tune "
                f"state", flush=True)
            tuner = tune.Tuner.restore(path, trainable, resume_unfinished=True, resume_errored=True,
                                       storage_filesystem=filesystem)
            callback = _adopt_callback(tuner, callback)
        else:
            tuner = _tuner(trainable, space, base_config, *where, callback, segment, history=results)
        with tune_log_to(tune_log_path(study_dir)):
            grid = tuner.fit()
        if _interrupted(grid, segment.trials, callback):
            return None, callback
        outcomes = [study_segments.outcome(result, kept) for result in grid]
        del grid, tuner  # the segment's Trial objects go with its controller
        results.extend(outcomes)
        record = study_segments.record_segment(study_dir, record, segment, outcomes, callback.get_state())
    return results, callback


def _adopt_callback(tuner, callback):
    """A restored Tuner runs the callbacks pickled with the experiment; put ``callback`` (this process's, with this
    run's shared data) in its place so that Tune restores the saved trial-to-run map into it and the sweep can read
    it. Falls back to whatever the Tuner holds when Tune's internals differ."""
    from platform.sweep.callback import MlflowSweepCallback

    try:
        run_config = tuner._local_tuner.get_run_config()
        callbacks = list(run_config.callbacks or [])
    except AttributeError:
        return callback
    for i, restored in enumerate(callbacks):
        if isinstance(restored, MlflowSweepCallback):
            callbacks[i] = callback
            run_config.callbacks = callbacks
            return callback
    return callback


def _interrupted(grid, expected: int, callback) -> bool:
    """True when Tune returned before every trial ended (Ctrl-C, SIGTERM, or the driver was asked to stop). Tune
    marks the trials it stops on a Ctrl-C TERMINATED, like finished ones; what tells them apart is that their run
    never ended (no complete or error event reached ``callback``)."""
    trials = grid._experiment_analysis.trials
    return (len(trials) < expected or any(t.status not in ("TERMINATED", "ERROR") for t in trials)
            or bool(callback.open))


def refused_by_config(grid) -> "str | None":
    """When every trial of ``grid`` failed on a :class:`~platform.errors.ConfigError` (bad input only a trial can
    find, as it builds its data: a seeded Dirichlet draw that ``partition.min_share`` refuses, say), the first one's
    text (``field: message``, :attr:`TrialOutcome.config_error <platform.sweep.segments.TrialOutcome>`); else
    None."""
    refused = [getattr(r, "config_error", None) for r in grid]
    return refused[0] if refused and all(refused) else None


def ranked_results(grid, metric: str) -> tuple[list, int]:
    """The results a best can be chosen from (no error, a last ``metric`` that did not diverge) and how many
    diverged (their last ``metric`` is NaN, or infinite though measured: reported as diverged, never chosen; see
    :func:`platform.config.run_schema.diverged`)."""
    ended = [r for r in grid if r.error is None and r.metrics and metric in r.metrics]
    settings = setting_metrics()
    finite = [r for r in ended if not diverged(r.metrics, [metric], settings)]
    return finite, len(ended) - len(finite)


def rank_results(finished: list, metric: str, mode: str, callback) -> list:
    """``finished`` best first, in the one order every place uses (:mod:`platform.results.noise`)."""
    from platform.results.noise import rank

    return rank(finished, lambda r: r.metrics[metric], lambda r: r.metrics.get(f"{metric}_std"),
                lambda r: callback.numbers.get(r.metrics.get("trial_id")), mode)


def log_ranks(ranked: list, callback) -> None:
    """Each ranked trial's place (1: the best) as the metric ``rank`` on its child run, for the MLflow view, which
    sorts by it (:func:`platform.sweep.outputs.publish`): the UI lists the trials in the console's order."""
    from platform.config.run_schema import METRIC_RANK

    for place, result in enumerate(ranked, start=1):
        run_id = callback.runs.get(result.metrics.get("trial_id"))
        if run_id:
            callback.tracker.log_metrics(run_id, {METRIC_RANK: place})


def lead_of(ranked: list, metric: str, mode: str):
    """The best's lead over the runner-up (:class:`platform.results.noise.Lead`; None with one trial)."""
    from platform.config.run_schema import round_metrics
    from platform.results.noise import lead_over, per_seed_values

    if len(ranked) < 2:
        return None
    best, runner_up = (per_seed_values(round_metrics(r.metrics), metric) for r in ranked[:2])  # per seed: in details
    return lead_over(best, runner_up, mode)


def report_best(grid, space, tracker, parent_run_id, callback, answer, sweep_dir: str) -> str:
    """Print and log the best trial (or the Pareto front) of ``grid``, every ended trial of the study."""
    from platform.sweep.outputs import log_best

    if space.search.multi_objective:
        return report_pareto(grid, space, tracker, parent_run_id, callback, answer)
    metric, mode = space.search.metric, space.search.mode
    finished, diverged = ranked_results(grid, metric)
    failed = sum(1 for r in grid if r.error is not None)
    if not finished:
        print(f"no trial finished ({failed} failed, {diverged} diverged); see the child runs in MLflow",
              file=sys.stderr)
        return "FAILED"
    ranked = rank_results(finished, metric, mode, callback)
    log_ranks(ranked, callback)
    best = ranked[0]
    lead = lead_of(ranked, metric, mode)
    params = best.config.get("params", best.config)
    std = best.metrics.get(f"{metric}_std")
    shown = figure(best.metrics[metric]) + (f" ± {figure(std)} over {len(space.seeds)} seeds" if std is not None
                                            else "")
    tracker.log_metrics(parent_run_id, {f"{METRIC_BEST}{metric}": best.metrics[metric],
                                        **{f"{METRIC_BEST_TRIAL}{k}": best.metrics[k] for k in ("test_accuracy", "test_loss")
                                           if k in best.metrics},
                                        "trials_completed": len(finished), "trials_failed": failed,
                                        "trials_diverged": diverged})
    trial_id = best.metrics.get("trial_id")
    answer.best = {"run_id": callback.runs.get(trial_id), "name": callback.names.get(trial_id, str(trial_id)),
                   "round": best.metrics.get("round"), "params": dict(params),
                   **{k: best.metrics[k] for k in (metric, f"{metric}_std", *REPORTED, *(f"{r}_std" for r in REPORTED))
                      if best.metrics.get(k) is not None},
                   **({"lead_text": lead.text(), **lead.as_dict()} if lead is not None else {})}
    if answer.best["run_id"]:
        log_best(tracker, parent_run_id, answer.best)
    reported = "".join(f", {k} {figure(best.metrics[k])}" for k in ("test_accuracy", "test_loss")
                       if k != metric and k in best.metrics)  # selected on validation, reported on test
    retried = sum(1 for n in callback.retries.values() if n)
    print(f"\nbest of {len(finished)} trial(s) ({failed} failed{f', {diverged} diverged' if diverged else ''}"
          f"{f', {retried} run again after a failure' if retried else ''}): "
          f"{metric} = {shown} at round "
          f"{best.metrics.get('round')}{reported}")
    if lead is not None:
        print(f"  {lead.text()}")
    for k, v in params.items():
        print(f"  {k} = {v}")
    seeds = space.seeds
    tail = f" --set seed=S  (S: a replicate, one of {seeds})" if len(seeds) > 1 else ""
    print(f"rerun it alone: {space.rerun_command(params)}{tail}")
    print(f"tune storage: {sweep_dir}")
    return "FINISHED"
