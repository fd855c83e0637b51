"""``--estimate``: a trial's first rounds measured where the sweep will run, and the whole sweep predicted from them.

Where it measures: on the cluster the command joins (``ray job submit -- python -m platform.sweep ... --estimate``
measures on the cluster the sweep will run on; ``--address``; else a new local Ray), with the trial's own resources,
its GPU share included, on stand-in data where the files are absent (:mod:`platform.data.stand_in`).

What it measures, for a sweep: a real Tune experiment of the sweep's own trial function on the first cell's
setting, cut to :data:`MEASURED_ROUNDS` rounds (one aggregation in one-round mode): a first wave of trials as many
at once as the sweep will run (at most :data:`MAX_PROBE_WAVE`), each starting its process and actors, then a second
wave that reuses them as Tune's ``reuse_actors`` does. Every trial runs all the sweep's seeds. From its timeline:
a fresh trial's first round (process, actors, warm-up, the round), a reused trial's first round, the steady round,
and the experiment's own start and end (``cell_seconds``). Beside it, one trial's MLflow records in a temporary
SQLite store (what the driver writes per trial) and the command's own start (interpreter, imports, Ray). A single
run (``platform.run`` without a space) is measured as it runs: its federation on this driver, no Tune. Where Ray is
not installed at all (and no ``--address`` is given), the trial's rounds are timed in this process through the
classes its actors run (:func:`measure_in_process`), on this machine's device, a GPU included: enough to time a
trial's rounds, not Tune's or MLflow's costs.

What it prints: where it ran (host and device), each measured round and what it stands for (warm-up or steady),
peak memory, the model's parameter count and the data's sizes, then the prediction (:func:`predict`) on the device
it measured on, never another: a trial that asks for a GPU measured on CPUs (the cluster has none) gets the CPUs'
wall time and no GPU time or GPU-hours, with the command to run on a GPU node.

It writes nothing: its stage cache and Tune storage are a temporary directory removed at the end (``--cache-dir``
keeps the cache). ``benchmarks/estimate_accuracy.py`` compares predictions with the sweeps they predict.
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import statistics
import tempfile
import time
from typing import Any, Optional

from platform.preflight.data_plan import data_plan
from platform.preflight.plan import missing_data

MEASURED_ROUNDS = 2  # the second shows the steady cost (the first pays the start-up and first-use imports)
MAX_PROBE_WAVE = 4  # at most this many trials at once in the measured Tune experiment


def _cluster_gpus() -> int:
    """GPUs of the connected Ray cluster (every node's, not only this process's)."""
    import ray

    return int(ray.cluster_resources().get("GPU", 0))


def measurement_changes(config, gpus_here: int, log=print) -> dict[str, Any]:
    """What ``--estimate`` changes in ``config`` to measure it (dotted keys): at most :data:`MEASURED_ROUNDS` rounds,
    stand-in data where the files are absent, CPUs where the trial asks for a GPU and the cluster has none
    (``gpus_here``), one pre-training epoch (scaled to all of them)."""
    changes: dict[str, Any] = {}
    if not getattr(config, "stand_in", False) and missing_data(config) is not None:
        changes["stand_in"] = True
        log(f"estimate: {config.dataset.name} files not found here: measuring on stand-in data of the same shapes")
    if config.resources.gpu > 0 and gpus_here == 0:
        changes["resources.gpu"] = 0.0
        log("estimate: the trial asks for a GPU and this cluster has none: measuring on CPUs, so the figures are "
            "the CPUs'; for GPU figures run the estimate on a GPU node")
    if config.mode != "one_round" and config.rounds > MEASURED_ROUNDS:
        changes["rounds"] = MEASURED_ROUNDS
    if config.pretrain.method != "none" and config.pretrain.epochs > 1:
        changes["pretrain.epochs"] = 1
    return changes


def measurement_config(config, changes: dict[str, Any]):
    """``config`` with :func:`measurement_changes` applied."""
    replace: dict[str, Any] = {}
    if "stand_in" in changes:
        replace["stand_in"] = True
    if "resources.gpu" in changes:
        replace["resources"] = dataclasses.replace(config.resources, gpu=changes["resources.gpu"])
    if "rounds" in changes:
        replace["rounds"] = changes["rounds"]
    if "pretrain.epochs" in changes:
        replace["pretrain"] = dataclasses.replace(config.pretrain, epochs=changes["pretrain.epochs"])
    return dataclasses.replace(config, **replace) if replace else config


def _parameters(config, shared) -> int:
    """The global model's parameter count."""
    from algorithms.models import build_model

    model = build_model(config.model.name, shared.input_shape, shared.num_classes)
    return int(sum(p.numel() for p in model.parameters()))


def _shared_data(config, cache):
    """The data a trial reads, put in the object store once (pre-trained where the config pre-trains), and the
    seconds one pre-training epoch took."""
    from platform.runtime.federation import share_dataset
    from platform.runtime.pretrain import prepare_pretrained

    shared = share_dataset(config, cache=cache)
    seconds = 0.0
    if config.pretrain.method != "none":
        started = time.perf_counter()
        shared = prepare_pretrained(shared, [config], cache, log=lambda *a, **k: None)
        seconds = time.perf_counter() - started
    return shared, seconds


def measure_run(config, cache) -> dict:
    """A single run (no Tune): ``config``'s federation (one seed) on this driver's Ray, with the trial's resources.
    Returns the seconds of each measured round (``round_seconds``; the first is the warm-up), of the actors' start
    (``setup_seconds``), where they ran (``host``, ``device``), their peak memory and the model's parameter count."""
    from platform.runtime.trial import run_one_round, run_rounds, start_federations, stop_federations

    shared, pretrain = _shared_data(config, cache)
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
    first = float(rounds[0]["seconds"])
    return {"round_seconds": [float(m["seconds"]) for m in rounds], "fresh_first_round_seconds": setup + first,
            "reused_first_round_seconds": setup + first, "pretrain_epoch_seconds": pretrain,
            "seeds_measured": 1, **_where(peaks), "parameters": _parameters(config, shared)}


def measure_in_process(config) -> dict:
    """Where Ray is not installed: ``config``'s rounds (one seed) in this process, through the classes a trial's
    actors run (:class:`~platform.runtime.actors.ParameterServer`, one
    :class:`~platform.runtime.actors.ClientPool` hosting every client), on this machine's device (a GPU where the
    trial asks for one and there is one). The round loop of ``mode: rounds``: broadcast, the sampled clients'
    training, aggregation and evaluation; a one-round config is timed the same way (its client stage, then one
    aggregation). No Tune, no MLflow: their costs are not in the figures."""
    import torch

    from platform.runtime.actors import ClientPool, ParameterServer
    from platform.runtime.local_data import client_splits_of, load_shared_data
    from platform.runtime.seeding import sample_clients

    if config.pretrain.method != "none":
        from platform.errors import UserError

        raise UserError("--estimate without Ray: a config that pre-trains (pretrain.method) needs Ray's workers; "
                        "install Ray, or estimate on a machine that has it")
    started = time.perf_counter()
    data = load_shared_data(config)
    train = data.train
    wants_gpu = config.resources.gpu > 0 and torch.cuda.is_available()
    threads = max(1, int(config.resources.cpu))
    server = ParameterServer(config, (data.test.x, data.test.y), train.input_shape, train.num_classes, threads,
                             wants_gpu, data.public_x, data.val)
    pool = ClientPool(config, (train.x, train.y), client_splits_of(config, train.y, train.groups, train.coarse_y),
                      train.input_shape, train.num_classes, num_threads=threads, wants_gpu=wants_gpu,
                      public_x=data.public_x)
    setup = time.perf_counter() - started
    clients = config.clients
    seconds = []
    for index in range(MEASURED_ROUNDS if config.mode == "one_round" else config.rounds):
        begun = time.perf_counter()
        sampled = [int(k) for k in sample_clients(clients.num_clients, clients.clients_per_round,
                                                  config.stream_seed("sampling"), index)]
        result = pool.train(server.broadcast(sampled), sampled, index, states=server.states_of(sampled))
        server.aggregate(result)
        if wants_gpu:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - begun)
    return {"round_seconds": seconds, "fresh_first_round_seconds": setup + seconds[0],
            "reused_first_round_seconds": seconds[-1], "seeds_measured": 1, "pretrain_epoch_seconds": 0.0,
            **_where([server.peak_memory(), pool.peak_memory()]), "parameters": _parameters(config, train),
            "in_process": True}


def _where(peaks: list[dict]) -> dict:
    gpu = [p["gpu_bytes"] for p in peaks if "gpu_bytes" in p]
    busiest = peaks[-1]  # a client pool: it trains
    return {"rss_bytes": max(p["rss_bytes"] for p in peaks), "gpu_bytes": max(gpu) if gpu else None,
            "host": busiest.get("host", "?"), "device": busiest.get("device", "?")}


def _probe_where(config) -> dict:
    """Where a trial of ``config``'s resources runs: a task with its client actors' resources reports its node's
    host name and device (a GPU where it has one)."""
    import ray

    from platform.runtime.placement import client_bundle

    bundle = client_bundle(config.resources)

    def where() -> dict:
        import torch

        from platform.runtime.actors import where_this_runs

        return where_this_runs(torch.cuda.is_available())

    task = ray.remote(where).options(num_cpus=bundle.get("CPU", 1), num_gpus=bundle.get("GPU", 0))
    return ray.get(task.remote())


def measure_sweep(config, space, changes: dict[str, Any], at_once: int, cache_root: str, log=print) -> dict:
    """The sweep's trials measured as the sweep runs them (module doc): a Tune experiment of ``2 x wave`` trials of
    the sweep's trial function on the first cell's setting with ``changes``, ``wave = min(at_once,
    MAX_PROBE_WAVE)`` at once, ``reuse_actors`` on. Returns the per-round seconds of a fresh and of a reused trial,
    the steady round, the experiment's own start and end, and where it ran."""
    from ray import tune

    from platform.config.experiment import apply_overrides
    from platform.runtime.trial import trial_trainable
    from platform.stages.cache import open_cache

    cell = space.cell_space(0) if space.scenarios else space
    base = apply_overrides(cell.base, changes)
    measured_config = measurement_config(config, changes)
    shared, pretrain = _shared_data(measured_config, open_cache(cache_root))
    wave = max(1, min(at_once, MAX_PROBE_WAVE))
    trainable = trial_trainable(base, space.seeds, shared, measured_config.resources, cache_root,
                                search_metrics=tuple(space.search.metrics))
    tuner = tune.Tuner(trainable, param_space={"params": {}},
                       tune_config=tune.TuneConfig(num_samples=2 * wave, max_concurrent_trials=wave,
                                                   reuse_actors=True),
                       run_config=tune.RunConfig(name="estimate", storage_path=os.path.join(cache_root, "tune"),
                                                 verbose=0))
    started = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - started
    histories = []
    for result in grid:
        if result.error is not None:
            raise RuntimeError(f"the measured trial failed: {result.error}")
        frame = result.metrics_dataframe
        histories.append([float(t) for t in frame["time_this_iter_s"]])
    # Tune numbers the trials in start order; a trial's first round includes its start (a fresh process and actors
    # in the first wave, the reset of a finished trial's in the second)
    fresh, reused = histories[:wave], histories[wave:]
    later = [t for h in fresh + reused for t in h[1:]]
    first_wave = max(sum(h) for h in fresh)
    second_wave = max(sum(h) for h in reused) if reused else 0.0
    return {"round_seconds": [statistics.mean(h[0] for h in fresh)] + ([statistics.median(later)] if later else []),
            "fresh_first_round_seconds": statistics.mean(h[0] for h in fresh),
            "reused_first_round_seconds": statistics.mean(h[0] for h in reused) if reused else
            statistics.mean(h[0] for h in fresh),
            "cell_seconds": max(wall - first_wave - second_wave, 0.0), "wave_measured": wave,
            "trials_measured": len(histories), "seeds_measured": len(space.seeds),
            "pretrain_epoch_seconds": pretrain, "rss_bytes": None, "gpu_bytes": None,
            **_probe_where(measured_config), "parameters": _parameters(measured_config, shared)}


def tracking_seconds(config, rounds: int) -> tuple[float, float]:
    """(seconds to create an MLflow SQLite store, seconds one trial's records take in it: a run, its parameters,
    ``rounds`` rounds of metrics), measured with MLflow in a temporary directory."""
    from platform.results.tracking import Tracker

    scratch = tempfile.mkdtemp(prefix="fedsweep-estimate-")
    try:
        started = time.perf_counter()
        tracker = Tracker(f"sqlite:///{os.path.join(scratch, 'mlflow.db')}", "estimate")
        parent = tracker.start_run("parent", {})
        created = time.perf_counter() - started
        flat = dict(config.flat())
        metrics = {f"metric_{i}": 0.5 for i in range(12)}
        timed = []
        for attempt in range(2):  # the first pays first use; the second is what each trial of a sweep pays
            begun = time.perf_counter()
            run = tracker.start_run(f"trial {attempt}", {"status": "running"}, parent_run_id=parent)
            tracker.log_params(run, flat)
            for step in range(1, rounds + 1):
                tracker.log_metrics(run, metrics, step=step)
            tracker.end_run(run)
            timed.append(time.perf_counter() - begun)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return created, timed[-1]


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


def _on_gpu(measured: dict) -> bool:
    return str(measured.get("device", "")).startswith("GPU")


def predict(measured: dict, config, space=None, gpus: int = 1, cpus: Optional[int] = None) -> dict:
    """The sweep's (or the single run's) predicted wall time from the measured trials, on the device they ran on:
    with ``gpus`` GPUs where it was a GPU (then also the GPU-hours), else on ``cpus`` CPUs (this machine's by
    default; ``gpu_hours`` None: CPU seconds are never passed off as GPU time).

    The model: the command's start (``startup_seconds``: interpreter, imports, Ray, the MLflow store) once; per
    scenario cell (a Tune experiment of its own) the experiment's own start and end (``cell_seconds``); its first
    wave of trials as measured fresh (the first round's seconds with the start, then steady rounds), every later
    trial as measured reused, waves one after another; the driver's MLflow records (``trial_overhead_seconds``) one
    trial after another. A trial runs all its seeds (measured so, or scaled from one seed for a single run).
    One-round mode: the fresh trials train the clients, the reused ones re-aggregate the cached clients."""
    steady = measured["round_seconds"][-1]
    seeds = len(space.seeds) if space is not None else 1
    scale = seeds / measured.get("seeds_measured", seeds)  # a single run measured on one seed
    one_round = config.mode == "one_round"
    rounds = 1 if one_round else config.rounds
    fresh = (measured["fresh_first_round_seconds"] + steady * (rounds - 1)) * scale
    reused = (measured["reused_first_round_seconds"] + steady * (rounds - 1)) * scale
    cells = space.trials_per_cell() if space is not None else [("", 1)]
    on_gpu = config.resources.gpu > 0 and _on_gpu(measured)
    at_once = side_by_side(config, space, on_gpu, gpus, cpus)
    pretrain = measured.get("pretrain_epoch_seconds", 0.0) * config.pretrain.epochs * seeds \
        if config.pretrain.method != "none" else 0.0  # once per (architecture, init seed), before the trials
    startup = measured.get("startup_seconds", 0.0)
    per_cell = measured.get("cell_seconds", 0.0)
    overhead = measured.get("trial_overhead_seconds", 0.0)

    def cell_wall(trials: int) -> float:
        waves = math.ceil(trials / at_once) - 1
        return per_cell + max(fresh + waves * reused, trials * overhead)

    wall = startup + pretrain + sum(cell_wall(t) for _, t in cells)
    trials = sum(t for _, t in cells)
    busy = sum(min(t, at_once) * fresh + max(t - at_once, 0) * reused for _, t in cells)
    return {"trial_seconds": reused, "first_trial_seconds": fresh, "pretrain_seconds": pretrain,
            "seconds_per_round": steady, "on_gpu": on_gpu, "trials": trials, "seeds": seeds, "rounds": rounds,
            "side_by_side": at_once, "wall_seconds": wall,
            "gpu_hours": busy * config.resources.gpu / 3600.0 if on_gpu else None}


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _bytes(n: Optional[int]) -> str:
    return "n/a" if n is None else f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _measured_rounds(measured: dict, config) -> list[str]:
    """One line per kind of measured round: its seconds and what it stands for."""
    seeds = measured.get("seeds_measured", 1)
    of = f" ({seeds} seed(s))" if seeds > 1 else ""
    if config.mode == "one_round":
        lines = [f"  a fresh trial's aggregation{of}: {measured['fresh_first_round_seconds']:.2f} s (its process and "
                 f"actors start, it trains the clients and caches them: a cell's first trials)",
                 f"  a reused trial's aggregation{of}: {measured['reused_first_round_seconds']:.2f} s (re-aggregates "
                 f"the cached clients: every later trial)"]
        return lines
    lines = [f"  round 1 of a fresh trial{of}: {measured['fresh_first_round_seconds']:.2f} s (warm-up: its process "
             f"and actors start, first-use imports)"]
    if measured.get("trials_measured"):
        lines.append(f"  round 1 of a reused trial{of}: {measured['reused_first_round_seconds']:.2f} s (a finished "
                     f"trial's process and actors reset)")
    if len(measured["round_seconds"]) > 1:
        lines.append(f"  a later round{of}: {measured['round_seconds'][-1]:.2f} s (steady: every later round)")
    return lines


def estimate_text(measured: dict, prediction: dict, config, space=None, gpus: int = 1, command: str = "",
                  data_lines: tuple = ()) -> str:
    """What ``--estimate`` prints: what it measured (where, which rounds and what each stands for, the model's size,
    the data's sizes: ``data_lines``) and the prediction on the device it measured on."""
    per_gpu = config.resources.gpu
    how = (f"a Tune experiment of {measured['trials_measured']} trial(s), {measured['wave_measured']} at once"
           if measured.get("trials_measured") else "in this process, without Ray" if measured.get("in_process")
           else "one run")
    lines = [f"measured on {measured.get('host', '?')}, {measured.get('device', '?')}: {config.algorithm.name}, "
             f"model {config.model.name} ({measured.get('parameters', 0):,} parameters), {how}",
             *([] if measured.get("in_process") else [
                 f"  start-up: the command {measured.get('startup_seconds', 0.0):.1f} s (interpreter, imports, Ray, the "
                 f"MLflow store)" + (f"; a scenario cell's Tune experiment {measured['cell_seconds']:.1f} s; a "
                                     f"trial's MLflow records {measured['trial_overhead_seconds']:.2f} s"
                                     if "cell_seconds" in measured else "")]),
             *_measured_rounds(measured, config)]
    if measured.get("rss_bytes") is not None:
        lines.append(f"peak memory: {_bytes(measured['rss_bytes'])} resident (largest actor)"
                     + (f", {_bytes(measured['gpu_bytes'])} GPU" if measured["gpu_bytes"] is not None else ""))
    lines += list(data_lines)
    if prediction.get("pretrain_seconds"):
        lines.append(f"pre-training ({config.pretrain.method}): {measured['pretrain_epoch_seconds']:.1f} s for one "
                     f"epoch here, so ≈ {_duration(prediction['pretrain_seconds'])} for {config.pretrain.epochs} "
                     f"epochs x {prediction['seeds']} seed(s), once before the trials (then cached)")
    what = f"sweep {space.name}: {prediction['trials']} trial(s)" if space is not None else "this run: 1 trial"
    lines.append(f"{what} x {prediction['seeds']} seed(s) x {prediction['rounds']} round(s); a cell's first trials "
                 f"≈ {_duration(prediction['first_trial_seconds'])} each, later ones ≈ "
                 f"{_duration(prediction['trial_seconds'])}")
    if prediction["on_gpu"]:
        lines.append(f"predicted on {gpus} GPU(s) like this one ({prediction['side_by_side']} trial(s) at once, "
                     f"{per_gpu:g} GPU each): wall time ≈ {_duration(prediction['wall_seconds'])} "
                     f"({prediction['wall_seconds']:.0f} s), {prediction['gpu_hours']:.2f} GPU-hours")
    else:
        lines.append(f"predicted on {os.cpu_count()} CPU(s) like these ({prediction['side_by_side']} trial(s) at "
                     f"once): wall time ≈ {_duration(prediction['wall_seconds'])} ({prediction['wall_seconds']:.0f} s)")
        if per_gpu > 0:
            lines.append(f"GPU time: not predicted (measured on CPUs; a CPU's seconds say nothing of a GPU's). Run the "
                         f"estimate where the sweep will run, e.g. ray job submit --address <cluster> -- {command}")
    if space is not None and space.search.scheduler.kind == "asha":
        lines.append("ASHA stops trials early: the sweep takes at most this")
    return "\n".join(lines)


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


def measure_and_predict(config, space=None, gpus: Optional[int] = None, address: Optional[str] = None,
                        dashboard: bool = False, cache_dir: Optional[str] = None, log=print) -> tuple:
    """Measure (module doc) and predict: (the config measured, the measurements, the prediction, the GPUs predicted
    for). The stage cache: ``cache_dir`` where given, else a temporary directory removed afterwards, so an estimate
    leaves nothing behind (its stand-in data never reaches a real cache)."""
    from platform.cli import connect_ray, in_ray_job, quiet_libraries
    from platform.stages.cache import open_cache

    if address is None and not _ray_installed():
        return _in_process(config, space, gpus, log)
    quiet_libraries()
    connect_ray(address, dashboard)
    startup = _seconds_since_start()  # what the sweep's command also pays before its first trial: imports, Ray
    cluster_gpus = _cluster_gpus()
    changes = measurement_changes(config, cluster_gpus, log)
    measured_config = measurement_config(config, changes)
    gpus = gpus if gpus is not None else max(cluster_gpus, 1)
    scratch = tempfile.mkdtemp(prefix="fedsweep-estimate-")
    if in_ray_job():  # Ray may delete a job's working directory while it runs (Tune then cannot resolve a path)
        os.chdir(tempfile.gettempdir())
    try:
        if space is None:
            count = MEASURED_ROUNDS if measured_config.mode == "one_round" else measured_config.rounds
            log(f"estimate: measuring {count} round(s) of {measured_config.algorithm.name} on "
                f"{measured_config.dataset.name}{' (stand-in)' if measured_config.stand_in else ''}, seed "
                f"{measured_config.seed} ...")
            measured = measure_run(measured_config, open_cache(cache_dir or scratch))
        else:
            at_once = side_by_side(config, space, config.resources.gpu > 0 and "resources.gpu" not in changes, gpus)
            wave = max(1, min(at_once, MAX_PROBE_WAVE))
            what = "aggregation" if measured_config.mode == "one_round" else f"{measured_config.rounds} round(s)"
            log(f"estimate: measuring {2 * wave} trial(s) of {space.name} ({what} each, all {len(space.seeds)} "
                f"seed(s), {wave} at once) on {measured_config.dataset.name}"
                f"{' (stand-in)' if measured_config.stand_in else ''} ...")
            measured = measure_sweep(config, space, changes, at_once, cache_dir or scratch, log)
            created, per_trial = tracking_seconds(config, 1 if config.mode == "one_round" else config.rounds)
            startup += created
            measured["trial_overhead_seconds"] = per_trial
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    measured["startup_seconds"] = startup
    return measured_config, measured, predict(measured, config, space, gpus=gpus), gpus


def _ray_installed() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _in_process(config, space, gpus: Optional[int], log) -> tuple:
    """:func:`measure_and_predict` where Ray is not installed: :func:`measure_in_process` on this machine's device."""
    import torch

    here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    changes = measurement_changes(config, here, log)
    measured_config = measurement_config(config, changes)
    log(f"estimate: Ray is not installed here: timing {measured_config.rounds if config.mode != 'one_round' else 2} "
        f"round(s) of one seed in this process, through the trial's actor classes; Tune's and MLflow's costs are "
        f"not in the figures")
    measured = measure_in_process(measured_config)
    gpus = gpus if gpus is not None else max(here, 1)
    return measured_config, measured, predict(measured, config, space, gpus=gpus), gpus


def estimate(config, space=None, gpus: Optional[int] = None, address: Optional[str] = None,
             dashboard: bool = False, cache_dir: Optional[str] = None, command: str = "", log=print) -> str:
    """``--estimate``'s text: :func:`measure_and_predict`, then :func:`estimate_text` (``command``: the line to run
    on a GPU node where a GPU trial was measured on CPUs)."""
    measured_config, measured, prediction, gpus = measure_and_predict(config, space, gpus, address, dashboard,
                                                                      cache_dir, log)
    return estimate_text(measured, prediction, config, space, gpus, command, tuple(data_plan(measured_config).lines()))


__all__ = ["MEASURED_ROUNDS", "estimate", "estimate_text", "measure_and_predict", "predict", "side_by_side"]
