"""What a command would run, before it runs: ``--dry-run`` (the resolved settings, no Ray) and ``--estimate`` (one
measured round, then the whole sweep's predicted time and GPU-hours).

``--dry-run`` loads and validates the space (preset and ``--set`` applied), prints the resolved base config, the
cells with their trials, the seeds, rounds and resources per trial, and whether the data files are where the config
says; nothing starts, so it takes seconds and works where the files are absent.

``--estimate`` runs one trial's first rounds (two, so that the second shows the steady cost without start-up) on one
seed, on the cluster the command joins (``ray job submit -- ... --estimate`` measures on a node of the cluster the
sweep will run on, with the trial's own resources, its GPU share included), with stand-in data where the files are
absent (:mod:`platform.data.stand_in`). It prints where it ran (host and device), each measured round's seconds and
what it stands for (warm-up or steady), peak memory (resident memory of the busiest actor; GPU memory where a GPU is
used), the model's parameter count and the data's sizes. The prediction scales that to the sweep: every trial runs all
its rounds on every seed (seeds share a trial's resources, so they are counted one after another), scenario cells run
one after another, trials of a cell run side by side as the GPUs (or CPUs) and ``search.max_concurrent_trials``
allow. ASHA stops trials early, so its sweeps take at most the predicted time.

The prediction is for the device it measured on, never another: a trial that asks for a GPU but was measured on CPUs
(the cluster has none) gets the CPUs' wall time and no GPU time or GPU-hours, with the command to run on a GPU node.
The estimate writes nothing: its stage cache is a temporary directory removed at the end (``--cache-dir`` keeps one).
``benchmarks/estimate_accuracy.py`` compares predictions with the sweeps they predict.
"""
from __future__ import annotations

import math
import os
import time
from typing import Optional

from platform.config.schema import to_dict
from platform.errors import ConfigError
from platform.preflight.citations import check_effective_citations
from platform.preflight.data_plan import check_cells, data_plan


def missing_data(config) -> Optional[str]:
    """Why the config's data files (private and public) are not where it says, in a few words; None when they are."""
    from platform.data.datasets import check_dataset_available
    from platform.data.public import check_public_available

    try:
        check_dataset_available(config.dataset)
        check_public_available(config.public, config.dataset)
    except ConfigError as err:
        return str(err).split("; ")[0]
    return None


def data_status(config) -> str:
    """One line: where the trial's data come from, and whether its files are there."""
    name = config.dataset.name
    if getattr(config, "stand_in", False):
        return f"data: stand-in for {name} (generated, the real one's shapes, classes and sizes)"
    reason = missing_data(config)
    if reason is not None:
        return f"data: {name}: NOT FOUND ({reason}); add --stand-in to run on generated data of its shapes"
    where = f" under {config.dataset.root}" if config.dataset.root else " (embedded)"
    return f"data: {name}{where}: found"


CORE_SECTIONS = ("dataset", "partition", "model", "algorithm", "clients", "server", "resources")


def _config_lines(config) -> list[str]:
    """The resolved config as YAML: every section the experiment is about, and the others only where they differ
    from their defaults (named in one line otherwise)."""
    import yaml

    from platform.config.experiment import build_experiment

    data = to_dict(config)
    try:
        default = to_dict(build_experiment({"algorithm": {"name": config.algorithm.name}}))
    except ConfigError:  # a method that refuses the bare defaults (MNFL, pFedDF: no public data): plain defaults
        from platform.config.experiment import ExperimentConfig

        default = to_dict(ExperimentConfig())
    shown = {k: v for k, v in data.items()
             if k in CORE_SECTIONS or not isinstance(v, dict) or v != default.get(k)}
    lines = ["  " + line for line in yaml.safe_dump(shown, sort_keys=False, default_flow_style=None,
                                                     width=110).rstrip().splitlines()]
    hidden = [k for k in data if k not in shown]
    if hidden:
        lines.append(f"  # at their defaults: {', '.join(hidden)}")
    return lines


def _resources(config, search=None) -> str:
    r = config.resources
    text = f"cpu {r.cpu:g}, gpu {r.gpu:g}" + (f", {r.actors} client actor(s)" if r.actors else "")
    if search is not None:
        most = search.max_concurrent_trials
        text += f"; at most {most} trial(s) at once" if most else "; trials at once: as many as the cluster fits"
    return text


def _heading(kind: str, name: str, preset) -> str:
    which = f" --preset {preset.name} ({preset.title})" if preset is not None else " (embedded default)"
    return f"{kind} {name}{which}: dry run, nothing started"


def sweep_plan(space, base_config) -> str:
    """The ``platform.sweep --dry-run`` text of a loaded space."""
    from platform.config.trials import grid_subset_note

    lines = [_heading("sweep", space.name, space.preset)]
    lines += [f"note: {note}" for note in space.notes]
    if space.preset is not None and space.preset.document:
        lines.append(f"settings from: spec/{space.preset.document} (docs/paper_settings.md cites each value)")
    lines.append(data_status(base_config))
    plan = data_plan(base_config)  # raises the ConfigError the run would raise as it builds its data
    lines += plan.lines()
    check_effective_citations(space, plan)  # the sizes too: each client's, the validation split's, the public pool's
    check_cells(space)
    lines.append("resolved base config" + (" (scenario keys vary by cell, below):" if space.scenarios else ":"))
    lines += _config_lines(base_config)
    cells = space.trials_per_cell()
    searcher = space.search.searcher
    if space.parameters:
        lines.append("swept: " + "; ".join(f"{k} {d.kind}{list(d.args)}" + (f" when {d.when}" if d.when else "")
                                           for k, d in space.parameters.items()))
    if space.scenarios:
        lines.append(f"scenario cells: {len(cells)} ({' x '.join(space.scenarios)}), one study each, in this order:")
        rounds_key = "rounds" in space.scenarios
        subsets = [grid_subset_note(space.cell_space(i)) for i in range(len(cells))]
        for i, (label, trials) in enumerate(cells):
            extra = f", {space.cell_space(i).trial_config({}).rounds} rounds" if rounds_key else ""
            lines.append(f"  cell {i + 1:>2}  {label}: {trials} trial(s) ({searcher}){extra}")
            if subsets[i] and len(set(subsets)) > 1:
                lines.append(f"           {subsets[i]}")
        if subsets[0] and len(set(subsets)) == 1:
            lines.append(f"  every cell: {subsets[0]}")
    else:
        lines.append(f"trials: {cells[0][1]} ({searcher})")
        if grid_subset_note(space):
            lines.append(f"  {grid_subset_note(space)}")
    if searcher == "grid" and space.search.num_samples > 1:
        lines.append(f"each grid point runs {space.search.num_samples} times (search.num_samples / --repeats)")
    total = sum(t for _, t in cells)
    seeds = space.seeds
    lines.append(f"seeds: {seeds} (replicates inside every trial)")
    lines.append(f"rounds per trial: {base_config.rounds} (mode {base_config.mode})")
    scheduler = space.search.scheduler
    if scheduler.kind == "asha":
        lines.append(f"early stopping: ASHA, grace period {scheduler.grace_period} round(s)")
    lines.append(f"resources per trial: {_resources(base_config, space.search)}")
    lines.append(f"total: {total} trial(s) x {len(seeds)} seed(s) = {total * len(seeds)} run(s), "
                 f"selecting on {', '.join(m for m in space.search.metrics)}")
    return "\n".join(lines)


def run_plan(config, name: str, preset=None) -> str:
    """The ``platform.run --dry-run`` text of one experiment config."""
    lines = [_heading("run", name, preset), data_status(config), *data_plan(config).lines(),
             "resolved config:"]
    lines += _config_lines(config)
    lines.append(f"seed: {config.seed}; rounds: {config.rounds} (mode {config.mode}); resources: {_resources(config)}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------------
# --estimate
# ------------------------------------------------------------------------------------------------------------------

MEASURED_ROUNDS = 2  # the second shows the steady cost (the first pays actor start-up and first-use imports)


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _cluster_gpus() -> int:
    """GPUs of the connected Ray cluster (every node's, not only this process's)."""
    import ray

    return int(ray.cluster_resources().get("GPU", 0))


def measurement_config(config, gpus_here: int, log=print):
    """The config ``--estimate`` measures: ``config`` on its own seed, at most :data:`MEASURED_ROUNDS` rounds, on
    stand-in data where the files are absent, on CPUs where the trial asks for a GPU and the cluster has none
    (``gpus_here``)."""
    import dataclasses

    changes: dict = {}
    if not getattr(config, "stand_in", False) and missing_data(config) is not None:
        changes["stand_in"] = True
        log(f"estimate: {config.dataset.name} files not found here: measuring on stand-in data of the same shapes")
    if config.resources.gpu > 0 and gpus_here == 0:
        changes["resources"] = dataclasses.replace(config.resources, gpu=0.0)
        log("estimate: the trial asks for a GPU and this cluster has none: measuring on CPUs, so the figures are "
            "the CPUs'; for GPU figures run the estimate on a GPU node")
    if config.mode != "one_round":
        changes["rounds"] = min(config.rounds, MEASURED_ROUNDS)
    if config.pretrain.method != "none" and config.pretrain.epochs > 1:  # one epoch measured, scaled to all of them
        changes["pretrain"] = dataclasses.replace(config.pretrain, epochs=1)
    return dataclasses.replace(config, **changes) if changes else config


def _parameters(config, shared) -> int:
    """The global model's parameter count."""
    from algorithms.models import build_model

    model = build_model(config.model.name, shared.input_shape, shared.num_classes)
    return int(sum(p.numel() for p in model.parameters()))


PROBE_TRIALS = 6  # the no-op trials the sweep-overhead probe runs


def _probe_trial(config) -> None:
    """A Tune trial that only does what every trial's process does first: import the trial's modules."""
    import time as clock

    from ray import tune

    import platform.runtime.trial  # noqa: F401 - torch, the algorithms, the runtime

    tune.report({"started": clock.time()})


def sweep_overhead(config, side_by_side: int, rounds: int) -> dict:
    """The sweep's own costs beyond a trial's training, measured on the connected cluster with the real components:
    a Tune experiment of :data:`PROBE_TRIALS` no-op trials with the trial's resources, ``side_by_side`` at once and
    the sweep's actor reuse (``cell_seconds``: from the experiment's start to its first trial's, that trial's process
    start and imports included, plus its end after the last; ``tune_trial_seconds``: the driver's time between one
    trial's start and the next's), and one trial's MLflow bookkeeping in a temporary SQLite store (a run, its
    parameters, ``rounds`` rounds of metrics; ``tracking_trial_seconds``)."""
    import shutil
    import tempfile

    from ray import tune

    from platform.results.tracking import Tracker

    scratch = tempfile.mkdtemp(prefix="fedsweep-estimate-")
    try:
        trainable = tune.with_resources(_probe_trial, {"cpu": config.resources.cpu, "gpu": config.resources.gpu})
        tuner = tune.Tuner(trainable, param_space={"probe": tune.grid_search(list(range(PROBE_TRIALS)))},
                           tune_config=tune.TuneConfig(max_concurrent_trials=max(1, side_by_side), reuse_actors=True),
                           run_config=tune.RunConfig(name="probe", storage_path=os.path.join(scratch, "tune"),
                                                     verbose=0))
        started = time.time()
        results = tuner.fit()
        ended = time.time()
        starts = sorted(r.metrics["started"] for r in results if r.metrics and "started" in r.metrics)
        tracker = Tracker(f"sqlite:///{os.path.join(scratch, 'mlflow.db')}", "estimate-probe")
        parent = tracker.start_run("probe", {})
        flat = {k: v for k, v in config.flat().items()}
        metrics = {f"metric_{i}": 0.5 for i in range(12)}
        timed = []
        for attempt in range(2):  # the first pays the store's first use; the second is what a sweep's trial pays
            begun = time.perf_counter()
            run = tracker.start_run(f"trial {attempt}", {"status": "running"}, parent_run_id=parent)
            tracker.log_params(run, flat)
            for step in range(1, rounds + 1):
                tracker.log_metrics(run, metrics, step=step)
            tracker.end_run(run)
            timed.append(time.perf_counter() - begun)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    return {"cell_seconds": (starts[0] - started) + (ended - starts[-1]) if starts else ended - started,
            "tune_trial_seconds": sum(gaps) / len(gaps) if gaps else 0.0, "tracking_trial_seconds": timed[-1]}


def measure(config, cache) -> dict:
    """Run ``config`` (one seed) on Ray actors with the trial's own resources; returns the seconds of each measured
    round (``round_seconds``: the first is the warm-up, the last the steady cost), the start of the trial's actors
    (``setup_seconds``), where they ran (``host``, ``device``), their peak memory, and the model's parameter count.
    Ray must be connected."""
    from platform.runtime.federation import share_dataset
    from platform.runtime.pretrain import prepare_pretrained
    from platform.runtime.trial import run_one_round, run_rounds, start_federations, stop_federations

    shared = share_dataset(config, cache=cache)
    pretrain_seconds = 0.0
    if config.pretrain.method != "none":
        started = time.perf_counter()
        shared = prepare_pretrained(shared, [config], cache, log=lambda *a, **k: None)
        pretrain_seconds = time.perf_counter() - started
    started = time.perf_counter()
    federations = start_federations(config, [config.seed], shared, lazy_clients=config.mode == "one_round",
                                    cache=cache)
    setup = time.perf_counter() - started
    try:
        if config.mode == "one_round":  # the second finds the clients' stage in the cache, as later trials do
            rounds = [run_one_round(federations, cache) for _ in range(MEASURED_ROUNDS)]
        else:
            rounds = list(run_rounds(federations, config.rounds))
        peaks = federations[0].peak_memory()
    finally:
        stop_federations(federations)
    gpu = [p["gpu_bytes"] for p in peaks if "gpu_bytes" in p]
    busiest = peaks[-1]  # a client pool: it trains
    return {"round_seconds": [float(m["seconds"]) for m in rounds], "setup_seconds": setup,
            "pretrain_epoch_seconds": pretrain_seconds,
            "rss_bytes": max(p["rss_bytes"] for p in peaks), "gpu_bytes": max(gpu) if gpu else None,
            "host": busiest.get("host", "?"), "device": busiest.get("device", "?"),
            "parameters": _parameters(config, shared)}


def side_by_side(config, space=None, on_gpu: bool = False, gpus: int = 1, cpus: Optional[int] = None) -> int:
    """Trials at once: as the GPUs allow where the trial runs on a GPU, else the CPUs; at most
    ``search.max_concurrent_trials``."""
    if on_gpu:
        at_once = max(1, math.floor(gpus / config.resources.gpu + 1e-9))
    else:
        at_once = max(1, math.floor((cpus or os.cpu_count() or 1) / config.resources.cpu + 1e-9))
    if space is not None and space.search.max_concurrent_trials:
        at_once = min(at_once, space.search.max_concurrent_trials)
    return at_once


def predict(measured: dict, config, space=None, gpus: int = 1, cpus: Optional[int] = None) -> dict:
    """The sweep's (or the single run's) predicted wall time from one measured trial, on the device it was measured
    on: with ``gpus`` GPUs where it was measured on a GPU (then also the GPU-hours), else on ``cpus`` CPUs (this
    machine's by default; ``gpu_hours`` None: CPU seconds are never passed off as GPU time).

    The model, from a sweep's own timeline: the command's start (``startup_seconds``: interpreter, imports, Ray)
    once; per scenario cell (a Tune experiment of its own) the experiment's start and end, its first trial's process
    included (``cell_seconds``, :func:`sweep_overhead`); the cell's first wave of trials starts the trials' actors
    (``setup_seconds``) and pays the warm-up (the first measured round's excess over the steady one, per seed);
    every later trial reuses a finished trial's process and actors (Tune's ``reuse_actors``), so it costs its rounds
    at the steady rate, seeds one after another, plus the driver's bookkeeping (``trial_overhead_seconds``: Tune's
    and MLflow's), which runs one trial after another on the driver. One-round mode: a cell's first trials train
    the clients (the first measured aggregation), later ones re-aggregate the cached clients."""
    rounds_measured = measured["round_seconds"]
    steady = rounds_measured[-1]
    seeds = len(space.seeds) if space is not None else 1
    one_round = config.mode == "one_round"
    rounds = 1 if one_round else config.rounds
    trial_seconds = steady * rounds * seeds  # a trial in a reused process: its rounds
    if one_round:
        first_seconds = measured["setup_seconds"] + rounds_measured[0] * seeds  # trains (and caches) the clients
    else:
        first_seconds = measured["setup_seconds"] + max(rounds_measured[0] - steady, 0.0) * seeds + trial_seconds
    cells = space.trials_per_cell() if space is not None else [("", 1)]
    per_trial_gpu = config.resources.gpu
    on_gpu = per_trial_gpu > 0 and measured.get("gpu_bytes") is not None
    at_once = side_by_side(config, space, on_gpu, gpus, cpus)
    # pre-training (pretrain.method): once per (architecture, init seed) before the trials, on the driver's cluster
    pretrain = measured.get("pretrain_epoch_seconds", 0.0) * config.pretrain.epochs * seeds \
        if config.pretrain.method != "none" else 0.0
    startup = measured.get("startup_seconds", 0.0)
    per_cell = measured.get("cell_seconds", 0.0)
    overhead = measured.get("trial_overhead_seconds", 0.0)

    def cell_wall(trials: int) -> float:
        later = trials - min(trials, at_once)
        waves = math.ceil(trials / at_once) - 1
        return per_cell + first_seconds + overhead + max(waves * (trial_seconds + overhead), later * overhead)

    wall = startup + pretrain + sum(cell_wall(t) for _, t in cells)
    trials = sum(t for _, t in cells)
    busy = sum(min(t, at_once) * first_seconds + max(t - at_once, 0) * trial_seconds for _, t in cells)
    return {"seconds_per_round": steady, "trial_seconds": trial_seconds, "first_trial_seconds": first_seconds,
            "pretrain_seconds": pretrain, "startup_seconds": startup, "on_gpu": on_gpu,
            "trials": trials, "seeds": seeds, "rounds": rounds, "side_by_side": at_once, "wall_seconds": wall,
            "gpu_hours": busy * per_trial_gpu / 3600.0 if on_gpu else None}


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _bytes(n: Optional[int]) -> str:
    return "n/a" if n is None else f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _measured_rounds(measured: dict, config) -> list[str]:
    """One line per measured round: its seconds and what it stands for."""
    seconds = measured["round_seconds"]
    if config.mode == "one_round":
        what = ["trains the clients and caches them: a cell's first trial", "re-aggregates the cached clients: every "
                "later trial (the steady cost)"]
    else:
        what = ["warm-up: the actors' first training step, first-use imports", "steady: the cost of every later "
                                                                             "round"]
    lines = []
    for i, s in enumerate(seconds):
        label = what[0] if i == 0 else what[-1]
        if len(seconds) == 1:
            label = "the only round: warm-up and steady cost alike"
        lines.append(f"  round {i + 1}: {s:.2f} s ({label})")
    return lines


def estimate_text(measured: dict, prediction: dict, config, space=None, gpus: int = 1, command: str = "",
                  data_lines: tuple = ()) -> str:
    """What ``--estimate`` prints: what it measured (where, which rounds and what each stands for, the model's size,
    the data's sizes: ``data_lines``) and the prediction on the device it measured on."""
    per_gpu = config.resources.gpu
    lines = [f"measured on {measured.get('host', '?')}, {measured.get('device', '?')}: {config.algorithm.name}, "
             f"model {config.model.name} ({measured.get('parameters', 0):,} parameters), "
             f"{len(measured['round_seconds'])} round(s) on seed {config.seed}",
             f"  start-up: the command {measured.get('startup_seconds', 0.0):.1f} s (interpreter, imports, Ray), "
             f"the trial's actors {measured['setup_seconds']:.1f} s"
             + (f"; per scenario cell {measured['cell_seconds']:.1f} s (a Tune experiment, its first trial's process)"
                f", per trial {measured['trial_overhead_seconds']:.2f} s (Tune's and MLflow's bookkeeping)"
                if "cell_seconds" in measured else ""), *_measured_rounds(measured, config),
             f"peak memory: {_bytes(measured['rss_bytes'])} resident (largest actor)"
             + (f", {_bytes(measured['gpu_bytes'])} GPU" if measured["gpu_bytes"] is not None else ""),
             *data_lines]
    if prediction.get("pretrain_seconds"):
        lines.append(f"pre-training ({config.pretrain.method}): {measured['pretrain_epoch_seconds']:.1f} s for one "
                     f"epoch here, so ≈ {_duration(prediction['pretrain_seconds'])} for {config.pretrain.epochs} "
                     f"epochs x {prediction['seeds']} seed(s), once before the trials (then cached)")
    what = (f"sweep {space.name}: {prediction['trials']} trial(s)" if space is not None else "this run: 1 trial")
    first = prediction["first_trial_seconds"]
    each = (f"one trial ≈ {_duration(prediction['trial_seconds'])}" if first == prediction["trial_seconds"] else
            f"a cell's first trial ≈ {_duration(first)} (trains the clients), later ones ≈ "
            f"{_duration(prediction['trial_seconds'])} (the clients' stage cached)")
    lines.append(f"{what} x {prediction['seeds']} seed(s) x {prediction['rounds']} round(s); {each}")
    if prediction["on_gpu"]:
        lines.append(f"predicted on {gpus} GPU(s) like this one ({prediction['side_by_side']} trial(s) at once, "
                     f"{per_gpu:g} GPU each): wall time ≈ {_duration(prediction['wall_seconds'])} "
                     f"({prediction['wall_seconds']:.0f} s), "
                     f"{prediction['gpu_hours']:.2f} GPU-hours")
    else:
        lines.append(f"predicted on {os.cpu_count()} CPU(s) like these ({prediction['side_by_side']} trial(s) at "
                     f"once): wall time ≈ {_duration(prediction['wall_seconds'])} ({prediction['wall_seconds']:.0f} s)")
        if per_gpu > 0:
            lines.append(f"GPU time: not predicted (measured on CPUs; a CPU's seconds say nothing of a GPU's). Run the "
                         f"estimate where the sweep will run, e.g. ray job submit --address <cluster> -- {command}")
    if space is not None and space.search.scheduler.kind == "asha":
        lines.append("ASHA stops trials early: the sweep takes at most this")
    return "\n".join(lines)


def measure_and_predict(config, space=None, gpus: Optional[int] = None, address: Optional[str] = None,
                        dashboard: bool = False, cache_dir: Optional[str] = None, log=print) -> tuple:
    """Measure ``config``'s first rounds on the cluster the command joins (``address``; else a local one) and predict
    the run or sweep (module docstring): (the config measured, the measurements, the prediction, the GPUs predicted
    for). The stage cache: ``cache_dir`` where given, else a temporary directory removed afterwards, so an estimate
    leaves nothing behind (its stand-in data never reaches a real cache)."""
    import shutil
    import tempfile

    from platform.cli import connect_ray
    from platform.stages.cache import open_cache

    connect_ray(address, dashboard)
    startup = _seconds_since_start()  # what the sweep's command also pays before its first trial: imports, Ray
    measured_config = measurement_config(config, _cluster_gpus(), log)
    count = MEASURED_ROUNDS if measured_config.mode == "one_round" else measured_config.rounds
    what = "aggregation(s)" if measured_config.mode == "one_round" else "round(s)"
    log(f"estimate: measuring {count} {what} of {measured_config.algorithm.name} on {measured_config.dataset.name}"
        f"{' (stand-in)' if measured_config.stand_in else ''}, seed {measured_config.seed} ...")
    scratch = None if cache_dir else tempfile.mkdtemp(prefix="fedsweep-estimate-")
    try:
        measured = measure(measured_config, open_cache(cache_dir or scratch))
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    measured["startup_seconds"] = startup
    gpus = gpus if gpus is not None else max(_cluster_gpus(), 1)
    if space is not None:  # a sweep: what Tune and MLflow add, measured with the trial's resources
        at_once = side_by_side(config, space, measured.get("gpu_bytes") is not None and config.resources.gpu > 0,
                               gpus)
        log(f"estimate: measuring the sweep's own costs ({PROBE_TRIALS} no-op Tune trials, one trial's MLflow "
            f"records) ...")
        overhead = sweep_overhead(measured_config, min(at_once, PROBE_TRIALS),
                                  1 if config.mode == "one_round" else config.rounds)
        measured["cell_seconds"] = overhead["cell_seconds"]
        measured["trial_overhead_seconds"] = overhead["tune_trial_seconds"] + overhead["tracking_trial_seconds"]
    return measured_config, measured, predict(measured, config, space, gpus=gpus), gpus


def _seconds_since_start() -> float:
    """Seconds since this process started (its interpreter, imports and Ray's start, so far), from Linux's
    /proc; 0 where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            started_ticks = float(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return max(uptime - started_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0



def estimate(config, space=None, gpus: Optional[int] = None, address: Optional[str] = None,
             dashboard: bool = False, cache_dir: Optional[str] = None, command: str = "", log=print) -> str:
    """``--estimate``'s text: :func:`measure_and_predict`, then :func:`estimate_text` (``command``: the line to run
    on a GPU node where a GPU trial was measured on CPUs)."""
    measured_config, measured, prediction, gpus = measure_and_predict(config, space, gpus, address, dashboard,
                                                                      cache_dir, log)
    return estimate_text(measured, prediction, config, space, gpus, command, tuple(data_plan(measured_config).lines()))
