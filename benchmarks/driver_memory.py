"""The sweep driver's memory over many short trials.

Runs ``python -m platform.sweep`` as a user would on a one-round random search of ``--trials`` trials (digits,
6 clients, 2 trials at once), samples the driver process's resident memory (VmRSS) every second, and prints it
against the number of trials that had ended, with the growth per trial fitted over the second half of the sweep
(after start-up and the first trials' imports).

    python -m benchmarks.driver_memory --trials 150
    python -m benchmarks.driver_memory --trials 1000 --trials-per-experiment 100
    python -m benchmarks.driver_memory --trials 500 --bare-tune
    python -m benchmarks.driver_memory --trials 1000 --bare-tune --trials-per-experiment 200

``--trials-per-experiment``: the sweep's ``search.trials_per_experiment`` (default: the space's, 500): the study runs
as consecutive Tune experiments of at most that many trials, and the driver keeps one experiment's trials.

``--bare-tune``: the comparison without fedsweep: a plain Ray Tune driver (random search over one float, the same
trial count, 2 trials at once, ``reuse_actors=True``, a trivial trainable reporting one result), measured the same way,
so what grows in both is Tune's.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import yaml

SPACE = {
    "description": "driver-memory soak: one round per trial",
    "base": {"rounds": 1, "clients": {"num_clients": 6, "clients_per_round": 6, "batch_size": 32},
             "model": {"name": "mlp"}},
    "parameters": {"clients.lr": {"loguniform": [0.001, 0.3]}},
    "search": {"searcher": "random", "num_samples": 150, "seeds": [0], "metric": "val_accuracy", "mode": "max",
               "max_concurrent_trials": 2},
    "resources": {"cpu": 1},
}


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


def bare_tune(trials: int, storage: str, per_experiment: int) -> int:
    """The ``--bare-tune`` driver (a child process): plain Tune, a trivial trainable, one line per ended trial; the
    trials run as consecutive experiments of at most ``per_experiment``."""
    import ray
    from ray import tune

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)

    def trainable(config):
        tune.report({"val_accuracy": config["lr"], "round": 1})

    class Ended(tune.Callback):
        def on_trial_complete(self, iteration, trials, trial, **info):
            print(f"[{trial.trial_id}] completed", flush=True)

    for index, start in enumerate(range(0, trials, per_experiment)):
        tuner = tune.Tuner(trainable, param_space={"lr": tune.loguniform(0.001, 0.3)},
                           tune_config=tune.TuneConfig(num_samples=min(per_experiment, trials - start),
                                                       max_concurrent_trials=2, reuse_actors=True,
                                                       metric="val_accuracy", mode="max"),
                           run_config=tune.RunConfig(name=f"bare-{index + 1:03d}", storage_path=storage,
                                                     callbacks=[Ended()], verbose=0))
        tuner.fit()
        del tuner
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.driver_memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=150)
    parser.add_argument("--trials-per-experiment", type=int, default=None,
                        help="the sweep's search.trials_per_experiment (default: the search space's default, 500)")
    parser.add_argument("--bare-tune", action="store_true", help="plain Ray Tune instead of platform.sweep.command")
    parser.add_argument("--child-storage", help=argparse.SUPPRESS)  # the --bare-tune child process
    args = parser.parse_args(argv)
    if args.child_storage:
        return bare_tune(args.trials, args.child_storage, args.trials_per_experiment or args.trials)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "soak.yaml")
        SPACE["search"]["num_samples"] = args.trials
        if args.trials_per_experiment:
            SPACE["search"]["trials_per_experiment"] = args.trials_per_experiment
        with open(path, "w") as fh:
            yaml.safe_dump(SPACE, fh)
        command = ([sys.executable, "-m", "benchmarks.driver_memory", "--trials", str(args.trials), "--child-storage",
                    f"{directory}/tune", "--trials-per-experiment", str(args.trials_per_experiment or args.trials)]
                   if args.bare_tune else
                   [sys.executable, "-m", "platform.sweep", path, "--tracking-uri", f"sqlite:///{directory}/mlflow.db",
                    "--storage-path", f"{directory}/tune", "--cache-dir", f"{directory}/cache"])
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ended, samples, start = [0], [], time.time()

        def sample():
            while proc.poll() is None:
                try:
                    samples.append((time.time() - start, ended[0], rss_mib(proc.pid)))
                except (OSError, StopIteration):
                    break
                time.sleep(1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        for line in proc.stdout:
            if re.search(r"\] (completed|early-stopped|failed|diverged)", line):
                ended[0] += 1
        proc.wait()
        sampler.join(timeout=5)
    per = f", at most {args.trials_per_experiment} per Tune experiment" if args.trials_per_experiment else ""
    print(f"{'bare Ray Tune' if args.bare_tune else 'platform.sweep'}: {args.trials} trials{per}, exit "
          f"{proc.returncode}, {time.time() - start:.0f} s")
    marks = sorted({int(args.trials * f) for f in (0.1, 0.25, 0.5, 0.6, 0.75, 0.9, 1.0)})
    print("trials ended | driver RSS (MiB)")
    for mark in marks:
        at = [rss for _, n, rss in samples if n >= mark]
        if at:
            print(f"{mark:12d} | {at[0]:.0f}")
    half = [(n, rss) for _, n, rss in samples if n >= args.trials // 2]
    if len(half) > 2 and half[-1][0] > half[0][0]:
        import numpy as np

        slope = np.polyfit([n for n, _ in half], [rss for _, rss in half], 1)[0]
        print(f"growth over the second half: {slope * 1024:.0f} KiB per trial")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
