"""``python -m platform.sweep <name>``: run the sweep in ``search_spaces/<name>.yaml`` with Ray Tune + Optuna.

Every trial runs a base experiment config with sampled parameters on each of the sweep's seeds. Results
go to MLflow (a parent run for this invocation, a child run per trial) and to Tune's storage, so an
interrupted sweep can continue with ``--resume``. Works the same under ``ray job submit``.

A space with a ``scenarios:`` block runs one study per cell of its cross product, one cell after another in the
same Ray connection and under the same parent run (see :mod:`platform.sweep.cells`): each cell has its own Tune
experiment, searcher, scheduler and best trial (or Pareto front), and the summary is one line per cell plus the table
``scenarios/best_per_cell.csv`` / ``.json`` on the parent run.

This module is the command line: its flags, ``--list`` / ``--repair`` / ``--resume``, the checks before anything is
written, and the run of a sweep under its parent run. The study itself is :mod:`platform.sweep.study`, the resume
state :mod:`platform.sweep.state`.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Optional

from platform.sweep import tune_fixes
from platform.config.space_files import MAX_NUM_SAMPLES, MAX_REPEATS
from platform.cli import (add_plan_arguments, add_ray_arguments, check_address, connect_ray,
                          leave_ray_job_working_dir, main_wrapper, quiet_libraries, results_home, sqlite_path,
                          start_ray_early)
from platform.errors import UserError
from platform.config.run_schema import (PARAM_BASE, PARAM_SCENARIO, PARAM_SEARCH, PARAM_SPACE, STATUS_COMPLETED,
                                        STATUS_FAILED, STATUS_INTERRUPTED, STATUS_RUNNING, TAG_COMMAND,
                                        TAG_DESCRIPTION, TAG_DRIVER, TAG_GIT_COMMIT, TAG_NOTE, TAG_OPTUNA_STORAGE,
                                        TAG_PRESET, TAG_SEARCH_SPACE, TAG_STATUS, TAG_SWEEP_DIR)
from platform.sweep.cells import first_state, run_cells
from platform.sweep.faults import (NodeLost, abandon_run, close_sweep, node_lost, repair_line, report_stop, say,
                                   stopping, unwatch_ray_node, watch_ray_node)
from platform.sweep.state import (INVOCATION_FLAGS, STATE_FILE, check_resumable, check_space_unchanged,
                                  check_state_readable, claim_sweep, default_storage, driver_id, invocation_of,
                                  join_storage, latest_unfinished, read_state, record_status, releasing_leases,
                                  repair_sweep, resume_command, start_state, sweep_experiment_name)
from platform.sweep.study import (count_expected_trials, fit_study, pin_public_image, refused_by_config, report_best,
                                  sweep_trainable)
# platform.config.experiment and platform.config.search_space (torch, through the algorithms) are imported where used: a command starts
# Ray before it imports them (platform.cli.start_ray_early).


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m platform.sweep",
        description="Run a hyperparameter sweep defined in search_spaces/<name>.yaml (Ray Tune + Optuna), "
                    "tracked in MLflow. Inside a Ray cluster (ray job submit) it uses that cluster, "
                    "elsewhere it starts a local Ray.",
        epilog="Examples:\n  python -m platform.sweep smoke\n"
               "  python -m platform.sweep smoke --num-samples 2 --set rounds=3\n"
               "  python -m platform.sweep fedkp_bandwidth --preset paper --dry-run\n"
               "  python -m platform.sweep fedkp_bandwidth --preset paper --stand-in --estimate --gpus 8\n"
               "  ray job submit --working-dir . -- python -m platform.sweep smoke",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", nargs="?", help="search space name (a file in search_spaces/) or a YAML path")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a base-config value, e.g. --set rounds=3 (repeatable); on a swept parameter or a "
                             "scenario key it pins that value (the key leaves the sampler / grid)")
    add_plan_arguments(parser, "the sweep")
    parser.add_argument("--num-samples", type=int, metavar="N",
                        help=f"at most N trials per scenario cell (1 to {MAX_NUM_SAMPLES}), whatever the searcher "
                             f"(a quick look): TPE and random draw N; the grid runs N of its points, spread evenly "
                             f"over it (named in the plan and at the start), once each; overrides search.num_samples")
    parser.add_argument("--repeats", type=int, metavar="K",
                        help=f"grid searcher: run every grid point (or the N of --num-samples) K times (1 to "
                             f"{MAX_REPEATS}); what search.num_samples means for a grid in the file")
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
    parser.add_argument("--list", action="store_true",
                        help="list the search spaces (each one's question, presets and the minutes its default takes "
                             "on 2 CPUs) and exit")
    parser.add_argument("--repair", action="store_true",
                        help="close the MLflow runs of sweeps whose driver died (kill -9, a lost machine) and left "
                             "them RUNNING, in --tracking-uri's store, then exit")
    parser.add_argument("--quiet", action="store_true", help="print only the final summary")
    return parser


def _storage_flag(given: Optional[str], flag: str, env: str) -> str:
    """Which option or variable a storage location came from, for the one-line error that names it."""
    return flag if given else (env if os.environ.get(env) else flag)


def resolve_resume(args) -> str:
    """The experiment directory ``--resume`` continues, with ``args`` completed from its stored invocation. A flag
    given again must match what is stored (one line naming it otherwise)."""
    from platform.stages import storage as st  # deferred: start-up time

    storage = st.normalise(args.storage_path or default_storage())
    st.check_storage(storage, _storage_flag(args.storage_path, "--storage-path", "FEDSWEEP_STORAGE"))
    if isinstance(args.resume, str) and not args.name and not st.isfile(st.join(storage, args.resume, STATE_FILE)):
        if re.fullmatch(r".+-\d{8}-\d{6}-[0-9a-f]{6}", args.resume):  # a sweep id, as printed, not under this storage
            raise UserError(f"--resume: no sweep {args.resume!r} under {storage}; give the --storage-path it ran with "
                            f"(the printed continue-with line has it)")
        args.name, args.resume = args.resume, True  # "--resume smoke": a space's name, not a sweep id
    if isinstance(args.resume, str):
        resume_dir = st.join(storage, args.resume)
        if not st.isfile(st.join(resume_dir, STATE_FILE)):
            raise UserError(f"--resume: no sweep {args.resume!r} under {storage}")
    else:
        if not args.name:
            raise UserError("--resume: name the search space, or give the sweep id it printed (--resume SWEEP_ID)")
        space_name = os.path.splitext(os.path.basename(args.name))[0]
        resume_dir = latest_unfinished(storage, space_name)
        if resume_dir is None:
            raise UserError(f"--resume: no unfinished sweep of {space_name!r} under {storage}")
    check_state_readable(resume_dir)  # a state cut short by a crash: one line now, not a silent hang in Tune
    state = read_state(resume_dir)
    if state.get("status") == STATUS_COMPLETED:
        raise UserError(f"--resume: sweep {os.path.basename(resume_dir)} completed; start a new one without --resume")
    stored = state.get("invocation")
    if stored is None:  # a sweep from before invocations were stored: the flags as given now
        return resume_dir
    check_space_unchanged(resume_dir, stored)  # the space file the sweep started with, byte for byte
    for key, flag in INVOCATION_FLAGS.items():
        given, kept = getattr(args, key), stored.get(key)
        if key == "name" and given and kept and os.path.isfile(given):
            given = os.path.abspath(given)
        if given in (None, [], False) or given == kept or (key == "name" and kept and given == os.path.splitext(
                os.path.basename(kept))[0]) or (key == "overrides" and _sets_agree(given, kept)):
            setattr(args, key, kept)
            continue
        raise UserError(f"--resume: {flag} {given!r} conflicts with the interrupted sweep's {kept!r}; drop it "
                        f"(--resume reuses the sweep's own), or start a new sweep")
    if args.tracking_uri is None:  # the store it wrote to, wherever --resume runs from
        args.tracking_uri = state.get("tracking_uri")
    return resume_dir


def _sets_agree(given: list, kept) -> bool:
    """Whether every ``--set`` given again with ``--resume`` says what the interrupted sweep's own ``--set`` says
    (parsed, so ``rounds=6`` agrees with ``rounds=6.0``, in any order, and repeating some of them agrees too)."""
    from platform.config.experiment import parse_overrides

    if not isinstance(kept, list):
        return False
    stored = parse_overrides(kept)
    return all(key in stored and stored[key] == value and isinstance(stored[key], bool) == isinstance(value, bool)
               for key, value in parse_overrides(given).items())


_SIGTERM = {"held": False, "pending": False, "signal": None}


def _on_sigterm(signum, frame):
    import signal

    _SIGTERM["signal"] = signum  # Ray turns an interrupt raised inside its calls into a bare KeyboardInterrupt
    if _SIGTERM["held"]:  # Ray starting, or the parent run being created: ended once that is done
        _SIGTERM["pending"] = signum
        return
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _stop_on_sigterm() -> None:
    """SIGTERM (a scheduler, ``kill``, a container stop) and SIGHUP (the driver's terminal closed) end the sweep as
    Ctrl-C does: the open runs are closed as interrupted and the resume hint printed, instead of an abort that leaves
    them RUNNING. Installed again after anything that replaces it (``ray.init`` on the main thread sets a SIGTERM
    handler that exits at once)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
        signal.signal(signal.SIGHUP, _on_sigterm)


def _hold_sigterm() -> None:
    """From here until :func:`_release_sigterm`, a SIGTERM waits: Ray's start (a SystemExit in the middle of it
    aborted the process with Ray's C++ stack dump, exit 134) and the parent run's creation (an interrupt between the
    run's creation and the ``try`` that closes it left it RUNNING, with no resume line) are not cut in two."""
    _stop_on_sigterm()
    _SIGTERM["held"] = True


def _release_sigterm() -> None:
    """End the hold of :func:`_hold_sigterm`; a SIGTERM that came meanwhile is raised now, as KeyboardInterrupt."""
    _stop_on_sigterm()  # ray.init on the main thread (joining a cluster) replaced it
    _SIGTERM["held"] = False
    if _SIGTERM["pending"]:
        import signal

        pending, _SIGTERM["pending"] = _SIGTERM["pending"], False
        raise KeyboardInterrupt(signal.Signals(pending).name if isinstance(pending, int) else "SIGTERM")


@main_wrapper(interrupted="interrupted before the sweep started its trials: nothing needs resuming; run the command "
                          "again to start it")
@releasing_leases  # the sweep's lease (one driver per sweep) is let go on every exit path
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.invocation = None  # set once the flags are final (after --resume restored them)
    if args.list:
        from platform.config.space_files import space_listing

        print("\n".join(space_listing()))
        return 0
    if args.repair:
        return repair_sweep(args)
    _check_flag_values(args)
    resume_dir = resolve_resume(args) if args.resume else None
    if resume_dir:
        claim_sweep(resume_dir)  # another live driver of this sweep: refused here, in one line, before Ray starts
    if not args.name:
        from platform.config.space_files import available_search_spaces

        raise UserError(f"name a search space; available: {', '.join(available_search_spaces())}")
    # The checks that need no torch, before Ray starts: the space's file, sections and preset, the --set values, and
    # every store the sweep writes. A refused input then ends in well under a second (exit 2, one line).
    from platform.config.space_files import parse_overrides, read_search_space

    read_search_space(args.name, args.preset)
    overrides = parse_overrides(args.overrides)
    planning = args.dry_run or args.estimate
    storage = None if planning else _check_stores(args)
    if not planning:
        check_address(args.address)  # a cluster that does not answer: one line in seconds, before torch and Ray
    from platform.config.search_space import load_search_space
    from platform.preflight import check_experiment, check_settings
    from platform.preflight.citations import check_effective_citations

    if args.stand_in:
        overrides["stand_in"] = True
    args.invocation = invocation_of(args)
    # Everything is validated before anything is written: MLflow, Tune storage, Ray.
    space = load_search_space(args.name, overrides, args.num_samples,
                              check=check_settings if planning else check_experiment, preset=args.preset,
                              repeats=args.repeats)
    base_config = space.trial_config({})
    if args.dry_run:  # the plan names the notes, and checks the preset's citations with the sizes it prints
        return _plan(args, space, base_config)
    check_effective_citations(space)  # a preset cites every value that shapes its experiment, inherited ones too
    for note in space.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    if planning:
        return _plan(args, space, base_config)
    if argv is None:  # this process is the command, every input checked: a new local Ray starts in the background
        quiet_libraries()  # while the parent run and the study are prepared
        _hold_sigterm()  # a SIGTERM from here on ends the sweep once Ray is up (_run), never half-way through its start
        start_ray_early(args.address, args.ray_dashboard)
    space = pin_public_image(space, base_config)
    if resume_dir:
        check_resumable(resume_dir, space)
    from platform.results.tracking import resolve_tracking_uri
    from platform.sweep.optuna_store import storage_url

    tracking_uri = resolve_tracking_uri(args.tracking_uri)  # checked in _check_stores; creates the results home
    args.optuna_url = storage_url(tracking_uri, args.optuna_storage)
    quiet_libraries()
    leave_ray_job_working_dir(results_home())
    return _run(args, space, base_config, storage, tracking_uri, resume_dir)


def _check_stores(args) -> str:
    """Every store the sweep writes, checked before Ray starts and torch is imported, leaving nothing behind (one line
    naming the option or variable): Tune's storage (a path, s3://bucket/prefix or gs://bucket/prefix; a URI is
    checked for credentials, endpoint, bucket and write access, a probe object written and deleted; a local directory,
    or its nearest existing ancestor, by a probe file created and removed), the stage cache, the MLflow store and the
    Optuna storage. Returns Tune's storage."""
    from platform.results.tracking import check_sqlite_file, check_tracking_uri, given_tracking_uri
    from platform.stages.storage import check_storage, normalise
    from platform.sweep import optuna_store

    storage = normalise(args.storage_path or default_storage())
    check_storage(storage, _storage_flag(args.storage_path, "--storage-path", "FEDSWEEP_STORAGE"))
    cache = args.cache_dir or (None if args.no_cache else os.environ.get("FEDSWEEP_CACHE"))
    if cache:
        check_storage(normalise(cache), _storage_flag(args.cache_dir, "--cache-dir", "FEDSWEEP_CACHE"))
    uri, flag = given_tracking_uri(args.tracking_uri)  # without creating the results home it defaults to
    check_tracking_uri(uri, flag)
    url = optuna_store.storage_url(uri, args.optuna_storage)
    if args.optuna_storage or os.environ.get(optuna_store.ENV_STORAGE):
        optuna_store.check_storage(url, _storage_flag(args.optuna_storage, "--optuna-storage",
                                                      optuna_store.ENV_STORAGE))
    elif sqlite_path(url):  # beside the MLflow store, whose directory is checked: the file itself
        check_sqlite_file(sqlite_path(url), "--optuna-storage", optuna_store.STUDY_FILE)
    return storage


def _check_flag_values(args) -> None:
    """The flags' own values, before any file is read (one line naming the flag): the counts within their bounds, and
    no empty store or address (which would fall back silently to its default)."""
    from platform.cli import check_given

    for flag, value, most in (("--num-samples", args.num_samples, MAX_NUM_SAMPLES),
                              ("--repeats", args.repeats, MAX_REPEATS), ("--gpus", args.gpus, None)):
        if value is not None and (value < 1 or (most is not None and value > most)):
            raise UserError(f"{flag}: must be an integer from 1 to {most}, got {value}" if most is not None else
                            f"{flag}: must be >= 1, got {value}")
    check_given(args.tracking_uri, "--tracking-uri", "an MLflow tracking URI (sqlite:///path/mlflow.db, "
                                                     "http://host:5000, a directory)")
    check_given(args.optuna_storage, "--optuna-storage", "an RDB URL (sqlite:///path/optuna.db, "
                                                         "postgresql://user@host/db)")
    check_given(args.storage_path, "--storage-path", "a path, s3://bucket/prefix or gs://bucket/prefix")
    check_given(args.cache_dir, "--cache-dir", "a path, s3://bucket/prefix or gs://bucket/prefix")
    check_given(args.address, "--address", "a cluster address (host:port, ray://host:port, auto) or local")


def _plan(args, space, base_config) -> int:
    """``--dry-run`` (the plan, no Ray) or ``--estimate`` (one trial's first rounds measured, the sweep predicted)."""
    from platform.preflight.estimate import estimate
    from platform.preflight.plan import sweep_plan

    if args.dry_run:
        print(sweep_plan(space, base_config))
        return 0
    first = space.cell_space(0).trial_config({}) if space.scenarios else base_config
    command = f"python -m platform.sweep {args.name}" + (f" --preset {args.preset}" if args.preset else "")
    print(estimate(first, space, gpus=args.gpus, address=args.address, dashboard=args.ray_dashboard,
                   cache_dir=args.cache_dir, command=command + " --estimate"))
    return 0


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
    from platform.results.tracking import Tracker, log_driver_cache_corrupt, log_patch_samples

    from platform.runtime.placement import check_fits_connected_cluster, trials_at_once
    from platform.config.trials import grid_subset_note

    started_ms = int(time.time() * 1000)  # a child run created from here on is this driver's own
    _hold_sigterm()  # main() holds it already; _run called on its own too
    try:
        mode = connect_ray(args.address, args.ray_dashboard)
    except BaseException:
        _SIGTERM.update(held=False, pending=False)
        raise
    _release_sigterm()  # a SIGTERM while Ray started ends the sweep here: nothing written yet (exit 130)
    check_fits_connected_cluster(base_config.resources)  # a trial that could never start: one line, nothing written
    tracker = Tracker(tracking_uri, space.name)
    # The Tune experiment (one directory per sweep, a sub-directory per scenario cell) names the Optuna study too.
    experiment = os.path.basename(resume_dir) if resume_dir else sweep_experiment_name(space.name)
    _hold_sigterm()  # the parent run and its resume state are written whole, then closed by the try's finally
    try:
        parent_run_id = _open_parent_run(tracker, args, space, base_config, resume_dir)
    except BaseException:
        _SIGTERM.update(held=False, pending=False)
        raise
    status = "FAILED"
    refused = None  # the bad input every trial failed on, found only as the trials built their data: exit 2
    callback = None
    stop = None  # what stopped the sweep from outside its trials (platform/sweep/faults.py): exit 1
    answer = SweepAnswer()
    try:
        tracker.set_tag(parent_run_id, TAG_SWEEP_DIR, resume_dir or join_storage(storage, experiment))  # --repair
        if not resume_dir:  # the experiment directory records the parent run, for --resume (and the resume line)
            claim_sweep(join_storage(storage, experiment))  # before the state a --resume finds: one driver per sweep
            start_state(join_storage(storage, experiment), parent_run_id, tracking_uri, space, args.invocation,
                         **first_state(experiment, space))
        _release_sigterm()  # a SIGTERM meanwhile: interrupted here, the parent closed and the resume line printed
        tune_fixes.apply()  # a trial handed a dead reused actor is run again (platform/sweep/tune_fixes.py)
        watch_ray_node(_log_dirs(storage, experiment))  # its raylet killed: runs closed before Ray ends us
        objectives = ", ".join(f"{m} ({d})" for m, d in space.search.objectives)
        selecting = f"Pareto front of {objectives}" if space.search.multi_objective else f"selecting on {objectives}"
        rounds = "rounds per cell" if "rounds" in space.scenarios else f"{base_config.rounds} rounds"
        cells = (f"{len(space.cells())} scenario cell(s) of {', '.join(space.scenarios)} (one study each), "
                 if space.scenarios else "")
        print(f"sweep {space.name}: {cells}{count_expected_trials(space)} trial(s) x {len(space.seeds)} seed(s), "
              f"{rounds}, searcher {space.search.searcher}, {selecting}, "
              f"{trials_at_once(base_config.resources, space.search.max_concurrent_trials)}, Ray {mode}", flush=True)
        subset = "" if space.scenarios else grid_subset_note(space)
        if subset:
            print(f"grid: {subset}", flush=True)
        for metric in space.search.metrics:
            if metric.startswith("test_"):
                print(f"warning: search.metric {metric} selects on the test set; select on a validation "
                      f"metric (val_accuracy) and report test", file=sys.stderr, flush=True)
        expected_trials = count_expected_trials(space)
        cache = open_cache(args.cache_dir, not args.no_cache)
        if space.scenarios:
            status = run_cells(args, space, storage, tracker, parent_run_id,
                               resume_dir or join_storage(storage, experiment), cache, experiment, answer)
            if status == "FAILED" and answer.cells and all(row.get("refused") for row in answer.cells):
                refused = answer.cells[0]["refused"]
            return _exit_code(status, refused)
        shared = share_dataset(base_config, cache=cache)  # into the object store once, for every trial
        log_patch_samples(tracker, parent_run_id, shared)  # public.source image: public/patches.png
        # Pre-training (pretrain.method) of every (architecture, seed) the trials can need: here, on the driver,
        # before Tune starts (a trial's placement group cannot host Ray Train's workers); cache hits cost nothing.
        shared = prepare_pretrained(shared, sweep_pretrain_configs(space), cache,
                                    log=(lambda *a, **k: None) if args.quiet else print)
        log_driver_cache_corrupt(tracker, parent_run_id)  # found while preparing: on the parent run
        answer.studies = [experiment]
        callback = MlflowSweepCallback(tracker, parent_run_id, space, base_config.rounds, expected_trials,
                                       quiet=args.quiet, shared=shared,
                                       study=StudyRecorder(args.optuna_url, experiment, space.search.objectives,
                                                           space.parameters))
        trainable = sweep_trainable(space, base_config, shared, args)
        results, callback = fit_study(trainable, space, base_config, storage, experiment, callback, log=print)
        if results is None:
            if node_lost():  # Tune ended its run on the interrupt: not a user's, the command says what it was
                raise NodeLost(node_lost())
            callback.close_open_runs(STATUS_INTERRUPTED, "KILLED")
            print(f"\ninterrupted; continue with: {resume_command(experiment, storage)}", file=sys.stderr)
            status = "KILLED"
        else:
            status = report_best(results, space, tracker, parent_run_id, callback, answer,
                             sweep_dir=join_storage(storage, experiment))
            refused = refused_by_config(results) if status == "FAILED" else None
    except KeyboardInterrupt as interrupt:  # Ctrl-C, SIGTERM, SIGHUP; or this driver's Ray node lost (NodeLost)
        status = "KILLED"
        if isinstance(interrupt, NodeLost) or node_lost():
            stop = stopping(interrupt, _log_dirs(storage, experiment), tracking_uri, args.optuna_url)
        else:
            if callback is not None:
                callback.close_open_runs(STATUS_INTERRUPTED, "KILLED")
            by = " by SIGHUP (its terminal closed)" if _SIGTERM.get("signal") == 1 else ""  # signal.SIGHUP
            say(f"\ninterrupted{by}; continue with: {resume_command(experiment, storage)}")
            interrupt.announced = True  # main_wrapper adds no line of its own
            raise
    except UserError:  # bad input found on the way (another driver holds the sweep): its line, exit 2
        raise
    except Exception as err:  # a full disk, a store locked past its wait, any other error in the driver
        status, refused = "FAILED", None
        stop = stopping(err, _log_dirs(storage, experiment), tracking_uri, args.optuna_url)
    finally:
        unwatch_ray_node()
        _SIGTERM.update(held=True, pending=False)  # closing up: a second SIGTERM never leaves a run half-closed
        answer.status = _STATUS_TAGS.get(status, STATUS_FAILED)
        unclosed = close_sweep(tracker, parent_run_id, status, answer.status, stop=stop, started_ms=started_ms,
                               record=lambda: record_status(join_storage(storage, experiment), answer.status),
                               publish=lambda: publish(tracker, parent_run_id, space, answer, args.optuna_url,
                                                       quiet=args.quiet))
        if unclosed and stop is None:
            say(repair_line(unclosed, tracking_uri))
        _SIGTERM.update(held=False, pending=False)
        if refused:
            print(f"error: {refused} (every trial failed on it)", file=sys.stderr, flush=True)
    if stop is not None:
        from platform.stages.storage import isfile

        try:
            resumable = isfile(join_storage(storage, experiment, STATE_FILE))
        except Exception:  # noqa: BLE001 - a storage that does not answer: no line to continue from
            resumable = False
        return report_stop(stop, unclosed, resume_command(experiment, storage) if resumable else None, tracking_uri)
    return _exit_code(status, refused)


def _log_dirs(storage: str, experiment: str) -> list[str]:
    """Where the log of what stopped a sweep goes: its Tune directory, else the results home's ``logs``."""
    return [join_storage(storage, experiment), os.path.join(results_home(), "logs")]


def _exit_code(status: str, refused: "str | None") -> int:
    """0 finished, 130 interrupted, 2 when every trial failed on the same kind of bad input, else 1."""
    return 2 if refused else {"FINISHED": 0, "KILLED": 130}.get(status, 1)


_STATUS_TAGS = {"FINISHED": STATUS_COMPLETED, "KILLED": STATUS_INTERRUPTED}


def _open_parent_run(tracker, args, space, base_config, resume_dir) -> str:
    """The sweep's parent MLflow run: reopened when resuming, else created with the base config, the space and the
    search settings as params."""
    from platform.results.tracking import command_line, git_commit

    if resume_dir:
        parent_run_id = read_state(resume_dir)["parent_run_id"]
        tracker.set_tag(parent_run_id, TAG_DRIVER, driver_id())  # --repair asks this driver, not the dead first one
        tracker.set_tag(parent_run_id, TAG_STATUS, STATUS_RUNNING)
        tracker.client.update_run(parent_run_id, status="RUNNING")
        return parent_run_id
    from platform.sweep.outputs import SweepAnswer, description

    parent_run_id = tracker.start_run(
        name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}",
        tags={TAG_SEARCH_SPACE: space.name, TAG_GIT_COMMIT: git_commit(),
              TAG_COMMAND: command_line("platform.sweep", args.argv), TAG_STATUS: STATUS_RUNNING,
              TAG_DESCRIPTION: space.description, TAG_OPTUNA_STORAGE: args.optuna_url, TAG_DRIVER: driver_id(),
              **({TAG_PRESET: space.preset_name} if space.preset_name else {}),
              TAG_NOTE: description(space, tracker.experiment_id, SweepAnswer())})
    try:
        _log_parent_params(tracker, parent_run_id, space, base_config)
    except BaseException:
        abandon_run(tracker, parent_run_id)  # a store that fails now (full, locked): no parent left RUNNING
        raise
    return parent_run_id


def _log_parent_params(tracker, parent_run_id: str, space, base_config) -> None:
    tracker.log_params(parent_run_id, {
        **{f"{PARAM_BASE}{k}": v for k, v in base_config.flat().items()},
        **{f"{PARAM_SCENARIO}{k}": list(values) for k, values in space.scenarios.items()},
        **{f"{PARAM_SPACE}{k}": f"{d.kind}{list(d.args)}" + (f" when {d.when}" if d.when else "")
           for k, d in space.parameters.items()},
        **{f"{PARAM_SEARCH}{k}": v for k, v in vars(space.search).items() if k != "scheduler"},
        f"{PARAM_SEARCH}scheduler": space.search.scheduler.kind, f"{PARAM_SEARCH}seeds": space.seeds})
