"""``python -m platform.sweep <name>``: run the sweep in ``search_spaces/<name>.yaml`` with Ray Tune + Optuna.

Every trial runs a base experiment config with sampled parameters on each of the sweep's seeds. Results
go to MLflow (a parent run for this invocation, a child run per trial) and to Tune's storage, so an
interrupted sweep can continue with ``--resume``. Works the same under ``ray job submit``.

A space with a ``scenarios:`` block runs one study per cell of its cross product, one cell after another in the
same Ray connection and under the same parent run (see ``_run_cells``): each cell has its own Tune experiment,
searcher, scheduler and best trial (or Pareto front), and the summary is one line per cell plus the table
``scenarios/best_per_cell.csv`` / ``.json`` on the parent run.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from typing import Optional

from platform.sweep import _tune_fixes
from platform.cli import (add_ray_arguments, connect_ray, leave_ray_job_working_dir, main_wrapper, quiet_libraries,
                          start_ray_early)
from platform.errors import UserError
from platform.config.run_schema import (ARTIFACT_PARETO_CSV, ARTIFACT_PARETO_JSON, ARTIFACT_PARETO_PNG,
                                 ARTIFACT_SCENARIO_FRONTS_CSV, ARTIFACT_SCENARIOS_CSV, ARTIFACT_SCENARIOS_JSON,
                                 METRIC_BEST, METRIC_BEST_TRIAL, METRIC_CELL_PREFIX, METRIC_PARETO_SIZE, PARAM_BASE,
                                 REPORTED_TEST_METRICS,
                                 PARAM_SCENARIO, PARAM_SEARCH, PARAM_SPACE, STATUS_COMPLETED, STATUS_FAILED,
                                 STATUS_INTERRUPTED, STATUS_RUNNING, TAG_BEST_PREFIX, TAG_COMMAND, TAG_DESCRIPTION,
                                 TAG_DRIVER, TAG_GIT_COMMIT, TAG_NOTE, TAG_OPTUNA_STORAGE, TAG_PARENT_RUN,
                                 TAG_SEARCH_SPACE, TAG_STATUS)
# platform.config.experiment and platform.config.search_space (torch, through the algorithms) are imported where used: a command starts
# Ray before it imports them (platform.cli.start_ray_early).

STATE_FILE = "fedsweep_sweep.json"  # in the Tune experiment directory: links it to its MLflow parent run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m platform.sweep",
        description="Run a hyperparameter sweep defined in search_spaces/<name>.yaml (Ray Tune + Optuna), "
                    "tracked in MLflow. Inside a Ray cluster (ray job submit) it uses that cluster, "
                    "elsewhere it starts a local Ray.",
        epilog="Examples:\n  python -m platform.sweep smoke\n"
               "  python -m platform.sweep smoke --num-samples 2 --set rounds=3\n"
               "  ray job submit --working-dir . -- python -m platform.sweep smoke",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", nargs="?", help="search space name (a file in search_spaces/) or a YAML path")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a base-config value, e.g. --set rounds=3 (repeatable); on a swept parameter or a "
                             "scenario key it pins that value (the key leaves the sampler / grid)")
    parser.add_argument("--num-samples", type=int, help="number of trials (overrides search.num_samples)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                                               "sqlite:///<results home>/mlflow.db)")
    parser.add_argument("--storage-path", help="Tune storage: a path, s3://bucket/prefix or gs://bucket/prefix "
                                               "(default: $FEDSWEEP_STORAGE, else <results home>/ray_results)")
    parser.add_argument("--optuna-storage", metavar="URL",
                        help="RDB URL of the persistent Optuna study, which optuna-dashboard opens (default: "
                             "$FEDSWEEP_OPTUNA_STORAGE, else sqlite:///optuna.db beside a SQLite MLflow store, else "
                             "in the results home)")
    parser.add_argument("--resume", nargs="?", const=True, default=False, metavar="SWEEP_ID",
                        help="continue an interrupted sweep from --storage-path: the one named SWEEP_ID (printed when "
                             "it was interrupted, e.g. smoke-20261126-011227-624ecf), else the newest unfinished sweep "
                             "of the named space; its stored invocation (--set, --num-samples, stores) is reused, "
                             "and conflicting flags are refused")
    parser.add_argument("--cache-dir", help="stage cache: a path, s3://bucket/prefix or gs://bucket/prefix (default: "
                                            "$FEDSWEEP_CACHE, else <results home>/cache); every node must see it")
    parser.add_argument("--no-cache", action="store_true",
                        help="recompute cached stages (e.g. one-round client training) in every trial")
    add_ray_arguments(parser)
    parser.add_argument("--list", action="store_true", help="list the available search spaces and exit")
    parser.add_argument("--repair", action="store_true",
                        help="close the MLflow runs of sweeps whose driver died (kill -9, a lost machine) and left "
                             "them RUNNING, in --tracking-uri's store, then exit")
    parser.add_argument("--quiet", action="store_true", help="print only the final summary")
    return parser


class DefineByRun:
    """Optuna define-by-run space: conditional parameters are suggested only where their ``when`` holds.

    A class, not a closure, so Tune can pickle the searcher into its experiment checkpoint.
    """

    def __init__(self, parameters: dict):
        self.parameters = parameters

    def __call__(self, trial) -> None:
        import optuna

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


def _make_searcher(space, segment_index: int = 0, history=()):
    """Optuna TPE or random sampling (both sample for several objectives when ``search.metric`` is a list: Optuna
    then runs a multi-objective study); None for the grid searcher, whose Pareto front comes from the results.
    A later segment of a long study (platform/study_segments.py) gets its own sampler seed, and its study starts
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


def _make_scheduler(space, rounds: int):
    sched = space.search.scheduler
    if sched.kind != "asha":
        return None
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr="round", max_t=rounds, grace_period=sched.grace_period,
                         reduction_factor=sched.reduction_factor)


def _experiment_name(space_name: str) -> str:
    """A new sweep's Tune experiment (and Optuna study) name: ``<space>-<time>-<6 hex>``; the random part keeps two
    sweeps started in the same second apart."""
    import secrets

    return f"{space_name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _latest_unfinished(storage: str, name: str) -> Optional[str]:
    """The newest sweep of space ``name`` under ``storage`` (a path or a URI) that did not complete (None if there is
    none)."""
    from platform.stages import storage as st

    candidates = sorted(d for d in st.listdir(storage) if d.startswith(f"{name}-")
                        and st.isfile(st.join(storage, d, STATE_FILE))
                        and _read_state(st.join(storage, d)).get("status") != STATUS_COMPLETED)
    return st.join(storage, candidates[-1]) if candidates else None


# What a sweep's invocation stores (in its STATE_FILE) for --resume to restore: the flags that change the experiment.
_INVOCATION_FLAGS = {"name": "the search space", "overrides": "--set", "num_samples": "--num-samples",
                     "tracking_uri": "--tracking-uri", "cache_dir": "--cache-dir", "no_cache": "--no-cache",
                     "optuna_storage": "--optuna-storage"}


def _invocation(args) -> dict:
    """The flags that define a sweep, as given (the space by absolute path when it was a YAML file)."""
    stored = {key: getattr(args, key) for key in _INVOCATION_FLAGS}
    if stored["name"] and os.path.isfile(stored["name"]):
        stored["name"] = os.path.abspath(stored["name"])
    from platform.results.tracking import git_commit

    return {**stored, "git_commit": git_commit()}


def _default_storage() -> str:
    """Tune's storage when --storage-path is not given: ``$FEDSWEEP_STORAGE`` (the clusters set a bucket), else
    ``<results home>/ray_results``."""
    from platform.stages.storage import normalise
    from platform.results.tracking import results_home

    return normalise(os.environ.get("FEDSWEEP_STORAGE") or os.path.join(results_home(), "ray_results"))


def _storage_flag(given: Optional[str], flag: str, env: str) -> str:
    """Which option or variable a storage location came from, for the one-line error that names it."""
    return flag if given else (env if os.environ.get(env) else flag)


def _resolve_resume(args) -> str:
    """The experiment directory ``--resume`` continues, with ``args`` completed from its stored invocation. A flag
    given again must match what is stored (one line naming it otherwise)."""
    from platform.stages import storage as st

    storage = st.normalise(args.storage_path or _default_storage())
    st.check_storage(storage, _storage_flag(args.storage_path, "--storage-path", "FEDSWEEP_STORAGE"))
    if isinstance(args.resume, str) and not args.name and not st.isfile(st.join(storage, args.resume, STATE_FILE)):
        args.name, args.resume = args.resume, True  # "--resume smoke": a space's name, not a sweep id
    if isinstance(args.resume, str):
        resume_dir = st.join(storage, args.resume)
        if not st.isfile(st.join(resume_dir, STATE_FILE)):
            raise UserError(f"--resume: no sweep {args.resume!r} under {storage}")
    else:
        if not args.name:
            raise UserError("--resume: name the search space, or give the sweep id it printed (--resume SWEEP_ID)")
        space_name = os.path.splitext(os.path.basename(args.name))[0]
        resume_dir = _latest_unfinished(storage, space_name)
        if resume_dir is None:
            raise UserError(f"--resume: no unfinished sweep of {space_name!r} under {storage}")
    state = _read_state(resume_dir)
    if state.get("status") == STATUS_COMPLETED:
        raise UserError(f"--resume: sweep {os.path.basename(resume_dir)} completed; start a new one without --resume")
    stored = state.get("invocation")
    if stored is None:  # a sweep from before invocations were stored: the flags as given now
        return resume_dir
    for key, flag in _INVOCATION_FLAGS.items():
        given, kept = getattr(args, key), stored.get(key)
        if key == "name" and given and kept and os.path.isfile(given):
            given = os.path.abspath(given)
        if given in (None, [], False) or given == kept or (key == "name" and kept and given == os.path.splitext(
                os.path.basename(kept))[0]):
            setattr(args, key, kept)
            continue
        raise UserError(f"--resume: {flag} {given!r} conflicts with the interrupted sweep's {kept!r}; drop it "
                        f"(--resume reuses the sweep's own), or start a new sweep")
    if args.tracking_uri is None:  # the store it wrote to, wherever --resume runs from
        args.tracking_uri = state.get("tracking_uri")
    return resume_dir


def _stop_on_sigterm() -> None:
    """SIGTERM (a scheduler, ``kill``, a container stop) ends the sweep as Ctrl-C does: the open runs are closed as
    interrupted and the resume hint printed, instead of an abort that leaves them RUNNING."""
    import signal
    import threading

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


@main_wrapper
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.invocation = None  # set once the flags are final (after --resume restored them)
    if args.list:
        from platform.config.search_space import available_search_spaces

        print("\n".join(available_search_spaces()))
        return 0
    if args.repair:
        return _repair(args)
    resume_dir = _resolve_resume(args) if args.resume else None
    if argv is None and args.name:  # this process is the command (flags final): a new local Ray starts while torch is
        quiet_libraries()  # imported and the space checked; a refused input still ends it at once (exit 2, one line)
        start_ray_early(args.address, args.ray_dashboard)
    if not args.name:
        from platform.config.search_space import available_search_spaces

        raise UserError(f"name a search space; available: {', '.join(available_search_spaces())}")
    if args.num_samples is not None and args.num_samples < 1:
        raise UserError(f"--num-samples: must be >= 1, got {args.num_samples}")
    from platform.config.experiment import parse_override
    from platform.config.search_space import load_search_space

    overrides = dict(parse_override(o) for o in args.overrides)
    args.invocation = _invocation(args)
    # Everything is validated before anything is written: MLflow, Tune storage, Ray.
    space = load_search_space(args.name, overrides, args.num_samples)
    base_config = space.trial_config({})
    space = _pin_public_image(space, base_config)
    from platform.results.tracking import resolve_tracking_uri, results_home

    from platform.stages.cache import default_cache_root
    from platform.stages.storage import check_storage, normalise
    from platform.results.tracking import check_tracking_uri

    # a path, s3://bucket/prefix or gs://bucket/prefix; a URI is checked for credentials, endpoint, bucket and write
    # access (a probe object written and deleted), one line naming the option or variable it came from
    storage = normalise(args.storage_path or _default_storage())
    check_storage(storage, _storage_flag(args.storage_path, "--storage-path", "FEDSWEEP_STORAGE"))
    if args.cache_dir or (os.environ.get("FEDSWEEP_CACHE") and not args.no_cache):
        check_storage(normalise(args.cache_dir or default_cache_root()),
                      _storage_flag(args.cache_dir, "--cache-dir", "FEDSWEEP_CACHE"))
    if resume_dir:
        _check_resumable(resume_dir, space)
    tracking_uri = resolve_tracking_uri(args.tracking_uri)
    check_tracking_uri(tracking_uri)
    from platform.sweep.optuna_store import check_storage, storage_url

    args.optuna_url = storage_url(tracking_uri, args.optuna_storage)
    check_storage(args.optuna_url)
    quiet_libraries()
    leave_ray_job_working_dir(results_home())
    return _run(args, space, base_config, storage, tracking_uri, resume_dir)


def _pin_public_image(space, base_config):
    """The search space with a relative ``public.image`` path made absolute in its base config (as the loaded
    config holds it), so trials, which run in their own directories, and a driver that leaves a Ray job's
    directory still find the file. Swept image paths should be absolute."""
    public = space.base.get("public")
    if not isinstance(public, dict) or public.get("image", base_config.public.image) == base_config.public.image:
        return space
    return dataclasses.replace(space, base={**space.base, "public": {**public, "image": base_config.public.image}})


def _run(args, space, base_config, storage, tracking_uri, resume_dir) -> int:
    """Open (or reopen) the parent run, run the trials with Tune, report the best, and always close the parent."""
    # Import everything the sweep needs before Ray connects: under ``ray job submit`` the job's working directory
    # (where these modules come from) is no longer importable once the driver has joined the cluster.
    import ray.tune  # noqa: F401

    import platform.stages.cache  # noqa: F401
    import platform.runtime.placement  # noqa: F401
    import platform.runtime.trial  # noqa: F401
    from platform.stages.cache import open_cache
    from platform.runtime.pretrain import prepare_pretrained, sweep_pretrain_configs
    from platform.runtime.federation import share_dataset
    from platform.sweep.optuna_store import StudyRecorder
    from platform.sweep.outputs import SweepAnswer, publish
    from platform.sweep.callback import MlflowSweepCallback
    from platform.results.tracking import Tracker, log_patch_samples

    tracker = Tracker(tracking_uri, space.name)
    # The Tune experiment (one directory per sweep, a sub-directory per scenario cell) names the Optuna study too.
    experiment = os.path.basename(resume_dir) if resume_dir else _experiment_name(space.name)
    parent_run_id = _open_parent_run(tracker, args, space, base_config, resume_dir)
    status = "FAILED"
    callback = None
    answer = SweepAnswer()
    try:
        mode = connect_ray(args.address, args.ray_dashboard)
        _stop_on_sigterm()  # after Ray's start, which installs a SIGTERM handler that aborts the process
        _tune_fixes.apply()  # a trial handed a dead reused actor is run again (platform/_tune_fixes.py)
        objectives = ", ".join(f"{m} ({d})" for m, d in space.search.objectives)
        selecting = f"Pareto front of {objectives}" if space.search.multi_objective else f"selecting on {objectives}"
        rounds = "rounds per cell" if "rounds" in space.scenarios else f"{base_config.rounds} rounds"
        cells = (f"{len(space.cells())} scenario cell(s) of {', '.join(space.scenarios)} (one study each), "
                 if space.scenarios else "")
        print(f"sweep {space.name}: {cells}{_expected_trials(space)} trial(s) x {len(space.seeds)} seed(s), "
              f"{rounds}, searcher {space.search.searcher}, {selecting}, Ray {mode}", flush=True)
        for metric in space.search.metrics:
            if metric.startswith("test_"):
                print(f"warning: search.metric {metric} selects on the test set; select on a validation "
                      f"metric (val_accuracy) and report test", file=sys.stderr, flush=True)
        expected_trials = _expected_trials(space)
        cache = open_cache(args.cache_dir, not args.no_cache)
        if space.scenarios:
            status = _run_cells(args, space, storage, tracker, parent_run_id, tracking_uri, resume_dir, cache,
                                experiment, answer)
            return {"FINISHED": 0, "KILLED": 130}.get(status, 1)
        shared = share_dataset(base_config, cache=cache)  # into the object store once, for every trial
        log_patch_samples(tracker, parent_run_id, shared)  # public.source image: public/patches.png
        # Pre-training (pretrain.method) of every (architecture, seed) the trials can need: here, on the driver,
        # before Tune starts (a trial's placement group cannot host Ray Train's workers); cache hits cost nothing.
        shared = prepare_pretrained(shared, sweep_pretrain_configs(space), cache,
                                    log=(lambda *a, **k: None) if args.quiet else print)
        answer.studies = [experiment]
        callback = MlflowSweepCallback(tracker, parent_run_id, space, base_config.rounds, expected_trials,
                                       quiet=args.quiet, shared=shared,
                                       study=StudyRecorder(args.optuna_url, experiment, space.search.objectives,
                                                           space.parameters))
        trainable = _trainable(space, base_config, shared, args)
        if not resume_dir:  # the experiment directory records the parent run, for --resume
            _start_state(_join(storage, experiment), parent_run_id, tracking_uri, space, args.invocation)
        results, callback = _fit_study(trainable, space, base_config, storage, experiment, callback, log=print)
        if results is None:
            callback.close_open_runs(STATUS_INTERRUPTED, "KILLED")
            print(f"\ninterrupted; continue with: {_resume_command(experiment, storage)}", file=sys.stderr)
            status = "KILLED"
        else:
            status = _report(results, space, tracker, parent_run_id, callback, answer,
                             sweep_dir=_join(storage, experiment))
    except KeyboardInterrupt:
        status = "KILLED"
        if callback is not None:
            callback.close_open_runs(STATUS_INTERRUPTED, "KILLED")
        print(f"\ninterrupted; continue with: {_resume_command(experiment, storage)}", file=sys.stderr,
              flush=True)
        raise
    finally:
        from platform.results.tracking import close_orphan_runs

        answer.status = _STATUS_TAGS.get(status, STATUS_FAILED)
        _record_status(_join(storage, experiment), answer.status)
        orphans = close_orphan_runs(tracker, parent_run_id)
        if orphans:
            print(f"closed {orphans} run(s) left RUNNING by an earlier driver that was killed", file=sys.stderr)
        tracker.set_tag(parent_run_id, TAG_STATUS, answer.status)
        publish(tracker, parent_run_id, space, answer, args.optuna_url, quiet=args.quiet)
        tracker.end_run(parent_run_id, status)
    return {"FINISHED": 0, "KILLED": 130}.get(status, 1)


_STATUS_TAGS = {"FINISHED": STATUS_COMPLETED, "KILLED": STATUS_INTERRUPTED}


def _open_parent_run(tracker, args, space, base_config, resume_dir) -> str:
    """The sweep's parent MLflow run: reopened when resuming, else created with the base config, the space and the
    search settings as params."""
    from platform.results.tracking import command_line, git_commit

    if resume_dir:
        parent_run_id = _read_state(resume_dir)["parent_run_id"]
        tracker.set_tag(parent_run_id, TAG_STATUS, STATUS_RUNNING)
        tracker.client.update_run(parent_run_id, status="RUNNING")
        return parent_run_id
    from platform.sweep.outputs import SweepAnswer, description

    parent_run_id = tracker.start_run(
        name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}",
        tags={TAG_SEARCH_SPACE: space.name, TAG_GIT_COMMIT: git_commit(),
              TAG_COMMAND: command_line("platform.sweep", args.argv), TAG_STATUS: STATUS_RUNNING,
              TAG_DESCRIPTION: space.description, TAG_OPTUNA_STORAGE: args.optuna_url, TAG_DRIVER: _driver_id(),
              TAG_NOTE: description(space, tracker.experiment_id, SweepAnswer())})
    tracker.log_params(parent_run_id, {
        **{f"{PARAM_BASE}{k}": v for k, v in base_config.flat().items()},
        **{f"{PARAM_SCENARIO}{k}": list(values) for k, values in space.scenarios.items()},
        **{f"{PARAM_SPACE}{k}": f"{d.kind}{list(d.args)}" + (f" when {d.when}" if d.when else "")
           for k, d in space.parameters.items()},
        **{f"{PARAM_SEARCH}{k}": v for k, v in vars(space.search).items() if k != "scheduler"},
        f"{PARAM_SEARCH}scheduler": space.search.scheduler.kind, f"{PARAM_SEARCH}seeds": space.seeds})
    return parent_run_id


def _expected_trials(space) -> int:
    """Trials the sweep runs: ``num_samples`` (grid: times the grid); with scenarios, summed over the cells."""
    from platform.config.search_space import grid_points

    if space.scenarios:
        return sum(_expected_trials(space.cell_space(i)) for i in range(len(space.cells())))
    return space.search.num_samples * (len(grid_points(space)) if space.search.searcher == "grid" else 1)


def _trainable(space, base_config, shared, args):
    """The Tune trainable: :func:`platform.runtime.trial.sweep_trial` with the sweep's fixed arguments, in one
    placement group per trial (bundles for the trial loop, the parameter server and the client actors)."""
    from ray import tune

    from platform.stages.cache import default_cache_root
    from platform.runtime.placement import trial_bundles
    from platform.stages.storage import normalise
    from platform.runtime.trial import sweep_trial

    return tune.with_resources(
        tune.with_parameters(sweep_trial, base=space.base, seeds=space.seeds, shared=shared,
                             checkpoint_every=space.search.checkpoint_every,
                             cache_root=normalise(args.cache_dir or default_cache_root()),
                             use_cache=not args.no_cache, search_metrics=tuple(space.search.metrics)),
        tune.PlacementGroupFactory(trial_bundles(base_config.resources)))


def _tuner(trainable, space, base_config, storage, name, callback, segment, history=()):
    """A new Tuner for ``segment`` of ``space``'s study (a sweep without scenarios, or one scenario cell) in
    ``storage``/``name``; ``history``: the study's trials that ended in earlier segments."""
    from ray import tune

    from platform.stages.storage import tune_storage

    search = space.search
    storage_path, filesystem = tune_storage(storage)
    param_space = ({"params": tune.grid_search(list(segment.grid_points))} if search.searcher == "grid" else None)
    # Multi-objective: the searcher holds the metric and mode lists; Tune's own metric/mode take one metric only
    # (and no scheduler needs one: ASHA is refused at load), so Tune gets none and _report computes the front.
    metric, mode = (None, None) if search.multi_objective else (search.metric, search.mode)
    return tune.Tuner(
        trainable, param_space=param_space,
        tune_config=tune.TuneConfig(
            search_alg=_make_searcher(space, segment.index, history),
            scheduler=_make_scheduler(space, base_config.rounds),
            num_samples=segment.num_samples, metric=metric, mode=mode,
            max_concurrent_trials=search.max_concurrent_trials,
            reuse_actors=True),  # a finished trial's process and actors serve the next (WarmActors)
        run_config=tune.RunConfig(name=name, storage_path=storage_path, storage_filesystem=filesystem,
                                  callbacks=[callback], verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=search.max_failures),
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=1)))


def _fit_study(trainable, space, base_config, parent_dir: str, name: str, callback, log):
    """Run one study (the sweep's, or one scenario cell's) in ``parent_dir``/``name`` as consecutive Tune
    experiments of at most ``search.trials_per_experiment`` trials (platform/study_segments.py). On --resume the
    segments that ended cleanly are skipped and the others restored (their unfinished and failed trials run again).
    Returns (every ended trial's outcome, the callback), or (None, the callback) when the sweep was interrupted."""
    from ray import tune

    from platform.sweep import segments as study_segments
    from platform.stages.storage import tune_storage

    study_dir = _join(parent_dir, name)
    segments = study_segments.plan(space)
    record = study_segments.read_record(study_dir)
    if record.get("callback"):  # trial numbers and MLflow runs of the segments that ended before --resume
        callback.set_state(record["callback"])
    results = study_segments.StudyResults(study_dir)
    kept = (*space.search.metrics, *_REPORTED)
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
        path, filesystem = tune_storage(_join(*where))
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
        grid = tuner.fit()
        if _interrupted(grid, segment.trials, callback):
            return None, callback
        outcomes = [study_segments.outcome(result, kept) for result in grid]
        del grid, tuner  # the segment's Trial objects go with its controller
        results.extend(outcomes)
        record = study_segments.record_segment(study_dir, record, segment, outcomes, callback.get_state())
    return results, callback


def _ranked_results(grid, metric: str) -> tuple[list, int]:
    """The results a best can be chosen from (no error, a finite last ``metric``) and how many diverged (their
    last ``metric`` is NaN or infinite: reported as diverged, never chosen)."""
    ended = [r for r in grid if r.error is None and r.metrics and metric in r.metrics]
    finite = [r for r in ended if math.isfinite(r.metrics[metric])]
    return finite, len(ended) - len(finite)


def _driver_id() -> str:
    """This driver process as ``<host>:<pid>``, tagged on the parent run so that ``--repair`` can tell a live sweep
    from one whose driver died."""
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def _driver_alive(driver: str) -> Optional[bool]:
    """Whether the driver ``<host>:<pid>`` runs; None when it ran on another machine (this one cannot tell)."""
    import socket

    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _repair(args) -> int:
    """``--repair``: every sweep whose parent is RUNNING but whose driver (on this machine) is gone gets its parent
    and open child runs closed as interrupted. Sweeps driven from other machines are listed, not touched."""
    from platform.results.tracking import Tracker, check_tracking_uri, close_orphan_runs, resolve_tracking_uri

    uri = resolve_tracking_uri(args.tracking_uri)
    check_tracking_uri(uri)
    client = Tracker(uri, "").client
    experiments = [e.experiment_id for e in client.search_experiments()]
    parents = [r for r in (client.search_runs(experiments, "attributes.status = 'RUNNING'", max_results=10000)
                           if experiments else [])
               if TAG_PARENT_RUN not in r.data.tags and TAG_SEARCH_SPACE in r.data.tags]
    closed = 0
    for parent in parents:
        driver = parent.data.tags.get(TAG_DRIVER, "")
        alive = _driver_alive(driver) if driver else False
        name = f"{parent.data.tags[TAG_SEARCH_SPACE]} {parent.info.run_name} ({parent.info.run_id})"
        if alive:
            print(f"running: {name}, driver {driver}")
            continue
        if alive is None:
            print(f"not touched: {name}: its driver {driver} ran on another machine; run --repair there")
            continue
        tracker = Tracker(uri, parent.data.tags[TAG_SEARCH_SPACE])
        children = close_orphan_runs(tracker, parent.info.run_id)
        tracker.set_tag(parent.info.run_id, TAG_STATUS, STATUS_INTERRUPTED)
        tracker.end_run(parent.info.run_id, "KILLED")
        closed += 1
        print(f"closed: {name} and {children} trial run(s), as interrupted (its driver {driver or '?'} is gone)")
    print(f"repaired {closed} sweep(s) in {uri}")
    return 0


def _resume_command(experiment: str, storage: str) -> str:
    """The line that continues this sweep: its id (the stored invocation supplies the rest), and the storage when it
    is not the default."""
    where = "" if storage == _default_storage() else f" --storage-path {storage}"
    return f"python -m platform.sweep --resume {experiment}{where}"


def _record_status(directory: str, status: str) -> None:
    """The sweep's status in its STATE_FILE (``--resume`` skips completed sweeps); nothing if it never started."""
    from platform.stages.storage import isfile

    if isfile(_join(directory, STATE_FILE)):
        _write_state(directory, {**_read_state(directory), "status": status})


def _interrupted(grid, expected: int, callback) -> bool:
    """True when Tune returned before every trial ended (Ctrl-C, SIGTERM, or the driver was asked to stop). Tune
    marks the trials it stops on a Ctrl-C TERMINATED, like finished ones; what tells them apart is that their run
    never ended (no complete or error event reached ``callback``)."""
    trials = grid._experiment_analysis.trials
    return (len(trials) < expected or any(t.status not in ("TERMINATED", "ERROR") for t in trials)
            or bool(callback.open))


def _report(grid, space, tracker, parent_run_id, callback, answer, sweep_dir: str) -> str:
    """Print and log the best trial (or the Pareto front) of ``grid``, every ended trial of the study."""
    from platform.sweep.outputs import log_best

    if space.search.multi_objective:
        return _report_pareto(grid, space, tracker, parent_run_id, callback, answer)
    metric, mode = space.search.metric, space.search.mode
    finished, diverged = _ranked_results(grid, metric)
    failed = sum(1 for r in grid if r.error is not None)
    if not finished:
        print(f"no trial finished ({failed} failed, {diverged} diverged); see the child runs in MLflow",
              file=sys.stderr)
        return "FAILED"
    best = (max if mode == "max" else min)(finished, key=lambda r: r.metrics[metric])
    params = best.config.get("params", best.config)
    std = best.metrics.get(f"{metric}_std")
    figure = f"{best.metrics[metric]:.4f}" + (f" ± {std:.4f} over {len(space.seeds)} seeds" if std is not None
                                              else "")
    tracker.log_metrics(parent_run_id, {f"{METRIC_BEST}{metric}": best.metrics[metric],
                                        **{f"{METRIC_BEST_TRIAL}{k}": best.metrics[k] for k in ("test_accuracy", "test_loss")
                                           if k in best.metrics},
                                        "trials_completed": len(finished), "trials_failed": failed,
                                        "trials_diverged": diverged})
    trial_id = best.metrics.get("trial_id")
    answer.best = {"run_id": callback.runs.get(trial_id), "name": callback.names.get(trial_id, str(trial_id)),
                   "round": best.metrics.get("round"), "params": dict(params),
                   **{k: best.metrics[k] for k in (metric, f"{metric}_std", *_REPORTED, *(f"{r}_std" for r in _REPORTED))
                      if best.metrics.get(k) is not None}}
    if answer.best["run_id"]:
        log_best(tracker, parent_run_id, answer.best)
    reported = "".join(f", {k} {best.metrics[k]:.4f}" for k in ("test_accuracy", "test_loss")
                       if k != metric and k in best.metrics)  # selected on validation, reported on test
    retried = sum(1 for n in callback.retries.values() if n)
    print(f"\nbest of {len(finished)} trial(s) ({failed} failed{f', {diverged} diverged' if diverged else ''}"
          f"{f', {retried} run again after a failure' if retried else ''}): "
          f"{metric} = {figure} at round "
          f"{best.metrics.get('round')}{reported}")
    for k, v in params.items():
        print(f"  {k} = {v}")
    rerun = " ".join(f"--set {k}={v}" for k, v in params.items())
    print(f"rerun it alone: python -m platform.run {space.name} {rerun}")
    print(f"tune storage: {sweep_dir}")
    return "FINISHED"


def _front_rows(grid, space, callback) -> list[dict]:
    """One row per finished trial (no error): its last reported objectives (and their std over seeds), the round,
    its MLflow child run and its sampled parameters. A trial missing an objective still gets a row (it is left off
    the front)."""
    rows = []
    for result in grid:
        if result.error is not None or not result.metrics:
            continue
        trial_id = result.metrics.get("trial_id")
        number = callback.numbers.get(trial_id) if callback is not None else None
        row = {"trial": f"trial-{number:03d}" if number else str(trial_id), "run_id": (callback.runs.get(trial_id)
               if callback is not None else None), "round": result.metrics.get("round")}
        if callback is not None and callback.names.get(trial_id):
            row["name"] = callback.names[trial_id]
        for metric in space.search.metrics:
            row[metric] = result.metrics.get(metric)
            if result.metrics.get(f"{metric}_std") is not None:
                row[f"{metric}_std"] = result.metrics[f"{metric}_std"]
        row["params"] = dict((result.config or {}).get("params", result.config or {}))
        rows.append(row)
    return rows


def _json_value(value):
    """JSON has no inf/NaN: write them as strings ("inf", "-inf", "nan")."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value


def _front_csv(front: list[dict]) -> str:
    import csv
    import io

    params = list(dict.fromkeys(k for row in front for k in row["params"]))
    values = list(dict.fromkeys(k for row in front for k in row
                                if k not in ("trial", "name", "run_id", "round", "params")))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["trial", "name", "run_id", "round", *values, *params])
    for row in front:
        writer.writerow([row["trial"], row.get("name", ""), row["run_id"] or "", row["round"],
                         *(row.get(k, "") for k in values),
                         *(row["params"].get(k, "") for k in params)])
    return out.getvalue()


def _front_plot(rows: list[dict], front: list[dict], objectives: list[tuple[str, str]], path: str, title: str) -> None:
    """The first two objectives of every finished trial (grey) with the front highlighted (red, joined)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from platform.sweep.pareto import objective_value

    (x_name, x_mode), (y_name, y_mode) = objectives[:2]

    def points(which):
        pts = [(objective_value(r, x_name), objective_value(r, y_name)) for r in which]
        return [(x, y) for x, y in pts if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]

    fig = Figure(figsize=(6.4, 4.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    every = points(rows)
    on_front = sorted(points(front))
    if every:
        ax.scatter(*zip(*every), c="0.6", s=30, label=f"finished trials ({len(every)})", zorder=2)
    if on_front:
        ax.plot(*zip(*on_front), "-", c="tab:red", alpha=0.5, zorder=3)
        ax.scatter(*zip(*on_front), c="tab:red", s=60, edgecolors="black", label=f"Pareto front ({len(front)})",
                   zorder=4)
    ax.set_xlabel(f"{x_name} ({'higher' if x_mode == 'max' else 'lower'} is better)")
    ax.set_ylabel(f"{y_name} ({'higher' if y_mode == 'max' else 'lower'} is better)")
    if len(objectives) > 2:
        title += f" (first 2 of {len(objectives)} objectives)"
    hidden = len(front) - len(on_front)
    if hidden:  # e.g. ε = inf (non-private): on the front, but no point to draw
        title += f"\n{hidden} front point(s) not drawn: an infinite value (see pareto_front.csv)"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, format="png")


def _report_pareto(grid, space, tracker, parent_run_id, callback, answer) -> str:
    """Multi-objective: print the Pareto front of the finished trials (last reported values) and log it to the
    parent run as ``pareto_front.json``, ``pareto_front.csv``, ``pareto_front.png`` and metric ``pareto_size``."""
    import tempfile

    from platform.sweep.pareto import objective_value, pareto_front

    objectives = space.search.objectives
    rows = _front_rows(grid, space, callback)
    failed = sum(1 for r in grid if r.error is not None)
    complete = [r for r in rows if all(objective_value(r, m) is not None for m, _ in objectives)]
    if not complete:
        print(f"no trial finished with {', '.join(space.search.metrics)} ({failed} failed); see the child runs in "
              f"MLflow", file=sys.stderr)
        return "FAILED"
    front = pareto_front(complete, objectives)
    answer.front = front
    best = {f"{METRIC_BEST}{m}": (max if d == "max" else min)(objective_value(r, m) for r in complete)
            for m, d in objectives}
    tracker.log_metrics(parent_run_id, {METRIC_PARETO_SIZE: len(front), **best, "trials_completed": len(complete),
                                        "trials_failed": failed})
    tracker.log_text(parent_run_id, json.dumps(_json_value(front), indent=2), ARTIFACT_PARETO_JSON)
    tracker.log_text(parent_run_id, _front_csv(front), ARTIFACT_PARETO_CSV)
    try:
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, ARTIFACT_PARETO_PNG)
            _front_plot(complete, front, objectives, path, f"{space.name}: Pareto front")
            tracker.client.log_artifact(parent_run_id, path)
    except Exception as err:  # noqa: BLE001 - the table is the result; a plot failure must not fail the sweep
        print(f"warning: could not plot the Pareto front: {err}", file=sys.stderr)
    names = ", ".join(f"{m} ({d})" for m, d in objectives)
    print(f"\nPareto front of {len(complete)} trial(s) ({failed} failed): {len(front)} non-dominated on {names}")
    for row in front:
        values = "  ".join(f"{m} {row[m]:.4f}" for m, _ in objectives)
        params = ", ".join(f"{k}={v}" for k, v in row["params"].items()) or "(the base config)"
        print(f"  {values}  | {params}")
    print(f"front table: {ARTIFACT_PARETO_JSON}, {ARTIFACT_PARETO_CSV} and {ARTIFACT_PARETO_PNG} on the parent run "
          f"{parent_run_id}")
    print(f"tune storage: {grid.experiment_path}")
    return "FINISHED"


# ---- scenario grids: one study per cell of the space's ``scenarios:`` cross product, under the one parent run ----
#
# Layout in Tune's storage: <storage>/<space>-<time>/ holds STATE_FILE (the parent run, the cells' labels and the
# summary row of every cell that finished) and one Tune experiment per cell, cell-001/, cell-002/, ... The cells run
# one after another, each with its own searcher (sampler seeded from search.sampler_seed and the cell index),
# scheduler and callback. --resume skips the cells that finished, restores the one that was interrupted (or that
# finished with failed trials: those run again) and starts the rest.


def _cell_dir_name(index: int) -> str:
    return f"cell-{index + 1:03d}"


def _join(directory: str, *names: str) -> str:
    """``directory``/``names`` for a path or an ``s3://`` / ``gs://`` URI (Tune's storage may be either)."""
    from platform.stages.storage import join

    return join(directory, *names)


def _read_state(directory: str) -> dict:
    """A sweep's STATE_FILE, read through the storage's filesystem (so ``--resume`` finds it from any directory or
    machine when the storage is a bucket)."""
    from platform.stages.storage import read_json

    return read_json(_join(directory, STATE_FILE))


def _start_state(directory: str, parent_run_id: str, tracking_uri: str, space, invocation: dict, **extra) -> dict:
    """Create a new sweep's Tune directory (a name of its own, see _experiment_name: never another sweep's) and its
    STATE_FILE: the parent run, the store, the space, the status and the invocation ``--resume`` restores."""
    from platform.stages.storage import is_uri

    if not is_uri(directory):
        os.makedirs(directory)
    state = {"parent_run_id": parent_run_id, "tracking_uri": tracking_uri, "search_space": space.path,
             "status": STATUS_RUNNING, "invocation": invocation, **extra}
    _write_state(directory, state)
    return state


def _write_state(directory: str, state: dict) -> None:
    """Written whole or not at all: a temporary file renamed into place on disk, one PUT on an object store."""
    from platform.stages.storage import write_bytes

    write_bytes(_join(directory, STATE_FILE), json.dumps(_json_value(state), indent=1).encode())


def _check_resumable(resume_dir: str, space) -> None:
    """--resume needs the interrupted run to have the same scenario cells as the space has now (one line if not)."""
    from platform.config.search_space import cell_label

    recorded = _read_state(resume_dir).get("scenarios")
    current = [cell_label(c) for c in space.cells()] if space.scenarios else None
    if recorded != current:
        def describe(cells):
            return f"scenario cells {'; '.join(cells)}" if cells else "no scenarios"
        raise UserError(f"--resume: the latest run of sweep {space.name!r} ({resume_dir}) has {describe(recorded)}, "
                        f"the space now has {describe(current)}; start a new sweep (without --resume)")


def _same_data(shared, config) -> bool:
    """Whether ``shared`` holds ``config``'s dataset, public pool and validation split (pre-training aside:
    :func:`platform.runtime.pretrain.prepare_pretrained` adds what a cell needs)."""
    return (shared.dataset == config.dataset and shared.public == config.public
            and shared.val_fraction == config.server.val_fraction)


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


def _run_cells(args, space, storage, tracker, parent_run_id, tracking_uri, resume_dir, cache, experiment,
               answer) -> str:
    """Run every scenario cell's study in turn (skipping, on --resume, the cells that finished), then report one
    best trial (or Pareto front) per cell. Returns the parent run's status."""
    from platform.sweep.optuna_store import StudyRecorder
    from platform.config.search_space import cell_label
    from platform.runtime.pretrain import prepare_pretrained, sweep_pretrain_configs
    from platform.runtime.federation import share_dataset
    from platform.sweep.callback import MlflowSweepCallback
    from platform.results.tracking import log_patch_samples

    cells = space.cells()
    if resume_dir:
        sweep_dir = resume_dir
        state = _read_state(sweep_dir)
    else:
        sweep_dir = _join(storage, experiment)
        state = _start_state(sweep_dir, parent_run_id, tracking_uri, space, args.invocation,
                             scenarios=[cell_label(c) for c in cells], cells_done={})
    done = state.setdefault("cells_done", {})
    log = (lambda *a, **k: None) if args.quiet else print
    rows: list[dict] = answer.cells
    answer.studies = [f"{experiment}/{_cell_dir_name(i)}" for i in range(len(cells))]
    shared = None
    patches_logged = False
    for index, cell in enumerate(cells):
        number, label = index + 1, cell_label(cell)
        if str(number) in done:
            rows.append(done[str(number)])
            log(f"\ncell {number}/{len(cells)}: {label}: finished in the interrupted run, skipped", flush=True)
            continue
        cell_space = space.cell_space(index)
        config = cell_space.trial_config({})
        cell_space = _pin_public_image(cell_space, config)
        expected = _expected_trials(cell_space)
        if shared is None or not _same_data(shared, config):
            shared = None  # let the previous cell's data go before loading the next
            shared = share_dataset(config, cache=cache)
            patches_logged = patches_logged or bool(log_patch_samples(tracker, parent_run_id, shared))
        shared = prepare_pretrained(shared, sweep_pretrain_configs(cell_space), cache, log=log)
        info = {"number": number, "cells": len(cells), "label": label, "values": dict(cell),
                "sampler_seed": cell_space.search.sampler_seed}
        callback = MlflowSweepCallback(tracker, parent_run_id, cell_space, config.rounds, expected, quiet=args.quiet,
                                       shared=shared, cell=info,
                                       study=StudyRecorder(args.optuna_url, answer.studies[index],
                                                           cell_space.search.objectives, cell_space.parameters))
        trainable = _trainable(cell_space, config, shared, args)
        log(f"\ncell {number}/{len(cells)}: {label}: {expected} trial(s), searcher {cell_space.search.searcher}, "
            f"sampler seed {cell_space.search.sampler_seed}", flush=True)
        try:
            grid, callback = _fit_study(trainable, cell_space, config, sweep_dir, _cell_dir_name(index), callback,
                                        log=log)
        except KeyboardInterrupt:
            callback.close_open_runs(STATUS_INTERRUPTED, "KILLED")
            raise
        if grid is None:
            callback.close_open_runs(STATUS_INTERRUPTED, "KILLED")
            print(f"\ninterrupted in scenario cell {number}/{len(cells)} ({label}); continue with: "
                  f"{_resume_command(os.path.basename(sweep_dir), storage)}", file=sys.stderr)
            return "KILLED"
        row = _cell_row(grid, cell_space, cell, info, callback)
        rows.append(row)
        if row["trials_failed"] == 0 and row["trials_finished"] > 0:  # else --resume runs its failed trials again
            done[str(number)] = row
            _write_state(sweep_dir, state)
    return _report_cells(rows, space, tracker, parent_run_id, sweep_dir)


_REPORTED = REPORTED_TEST_METRICS  # the test figures reported beside the selection metric (as numbers to Tune)


def _cell_row(grid, cell_space, cell: dict, info: dict, callback) -> dict:
    """One cell's summary: its values, trial counts and best trial (single objective: selection metric, test
    figures, parameters) or Pareto front (multi-objective)."""
    from platform.sweep.pareto import objective_value, pareto_front

    search = cell_space.search
    failed = sum(1 for r in grid if r.error is not None)
    row = {"cell": info["number"], "scenario": info["label"], "values": dict(cell),
           "sampler_seed": info["sampler_seed"], "trials_failed": failed}
    rerun = " ".join(f"--set {k}={v}" for k, v in cell.items())
    if search.multi_objective:
        complete = [r for r in _front_rows(grid, cell_space, callback)
                    if all(objective_value(r, m) is not None for m, _ in search.objectives)]
        front = pareto_front(complete, search.objectives) if complete else []
        row.update({"trials_finished": len(complete), "pareto_size": len(front), "front": front,
                    **{f"{METRIC_BEST}{m}": (max if d == "max" else min)(objective_value(r, m) for r in complete)
                       for m, d in search.objectives if complete},
                    "rerun": f"python -m platform.run {cell_space.name} {rerun}"})
        return row
    metric, mode = search.metric, search.mode
    finished, row["trials_diverged"] = _ranked_results(grid, metric)
    row["trials_finished"] = len(finished)
    if not finished:
        return row
    best = (max if mode == "max" else min)(finished, key=lambda r: r.metrics[metric])
    trial_id = best.metrics.get("trial_id")
    number = callback.numbers.get(trial_id)
    params = dict((best.config or {}).get("params", best.config or {}))
    row.update({"best_trial": f"trial-{number:03d}" if number else str(trial_id),
                "best_run_id": callback.runs.get(trial_id), "best_name": callback.names.get(trial_id),
                "round": best.metrics.get("round")})
    for key in (metric, *(k for k in _REPORTED if k != metric)):
        for name in (key, f"{key}_std"):
            if best.metrics.get(name) is not None:
                row[name] = best.metrics[name]
    row["params"] = params
    row["rerun"] = f"python -m platform.run {cell_space.name} {rerun} " + " ".join(
        f"--set {k}={v}" for k, v in params.items())
    return row


def _cells_csv(rows: list[dict], space) -> str:
    import csv
    import io

    keys = list(space.scenarios)
    head = ["cell", "scenario", *keys, "sampler_seed", "trials_finished", "trials_failed"]
    if space.search.multi_objective:
        values = ["pareto_size", *(f"{METRIC_BEST}{m}" for m in space.search.metrics)]
        params = []
    else:
        metric = space.search.metric
        values = ["best_trial", "best_run_id", "round"]
        for key in (metric, *(k for k in _REPORTED if k != metric)):
            values += [key, f"{key}_std"]
        params = list(dict.fromkeys(k for row in rows for k in row.get("params", {})))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*head, *values, *(f"{TAG_BEST_PREFIX}{k}" for k in params)])
    for row in rows:
        cell = [row["cell"], row["scenario"], *(row["values"].get(k, "") for k in keys), row["sampler_seed"],
                row["trials_finished"], row["trials_failed"]]
        writer.writerow([*cell, *(_csv_value(row.get(k)) for k in values),
                         *(_csv_value(row.get("params", {}).get(k)) for k in params)])
    return out.getvalue()


def _csv_value(value):
    return "" if value is None else value


def _fronts_csv(rows: list[dict], space) -> str:
    """Multi-objective: every cell's front, one line per (cell, front trial)."""
    import csv
    import io

    points = [{**point, "cell": row["cell"], "scenario": row["scenario"]} for row in rows for point in
              row.get("front") or []]
    values = [k for m in space.search.metrics for k in (m, f"{m}_std")]
    params = list(dict.fromkeys(k for p in points for k in p.get("params", {})))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["cell", "scenario", "trial", "run_id", "round", *values, *params])
    for p in points:
        writer.writerow([p["cell"], p["scenario"], p["trial"], p.get("run_id") or "", p.get("round"),
                         *(_csv_value(p.get(k)) for k in values), *(_csv_value(p["params"].get(k)) for k in params)])
    return out.getvalue()


def _report_cells(rows: list[dict], space, tracker, parent_run_id, sweep_dir) -> str:
    """Print one line per cell (its best configuration, selection metric and test figures; multi-objective: its
    front), log per-cell metrics and the table ``scenarios/best_per_cell.csv`` / ``.json`` on the parent run."""
    search = space.search
    finished = sum(r["trials_finished"] for r in rows)
    failed = sum(r["trials_failed"] for r in rows)
    metrics = {"trials_completed": finished, "trials_failed": failed, "scenario_cells": len(rows)}
    for row in rows:
        prefix = f"{METRIC_CELL_PREFIX}{row['cell']:02d}/"
        metrics[f"{prefix}trials_completed"] = row["trials_finished"]
        if search.multi_objective:
            metrics[f"{prefix}{METRIC_PARETO_SIZE}"] = row.get("pareto_size", 0)
            metrics.update({f"{prefix}{METRIC_BEST}{m}": row.get(f"{METRIC_BEST}{m}") for m in search.metrics})
        else:
            metrics[f"{prefix}{METRIC_BEST}{search.metric}"] = row.get(search.metric)
            metrics.update({f"{prefix}{METRIC_BEST_TRIAL}{k}": row.get(k) for k in _REPORTED if k != search.metric})
    tracker.log_metrics(parent_run_id, {k: v for k, v in metrics.items()
                                        if v is not None and not (isinstance(v, float) and math.isnan(v))})
    tracker.log_text(parent_run_id, json.dumps(_json_value(rows), indent=2), ARTIFACT_SCENARIOS_JSON)
    tracker.log_text(parent_run_id, _cells_csv(rows, space), ARTIFACT_SCENARIOS_CSV)
    if search.multi_objective:
        tracker.log_text(parent_run_id, _fronts_csv(rows, space), ARTIFACT_SCENARIO_FRONTS_CSV)
    objectives = ", ".join(f"{m} ({d})" for m, d in search.objectives)
    what = f"Pareto front of {objectives}" if search.multi_objective else f"best trial on {objectives}"
    print(f"\n{what} per scenario cell ({len(rows)} cells, {finished} trial(s) finished, {failed} failed):")
    for row in rows:
        head = f"  cell {row['cell']}/{len(rows)} {row['scenario']}:"
        counts = f"{row['trials_finished']} finished, {row['trials_failed']} failed"
        if search.multi_objective:
            if not row.get("front"):
                print(f"{head} no trial finished ({counts})")
                continue
            print(f"{head} {row['pareto_size']} non-dominated of {counts}")
            for point in row["front"]:
                values = "  ".join(f"{m} {_figure(point[m])}" for m in search.metrics)
                params = ", ".join(f"{k}={v}" for k, v in point["params"].items()) or "(the cell's base config)"
                print(f"      {values}  | {params}")
            continue
        if search.metric not in row:
            print(f"{head} no trial finished ({counts})")
            continue
        metric = search.metric
        std = f" ± {_figure(row[metric + '_std'])}" if row.get(metric + "_std") is not None else ""
        reported = "".join(f", {k} {_figure(row[k])}" + (f" ± {_figure(row[k + '_std'])}"
                                                         if row.get(k + "_std") is not None else "")
                           for k in _REPORTED if k != metric and row.get(k) is not None)
        params = ", ".join(f"{k}={_short(v)}" for k, v in row["params"].items()) or "(the cell's base config)"
        print(f"{head} {metric} {_figure(row[metric])}{std} at round {row.get('round')}{reported} ({counts}) | {params}")
    print(f"table: {ARTIFACT_SCENARIOS_CSV} and {ARTIFACT_SCENARIOS_JSON} on the parent run {parent_run_id}")
    print(f"tune storage: {sweep_dir}")
    missing = [r for r in rows if r["trials_finished"] == 0]
    if missing:
        print(f"no trial finished in scenario cell(s) {', '.join(str(r['cell']) for r in missing)}; see the child runs "
              f"in MLflow", file=sys.stderr)
        return "FAILED"
    return "FINISHED"


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _figure(value) -> str:
    """A reported figure to 4 decimals (a summary read back from the state file may hold "inf" or "nan")."""
    return f"{value:.4f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)

