"""Trials per minute of one-round sweeps with the stage cache and without it (``--no-cache``).

    python -m benchmarks.sweep_cache [--spaces fedkp_bandwidth[,feded_beta]] [--num-samples 10]

Each row is one real ``python -m platform.sweep <space> --num-samples N --quiet`` in a subprocess, with its
own temporary MLflow store, Tune storage and results home:

- ``no cache``: ``--no-cache``, every trial trains its clients;
- ``cache, cold``: a fresh ``--cache-dir``: the first trial trains and stores the client stage, the others
  re-aggregate it (what a new sweep costs);
- ``cache, warm``: the same ``--cache-dir`` again: every trial re-aggregates (what a follow-up sweep costs).

``trials/min`` counts the trials over the sweep's own span (first MLflow child run start to last child run
end: Tune, actors and MLflow included, the interpreter's and Ray's start excluded); ``wall s`` is the whole
command. ``speed-up`` is trials/min over the no-cache row of the same space. Search spaces default to
``fedkp_bandwidth``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks._common import ForeignLoad, machine_line, table, wait_for_quiet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_spaces() -> list[str]:
    # not feded_beta: it is a grid of 7 β per α cell over 10 seeds, so --num-samples N means N repetitions of
    # that grid in each of its 4 cells (docs/benchmarks/sweep_cache.md says which space its figures measured)
    return ["fedkp_bandwidth"]


def _child_runs(uri: str, experiment: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    runs = client.search_runs([exp.experiment_id], max_results=10000)
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def run_sweep(space: str, num_samples: int, cache_dir: str, use_cache: bool, timeout: float,
              overrides: tuple = ()) -> dict:
    with tempfile.TemporaryDirectory(prefix="fedsweep-bench-") as home:
        uri = f"sqlite:///{home}/mlflow.db"
        cmd = [sys.executable, "-m", "platform.sweep", space, "--num-samples", str(num_samples), "--quiet",
               "--cache-dir", cache_dir, "--tracking-uri", uri, "--storage-path", os.path.join(home, "ray_results")]
        if not use_cache:
            cmd.append("--no-cache")
        for override in overrides:
            cmd += ["--set", override]
        env = {**os.environ, "FEDSWEEP_HOME": home}
        env.pop("RAY_ADDRESS", None)
        with ForeignLoad() as load:
            started = time.perf_counter()
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
            wall = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        runs = _child_runs(uri, space)
    ok = [r for r in runs if r.data.tags.get("status") == "completed"]
    span = (max(r.info.end_time for r in runs) - min(r.info.start_time for r in runs)) / 1000.0 if runs else 0.0
    durations = sorted((r.info.end_time - r.info.start_time) / 1000.0 for r in runs)
    cached = [r.data.metrics.get("final_client_stage_cached", r.data.metrics.get("client_stage_cached"))
              for r in runs]
    return {"space": space, "trials": len(runs), "completed": len(ok), "wall_s": wall, "span_s": span,
            "trials_per_min": 60.0 * len(runs) / span if span > 0 else float("nan"),
            "median_trial_s": durations[len(durations) // 2] if durations else float("nan"),
            "cached_trials": sum(1 for c in cached if c is not None and c >= 1.0), "other_load": load.cores}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_cache", description=__doc__.split("\n")[0])
    parser.add_argument("--spaces", default=",".join(default_spaces()), help="comma-separated search spaces")
    parser.add_argument("--num-samples", type=int, default=10, help="trials per sweep (default 10)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per sweep before giving up")
    parser.add_argument("--quiet-wait", type=float, default=60.0,
                        help="seconds to wait for other processes to go quiet before each sweep (default 60)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per sweep")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="base-config override passed to every sweep (repeatable)")
    parser.add_argument("--variants", default="no cache,cache, cold,cache, warm".replace(",cache", ";cache"),
                        help="which rows to run, ';'-separated (default: no cache;cache, cold;cache, warm)")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(";") if v.strip()]
    print(machine_line(), flush=True)
    rows, results = [], []
    for space in [s.strip() for s in args.spaces.split(",") if s.strip()]:
        with tempfile.TemporaryDirectory(prefix="fedsweep-cache-") as cache_dir:
            per_space = []
            for label, use_cache in (("no cache", False), ("cache, cold", True), ("cache, warm", True)):
                if label not in variants:
                    continue
                print(f"... {space}: {label}", file=sys.stderr, flush=True)
                wait_for_quiet(timeout=args.quiet_wait)
                r = run_sweep(space, args.num_samples, cache_dir, use_cache, args.timeout, tuple(args.overrides))
                r["variant"] = label
                per_space.append(r)
                if args.json:
                    print(json.dumps(r), flush=True)
        base = per_space[0]["trials_per_min"]  # speed-up: over the first row run
        for r in per_space:
            r["speedup"] = r["trials_per_min"] / base if base else float("nan")
            rows.append([space, r["variant"], r["trials"], r["cached_trials"], f"{r['median_trial_s']:.2f}",
                         f"{r['span_s']:.1f}", f"{r['trials_per_min']:.1f}", f"{r['speedup']:.1f}x",
                         f"{r['wall_s']:.1f}", f"{r['other_load']:.2f}"])
        results += per_space
    print(table(["space", "variant", "trials", "cached", "median trial s", "span s", "trials/min", "speed-up",
                 "wall s", "other load"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
