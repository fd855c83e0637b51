"""Seconds from a Tune trial starting to its first round beginning, actor creation included.

    python -m benchmarks.trial_startup [--cases fedkp_one_round,smoke_rounds] [--trials 8] [--cpus 2]

Each case runs real Tune trials of a search space as ``platform.sweep.command`` does (its trainable
:func:`platform.runtime.trial.sweep_trial`, its placement groups, searcher and MLflow callback, a temporary
SQLite store; ``--no-mlflow`` leaves the callback out), the trainable wrapped so that it stamps wall-clock
times inside the trial process:

- ``trial start``: Tune's ``on_trial_start`` callback in the driver (the trial's actor is up), before the
  MLflow callback's (which opens the child run and logs its params and partition summary);
- ``enter``: the trainable function begins (after Tune handed it its parameters);
- ``federations``: :func:`start_federations` runs (parameter servers and, unless lazy, client actors created
  and ready);
- ``first round``: the first round (``start_round`` / the cached one-round stage) begins;
- ``round``: how long that first round took; ``trial``: trial start to Tune's ``on_trial_complete``.

``start-up`` = first round − trial start, the median over the trials; ``share`` = start-up / trial.

Cases:

- ``fedkp_one_round``: ``search_spaces/fedkp_bandwidth.yaml`` as it is (one-round mode, 3 seeds, 2 concurrent
  trials, 1 CPU each) with a warm stage cache (one trial is run first to fill it and not counted): every trial only
  re-aggregates cached client models, so start-up is what it costs besides aggregation.
- ``smoke_rounds``: ``search_spaces/smoke.yaml`` (rounds mode, one seed) cut to 3 rounds (its ASHA grace period): start-up includes
  creating the client actors.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from benchmarks._common import ForeignLoad, local_ray, machine_line, median, table, wait_for_quiet

CASES = {
    "fedkp_one_round": {"space": "fedkp_bandwidth", "overrides": {}, "warm_cache": True},
    "smoke_rounds": {"space": "smoke", "overrides": {"rounds": 3}, "warm_cache": False},
}


def timed_sweep_trial(trial_config: dict, **kwargs) -> None:
    """``sweep_trial`` with wall-clock marks added to every metrics report (runs in the trial's process)."""
    marks = {"enter": time.time()}
    from ray import tune as tune_module

    from platform.runtime import trial as trial_module
    from platform.runtime.federation import Federation

    originals = (trial_module.start_federations, Federation.start_round, Federation.run_one_round_cached,
                 tune_module.report)

    def start_federations(*args, **kw):
        marks["federations"] = time.time()
        federations = originals[0](*args, **kw)
        marks["federations_ready"] = time.time()
        return federations

    def start_round(self, *args, **kw):
        marks.setdefault("first_round", time.time())
        return originals[1](self, *args, **kw)

    def run_one_round_cached(self, cache, stage):
        marks.setdefault("first_round", time.time())
        return originals[2](self, cache, stage)

    def report(metrics, *args, **kw):
        marks.setdefault("first_report", time.time())
        return originals[3]({**metrics, **{f"mark_{k}": v for k, v in marks.items()}}, *args, **kw)

    trial_module.start_federations, Federation.start_round = start_federations, start_round
    Federation.run_one_round_cached, tune_module.report = run_one_round_cached, report
    try:
        trial_module.sweep_trial(trial_config, **kwargs)
    finally:
        (trial_module.start_federations, Federation.start_round, Federation.run_one_round_cached,
         tune_module.report) = originals


def _tune_run(space, num_samples: int, cache_root: str, storage: str, name: str,
              tracking_uri: str | None) -> tuple[dict, list]:
    """Run ``num_samples`` trials of ``space`` as ``platform.sweep.command`` does, with its MLflow callback unless
    ``tracking_uri`` is None; returns (driver marks, per-trial first results)."""
    from ray import tune

    from platform.runtime.federation import share_dataset
    from platform.runtime.placement import trial_bundles
    from platform.config.run_schema import round_metrics
    from platform.sweep.study import make_scheduler, make_searcher
    from platform.config.search_space import grid_points

    base_config = space.trial_config({})
    driver_marks: dict = {}

    class Marks(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            driver_marks.setdefault(trial.trial_id, {})["trial_start"] = time.time()

        def on_trial_complete(self, iteration, trials, trial, **info):
            driver_marks.setdefault(trial.trial_id, {})["trial_complete"] = time.time()

    shared = share_dataset(base_config)
    callbacks = [Marks()]  # first: its on_trial_start mark precedes the MLflow callback's work
    if tracking_uri is not None:
        from platform.sweep.callback import MlflowSweepCallback
        from platform.results.tracking import Tracker

        tracker = Tracker(tracking_uri, space.name)
        parent = tracker.start_run(name=name, tags={"fedsweep.search_space": space.name})
        callbacks.append(MlflowSweepCallback(tracker, parent, space, base_config.rounds, num_samples, quiet=True,
                                             shared=shared))
    trainable = tune.with_resources(
        tune.with_parameters(timed_sweep_trial, base=space.base, seeds=space.seeds, shared=shared,
                             checkpoint_every=0, cache_root=cache_root, use_cache=True,
                             search_metrics=tuple(space.search.metrics)),
        tune.PlacementGroupFactory(trial_bundles(base_config.resources)))
    search = space.search
    param_space = {"params": tune.grid_search(grid_points(space))} if search.searcher == "grid" else None
    tuner = tune.Tuner(
        trainable, param_space=param_space,
        tune_config=tune.TuneConfig(search_alg=make_searcher(space),
                                    scheduler=make_scheduler(space, base_config.rounds),
                                    num_samples=num_samples, metric=search.metric, mode=search.mode,
                                    max_concurrent_trials=search.max_concurrent_trials,
                                    reuse_actors=True),
        run_config=tune.RunConfig(name=name, storage_path=storage, callbacks=callbacks, verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=0)))
    grid = tuner.fit()
    results = []
    for r in grid:
        if r.error is not None:
            raise RuntimeError(f"trial failed: {r.error}")
        # the first report holds the marks of the first round (later reports repeat them)
        first = r.metrics_dataframe.iloc[0].to_dict() if r.metrics_dataframe is not None else r.metrics
        results.append({**round_metrics(first), "trial_id": r.metrics.get("trial_id")})
    return driver_marks, results


def measure(case: str, trials: int, cpus: int, quiet_wait: float, mlflow: bool = True,
            as_platform: bool = True) -> dict:
    from platform.config.experiment import parse_override  # noqa: F401
    from platform.config.search_space import load_search_space

    spec = CASES[case]
    with tempfile.TemporaryDirectory(prefix="fedsweep-startup-") as tmp, local_ray(cpus, as_platform=as_platform):
        os.environ["FEDSWEEP_HOME"] = tmp
        cache_root = os.path.join(tmp, "cache")
        storage = os.path.join(tmp, "ray_results")
        uri = f"sqlite:///{tmp}/mlflow.db" if mlflow else None
        if spec["warm_cache"]:  # fill the stage cache with one trial (same upstream config for every trial)
            _tune_run(load_search_space(spec["space"], spec["overrides"], 1), 1, cache_root, storage, "warm", uri)
        space = load_search_space(spec["space"], spec["overrides"], trials)
        wait_for_quiet(timeout=quiet_wait)
        with ForeignLoad() as load:
            driver_marks, results = _tune_run(space, trials, cache_root, storage, "timed", uri)
    rows = []
    for r in results:
        d = driver_marks.get(r["trial_id"], {})
        if "trial_start" not in d:
            continue
        start = d["trial_start"]
        rows.append({
            "to_enter": r["mark_enter"] - start,
            "before_federations": r["mark_federations"] - r["mark_enter"],
            "federations": r["mark_federations_ready"] - r["mark_federations"],
            "startup": r["mark_first_round"] - start,
            "round": r["mark_first_report"] - r["mark_first_round"],
            "trial": d.get("trial_complete", float("nan")) - start,
            "cached": r.get("client_stage_cached", float("nan")),
        })
    out = {"case": case, "space": spec["space"], "trials": len(rows), "seeds": len(space.seeds),
           "concurrent": space.search.max_concurrent_trials, "other_load": load.cores}
    for key in ("to_enter", "before_federations", "federations", "startup", "round", "trial"):
        out[key] = median([row[key] for row in rows])
    out["startup_max"] = max(row["startup"] for row in rows) if rows else float("nan")
    out["share"] = out["startup"] / out["trial"] if out["trial"] else float("nan")
    out["cached_fraction"] = (sum(row["cached"] for row in rows) / len(rows)) if rows else float("nan")
    return out


def render(results: list[dict]) -> str:
    headers = ["case", "trials", "seeds", "→enter", "config", "start_federations", "start-up (median)", "max",
               "first round", "trial", "start-up share", "cached", "other load"]
    rows = [[r["case"], r["trials"], r["seeds"], f"{r['to_enter']:.2f}", f"{r['before_federations']:.2f}",
             f"{r['federations']:.2f}", f"{r['startup']:.2f}", f"{r['startup_max']:.2f}", f"{r['round']:.2f}",
             f"{r['trial']:.2f}", f"{r['share']:.0%}", f"{r['cached_fraction']:.2f}", f"{r['other_load']:.2f}"]
            for r in results]
    return table(headers, rows) + "\n(seconds; medians over the trials)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trial_startup", description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated: {', '.join(CASES)}")
    parser.add_argument("--trials", type=int, default=8, help="timed trials per case (default 8)")
    parser.add_argument("--cpus", type=int, default=os.cpu_count(), help="Ray CPUs (default: all)")
    parser.add_argument("--quiet-wait", type=float, default=60.0,
                        help="seconds to wait for other processes to go quiet before timing (default 60)")
    parser.add_argument("--no-mlflow", action="store_true",
                        help="leave out platform.sweep.command's MLflow callback (it logs each trial's params and partition "
                             "summary in the driver when the trial starts)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per case")
    parser.add_argument("--plain-ray", action="store_true",
                        help="start Ray with a plain ray.init (Ray's default local instance) instead of as "
                             "platform.sweep.command starts "
                             "its local instance (workers preloading the actors' module, a lean head)")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; allowed: {', '.join(CASES)}")
    from platform.cli import quiet_libraries

    quiet_libraries()
    print(machine_line(), flush=True)
    results = []
    for case in cases:
        print(f"... {case}", file=sys.stderr, flush=True)
        results.append(measure(case, args.trials, args.cpus, args.quiet_wait, not args.no_mlflow,
                               as_platform=not args.plain_ray))
        if args.json:
            print(json.dumps(results[-1]), flush=True)
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
