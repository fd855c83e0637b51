"""``python -m platform.run <config>``: one experiment, no Tune. Prints per-round metrics, logs one MLflow run.

``<config>`` is an experiment-config YAML file, or the name of a search space (its base config is run).
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Optional

# Light imports only (no torch): a command starts Ray before it imports the rest (platform.cli.start_ray_early).
from platform.cli import (add_plan_arguments, add_ray_arguments, check_address, check_given, connect_ray,
                          leave_ray_job_working_dir, main_wrapper, quiet_libraries, run_command, start_ray_early)
from platform.errors import UserError
from platform.config.run_schema import (METRIC_FINAL, RESULT_ARRAYS, RESULT_CACHE_CORRUPT, RESULT_CLIENT_PATHS,
                                 STATUS_COMPLETED, STATUS_FAILED, STATUS_INTERRUPTED, STATUS_RUNNING, TAG_COMMAND,
                                 TAG_GIT_COMMIT, TAG_STATUS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m platform.run",
        description="Run one federated experiment (no sweep) on Ray actors and log it as one MLflow run.",
        epilog="Examples:\n  python -m platform.run my_experiment.yaml --set rounds=20\n"
               "  python -m platform.run fedkp_bandwidth --preset paper --dry-run\n"
               "  python -m platform.run fedkp_bandwidth --preset paper --stand-in --estimate\n"
               "  python -m platform.run smoke --set algorithm.name=fedprox --set algorithm.mu=0.01",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="experiment YAML file, or a search-space name whose base config to run")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set clients.lr=0.1 (repeatable)")
    add_plan_arguments(parser, "the run")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                                               "sqlite:///<results home>/mlflow.db)")
    parser.add_argument("--experiment", help="MLflow experiment name (default: the config's file name)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    parser.add_argument("--profile", action="store_true",
                        help="print a per-round time breakdown (sample, broadcast, local train, aggregate, evaluate, "
                             "tracking) and log it as the MLflow artifact profile.txt")
    parser.add_argument("--show-partition", action="store_true",
                        help="print the client x class count matrix (always logged to MLflow as an artifact)")
    parser.add_argument("--cache-dir", help="stage cache: a path, s3://bucket/prefix or gs://bucket/prefix (default: "
                                            "$FEDSWEEP_CACHE, else <results home>/cache)")
    parser.add_argument("--no-cache", action="store_true", help="recompute cached stages")
    add_ray_arguments(parser)
    return parser


def resolve_config(target: str, overrides: list[str], preset: Optional[str] = None, check=None):
    """(config, experiment name) for an experiment YAML, a search-space YAML (its base config, with ``preset`` laid
    over the file) or a search-space name. A file is a search space when it has a ``base`` section. ``check``: the
    pre-flight check (default :func:`platform.preflight.check_experiment`)."""
    # the name first (a light module), so a typo is answered at once; the config and pre-flight import torch
    from platform.config.space_files import available_search_spaces, did_you_mean, find_search_space, read_search_space

    if os.path.isfile(target):
        path = target
    else:
        try:
            path = find_search_space(target)
        except UserError:
            raise UserError(f"no config file or search space named {target!r}{did_you_mean(target)}; search "
                            f"spaces: {', '.join(available_search_spaces()) or 'none'}") from None
    from platform.config.experiment import apply_overrides, build_experiment, load_yaml, parse_overrides
    from platform.preflight import check_experiment

    raw = load_yaml(path)
    if raw is None:
        raise UserError(f"{path} is empty; an experiment config is a mapping of sections (dataset, model, algorithm, "
                        f"...), a search space has base and parameters")
    name = os.path.splitext(os.path.basename(path))[0]
    parsed = parse_overrides(overrides)
    if isinstance(raw, dict) and "base" in raw:  # a search space: run its base config
        raw = read_search_space(path, preset)[1]
        base = dict(raw.get("base") or {})
        if raw.get("resources") is not None:
            base.setdefault("resources", raw["resources"])
        raw = base
    elif not isinstance(raw, dict):
        raise UserError(f"{path}: an experiment config must be a mapping of sections")
    elif preset is not None:
        raise UserError(f"--preset: {path} is an experiment config; presets belong to search spaces (their presets: "
                        f"block)")
    config = build_experiment(apply_overrides(raw, parsed))
    (check or check_experiment)(config)
    return config, name


PROFILE_PHASES = ("sample", "broadcast", "local_train", "aggregate", "evaluate", "tracking")


def profile_table(rounds: list[dict]) -> str:
    """Per-round seconds of each phase; ``other`` is the rest of the round (Ray scheduling, transfers).

    A round's clients start training while the previous round is evaluated, so where evaluation is long the
    phases can add up to more than the round (``other`` is then 0)."""
    header = f"{'round':>5} " + " ".join(f"{p:>11}" for p in PROFILE_PHASES) + f" {'other':>8} {'total':>8}"
    lines = ["time per round (s)", header]
    totals = {p: 0.0 for p in (*PROFILE_PHASES, "other", "total")}
    for m in rounds:
        phases = {p: float(m.get(f"{p}_seconds", 0.0)) for p in PROFILE_PHASES}
        total = float(m["seconds"]) + phases["tracking"]
        phases["other"] = max(total - sum(phases.values()), 0.0)
        phases["total"] = total
        for k, v in phases.items():
            totals[k] += v
        lines.append(f"{m['round']:>5} " + " ".join(f"{phases[p]:>11.4f}" for p in PROFILE_PHASES)
                     + f" {phases['other']:>8.4f} {total:>8.4f}")
    share = {k: 100 * v / totals["total"] if totals["total"] else 0 for k, v in totals.items()}
    lines.append(f"{'share':>5} " + " ".join(f"{share[p]:>10.1f}%" for p in PROFILE_PHASES)
                 + f" {share['other']:>7.1f}% {100:>7.1f}%")
    paths: dict[str, list[int]] = {}  # how the clients trained (clients.batched) -> the rounds it happened in
    for m in rounds:
        if m.get(RESULT_CLIENT_PATHS):
            paths.setdefault(m[RESULT_CLIENT_PATHS], []).append(int(m["round"]))
    if paths:
        lines.append("local training path per client actor (clients.batched):")
        for text, numbers in paths.items():
            where = f"rounds {numbers[0]}-{numbers[-1]}" if len(numbers) > 1 else f"round {numbers[0]}"
            lines.extend(f"  {where}: {part}" for part in text.split("; "))
    return "\n".join(lines)


def _format(metrics: dict, headline: tuple[str, ...] = ()) -> str:
    """One round's line: the method's headline metrics (validation, test, its own such as FedED's teacher
    ``ensemble_accuracy``), then the training loss."""
    accuracies = [k for k in headline if not k.endswith("_loss")]  # losses: test and training only, for one line
    names = dict.fromkeys((*accuracies, "val_accuracy", "test_accuracy", "test_loss", "train_loss"))
    figures = [f"{k} {metrics[k]:.4f}" for k in names if isinstance(metrics.get(k), (int, float))]
    return f"round {metrics['round']:>3}  " + "  ".join(figures) + f"  {metrics['seconds']:.2f}s"


class StartupClock:
    """Seconds from this process's start to each start-up step (``--profile`` prints them)."""

    def __init__(self):
        self.last = process_age()
        self.steps: list[tuple[str, float]] = [("interpreter, imports", self.last)]

    def mark(self, step: str) -> None:
        now = process_age()
        self.steps.append((step, now - self.last))
        self.last = now

    def table(self) -> str:
        total = sum(seconds for _, seconds in self.steps)
        return "start-up (s)\n" + "\n".join(f"{step:>34} {seconds:7.2f}" for step, seconds in self.steps) + \
            f"\n{'until round 1 ended':>34} {total:7.2f}"


def process_age() -> float:
    """Seconds since this process started (Linux: /proc; elsewhere since this module was imported)."""
    from platform.reaper import start_time

    started = start_time(os.getpid())
    try:
        with open("/proc/uptime") as fh:
            return float(fh.read().split()[0]) - started / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, TypeError):  # TypeError: no /proc/self/stat (start_time gave None)
        return time.perf_counter() - _IMPORTED


_IMPORTED = time.perf_counter()


def _check_stores(args) -> None:
    """The MLflow store and the stage cache, checked before Ray starts, a file written and removed in each local
    directory (one line naming the flag; nothing left behind): the URI :func:`resolve_tracking_uri` gives, without
    creating the results home it defaults to; the cache given by --cache-dir or $FEDSWEEP_CACHE."""
    from platform.results.tracking import check_tracking_uri, given_tracking_uri
    from platform.stages.storage import check_storage, normalise

    if not args.no_mlflow:  # an empty --tracking-uri is refused, not taken for the default
        check_tracking_uri(*given_tracking_uri(args.tracking_uri))
    cache = args.cache_dir or (None if args.no_cache else os.environ.get("FEDSWEEP_CACHE"))
    if cache:  # a path, s3://bucket/prefix or gs://bucket/prefix; the line names where it came from
        check_storage(normalise(cache), "--cache-dir" if args.cache_dir else "FEDSWEEP_CACHE")


@main_wrapper
def main(argv=None) -> int:
    clock = StartupClock()
    args = build_parser().parse_args(argv)
    quiet_libraries()
    overrides = args.overrides + (["stand_in=true"] if args.stand_in else [])
    if args.gpus is not None and args.gpus < 1:
        raise UserError(f"--gpus: must be >= 1, got {args.gpus}")
    check_given(args.cache_dir, "--cache-dir", "a path, s3://bucket/prefix or gs://bucket/prefix")
    check_given(args.address, "--address", "a cluster address (host:port, ray://host:port, auto) or local")
    from platform.config.space_files import parse_overrides

    parse_overrides(overrides)  # a --set value refused before torch loads
    if args.dry_run or args.estimate:
        return _plan(args, overrides)
    _check_stores(args)  # before torch and Ray: a store that cannot be written is one line, nothing started
    check_address(args.address)  # a cluster that does not answer: one line in seconds
    config, experiment = resolve_config(args.config, overrides, args.preset)
    if argv is None:  # this process is the command, the config checked: a new local Ray starts in the background
        start_ray_early(args.address, args.ray_dashboard)  # while the data load
    # Everything is imported before Ray connects (under ``ray job submit`` the working directory stops being
    # importable once the driver joins the cluster; see platform.sweep.command).
    import platform.stages.cache  # noqa: F401
    import platform.data.summary  # noqa: F401
    from platform.runtime.pretrain import prepare_pretrained
    from platform.cli import results_home
    from platform.results.tracking import Tracker, log_patch_samples, resolve_tracking_uri, ui_command
    from platform.runtime.federation import load_shared_data, share_dataset
    from platform.runtime.trial import start_federations, stop_federations

    clock.mark("config, platform imports")
    uri = None if args.no_mlflow else resolve_tracking_uri(args.tracking_uri)  # checked in _check_stores
    leave_ray_job_working_dir(results_home())
    tracker = None if args.no_mlflow else Tracker(uri, args.experiment or experiment)
    # The MLflow store (a new SQLite store builds its schema: seconds) opens while Ray starts and the actors import
    # torch; the run itself is created only once the actors are up.
    opening = _open_in_background(tracker)
    clock.mark("checks")
    print(f"{config.algorithm.name} on {config.dataset.name}: {config.clients.num_clients} clients, "
          f"{config.clients.clients_per_round} per round, {config.rounds} rounds", flush=True)
    from platform.stages.cache import open_cache

    cache = open_cache(args.cache_dir, not args.no_cache)
    loaded = load_shared_data(config, cache)  # needs no Ray: loaded while Ray starts in the background
    clock.mark("data loaded")
    connect_ray(args.address, args.ray_dashboard)
    from platform.runtime.placement import check_fits_connected_cluster

    check_fits_connected_cluster(config.resources)  # a run that could never start here: one line, nothing written
    clock.mark("Ray start")
    shared = share_dataset(config, cache=cache, loaded=loaded)
    # Pre-training (pretrain.method) runs here, on the driver, before any actor starts (platform.runtime.pretrain).
    shared = prepare_pretrained(shared, [config], cache)
    clock.mark("data into the object store")
    federations = start_federations(config, [config.seed], shared, lazy_clients=config.mode == "one_round",
                                    cache=cache)
    clock.mark("actors ready")
    if opening is not None:
        opening.join()  # a failure to open is raised by the first use of tracker.client below
    run_id = None
    status = "FAILED"
    try:
        run_id = _open_run(tracker, config, argv)
        summary = _log_partition(tracker, run_id, config, federations[0].data)
        if tracker is not None:
            log_patch_samples(tracker, run_id, federations[0].data)  # public.source image: public/patches.png
        if args.show_partition:
            print(summary)
        clock.mark("MLflow store, run, partition")
        profile = _run_rounds(federations, config, args, tracker, run_id, clock)
        if args.profile:
            table = clock.table() + "\n" + profile_table(profile)
            print(table)
            if tracker:
                tracker.log_text(run_id, table, "profile.txt")
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        stop_federations(federations)
        if tracker and run_id:
            tracker.set_tag(run_id, TAG_STATUS, {"FINISHED": STATUS_COMPLETED, "KILLED": STATUS_INTERRUPTED}.get(
                status, STATUS_FAILED))
            tracker.end_run(run_id, status)
            print(f"results: {ui_command(uri)}", flush=True)
    return 0


def _plan(args, overrides: list[str]) -> int:
    """``--dry-run`` (the resolved config, no Ray) or ``--estimate`` (the first rounds measured; with a search space,
    its whole sweep predicted)."""
    from platform.preflight.estimate import estimate
    from platform.preflight.plan import run_plan
    from platform.preflight import check_settings

    config, name = resolve_config(args.config, overrides, args.preset, check=check_settings)
    space = _space_of(args.config, overrides, args.preset, check_settings)
    if args.dry_run:
        print(run_plan(config, name, space.preset if space is not None else None))
        return 0
    command = f"python -m platform.run {args.config}" + (f" --preset {args.preset}" if args.preset else "")
    print(estimate(config, space, gpus=args.gpus, address=args.address, dashboard=args.ray_dashboard,
                   cache_dir=args.cache_dir, command=command + " --estimate"))
    return 0


def _space_of(target: str, overrides: list[str], preset: Optional[str], check):
    """The search space ``target`` names, loaded as the sweep would (None for an experiment config)."""
    from platform.config.experiment import load_yaml, parse_overrides
    from platform.config.search_space import load_search_space
    from platform.config.space_files import find_search_space

    try:
        path = target if os.path.isfile(target) else find_search_space(target)
    except UserError:
        return None
    raw = load_yaml(path)
    if not isinstance(raw, dict) or "base" not in raw:
        return None
    return load_search_space(path, parse_overrides(overrides), check=check, preset=preset)


def _open_in_background(tracker) -> Optional[threading.Thread]:
    """Open ``tracker``'s store in a daemon thread (None without MLflow), and import there what the partition's
    heat-map needs (matplotlib, 0.4 s), which the main thread logs once the actors are up."""
    if tracker is None:
        return None

    def open_store():
        try:
            tracker.client
        except Exception:  # noqa: BLE001 - opened again, and reported, in the main thread
            pass
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401

    thread = threading.Thread(target=open_store, name="open-mlflow-store", daemon=True)
    thread.start()
    return thread


def _open_run(tracker, config, argv) -> Optional[str]:
    """The experiment's MLflow run with the flattened config as params (None without MLflow)."""
    if tracker is None:
        return None
    from platform.results.tracking import command_line, git_commit

    run_id = tracker.start_run(name=f"{config.algorithm.name}-seed{config.seed}",
                               tags={TAG_STATUS: STATUS_RUNNING, TAG_GIT_COMMIT: git_commit(),
                                     TAG_COMMAND: command_line("platform.run", argv)})
    tracker.log_params(run_id, config.flat())
    return run_id


def _log_partition(tracker, run_id, config, data) -> str:
    """The client × class count table; logged with its heat-map when tracking."""
    from platform.data.partition import partition_clients
    from platform.data.summary import partition_summary
    from platform.results.tracking import log_partition

    if tracker is not None:
        return log_partition(tracker, run_id, config, data.train_labels, data.num_classes, data.train_groups,
                             data.train_coarse_labels)
    parts = partition_clients(data.train_labels, config.partition, config.clients.num_clients,
                              config.stream_seed("partition"), data.train_groups, data.train_coarse_labels)
    return partition_summary(data.train_labels, parts, data.num_classes)


def _run_rounds(federations, config, args, tracker, run_id, clock: Optional[StartupClock] = None) -> list[dict]:
    """Run every round (or the cached one-round analysis), print and log each, with the method's arrays on the rounds
    due (``tracking.arrays_every``, the last round); returns the rounds' metrics (without the arrays)."""
    from platform.stages.cache import open_cache
    from platform.runtime.trial import run_one_round, run_rounds
    from platform.results.tracking import log_arrays

    from algorithms import resolve_algorithm

    headline = resolve_algorithm(config.algorithm.name).headline_metrics()
    rounds = ([run_one_round(federations, open_cache(args.cache_dir, not args.no_cache))]
              if config.mode == "one_round" else run_rounds(federations, config.rounds))
    profile = []
    for metrics in rounds:
        arrays = metrics.pop(RESULT_ARRAYS, None)
        paths = metrics.pop(RESULT_CLIENT_PATHS, None)  # not a metric: --profile prints it
        for line in filter(None, (metrics.pop(RESULT_CACHE_CORRUPT, None) or "").split("\n")):  # the actors'
            print(f"warning: {line}", file=sys.stderr, flush=True)
        print(_format(metrics, headline), flush=True)
        started = time.perf_counter()
        if tracker:
            tracker.log_metrics(run_id, {k: v for k, v in metrics.items() if k != "round"}, step=metrics["round"])
            if arrays:
                log_arrays(tracker, run_id, arrays, metrics["round"])
        metrics["tracking_seconds"] = time.perf_counter() - started
        if clock is not None and not profile:
            clock.mark("round 1")
        if paths:
            metrics[RESULT_CLIENT_PATHS] = paths
        profile.append(metrics)
    if tracker and profile:
        last = profile[-1]
        tracker.log_metrics(run_id, {f"{METRIC_FINAL}{k}": v for k, v in last.items()
                                     if k not in ("round", RESULT_CLIENT_PATHS)},
                            step=last["round"])
    return profile


if __name__ == "__main__":
    run_command(main)
