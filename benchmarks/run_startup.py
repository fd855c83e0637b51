"""A single run's whole-process wall time against a plain PyTorch script doing the same rounds.

    python -m benchmarks.run_startup [--repeats 3] [--rounds 20] [--quiet-wait 60] [--baseline DIR]

The workload, as a new user runs it: FedAvg on the embedded digits, IID over 10 clients, all 10 per round, batch 16,
lr 0.05, the ``cnn``, 20 rounds. Two commands alternate ``--repeats`` times:

(a) ``python benchmarks/plain_fedavg.py``: the plain script (torch and scikit-learn only, one process);
(b) ``python -m platform.run <that config> --profile`` with MLflow on, each time in a fresh results home (a new
    SQLite store, as on a first run): Ray starts, client actors and a parameter server, one MLflow run.

With ``--baseline DIR`` (a checkout of an earlier commit, e.g. a git worktree), a third command alternates with
them: (b) run from DIR's code (DIR first on ``PYTHONPATH``, which Ray's workers inherit; the ``algorithms`` package
still comes from the installed checkout), so a change is measured against its baseline under the same load.

It prints the median whole-process wall time of each, their ratio (goal: ≤ 1.5), and the median of each start-up
step that ``--profile`` prints (process start to the end of round 1). ``other load`` is the average number of cores
other processes used (the machine is shared): figures taken with other load well above 0 are not comparable.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import yaml

from benchmarks._common import ForeignLoad, median, table, wait_for_quiet

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = {"dataset": {"name": "digits"}, "partition": {"kind": "iid"}, "model": {"name": "cnn"},
          "algorithm": {"name": "fedavg"},
          "clients": {"num_clients": 10, "clients_per_round": 10, "local_epochs": 1, "batch_size": 16, "lr": 0.05},
          "rounds": 20, "seed": 0}


def timed(command: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds, done.stdout


def startup_steps(output: str) -> dict[str, float]:
    """The ``start-up (s)`` table that ``platform.run --profile`` prints."""
    block = output.split("start-up (s)\n", 1)[1].split("time per round", 1)[0]
    return {m.group(1).strip(): float(m.group(2)) for m in re.finditer(r"^\s*(.+?)\s+([\d.]+)$", block, re.M)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_startup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quiet-wait", type=float, default=60.0,
                        help="wait up to this many seconds for the machine to be quiet before measuring")
    parser.add_argument("--baseline", help="also time platform.run from this checkout (PYTHONPATH), alternating")
    args = parser.parse_args(argv)
    wait_for_quiet(timeout=args.quiet_wait)
    plain, platform_walls, steps, base_walls, base_steps = [], [], [], [], []
    with tempfile.TemporaryDirectory() as directory, ForeignLoad() as load:
        path = os.path.join(directory, "startup_w1.yaml")
        with open(path, "w") as fh:
            yaml.safe_dump({**CONFIG, "rounds": args.rounds}, fh)
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
        for i in range(args.repeats):
            seconds, _ = timed([sys.executable, "benchmarks/plain_fedavg.py", "--rounds", str(args.rounds)], env)
            plain.append(seconds)
            home = os.path.join(directory, f"home{i}")
            seconds, out = timed([sys.executable, "-m", "platform.run", path, "--profile"],
                                 {**env, "FEDSWEEP_HOME": home})
            platform_walls.append(seconds)
            steps.append(startup_steps(out))
            if args.baseline:
                base_env = {**env, "FEDSWEEP_HOME": home + "-baseline",
                            "PYTHONPATH": os.pathsep.join(p for p in (os.path.abspath(args.baseline),
                                                                      env.get("PYTHONPATH")) if p)}
                base_seconds, out = timed([sys.executable, "-m", "platform.run", path, "--profile"], base_env)
                base_walls.append(base_seconds)
                base_steps.append(startup_steps(out))
            print(f"  repeat {i + 1}/{args.repeats}: plain {plain[-1]:.1f} s, platform.run {seconds:.1f} s"
                  + (f", baseline {base_walls[-1]:.1f} s" if base_walls else ""), file=sys.stderr, flush=True)
    print(table(["command", "median wall s", "runs"],
                [["plain PyTorch script", f"{median(plain):.2f}", ", ".join(f"{s:.1f}" for s in plain)],
                 ["python -m platform.run --profile", f"{median(platform_walls):.2f}",
                  ", ".join(f"{s:.1f}" for s in platform_walls)]]
                + ([["baseline platform.run --profile", f"{median(base_walls):.2f}",
                     ", ".join(f"{s:.1f}" for s in base_walls)]] if base_walls else [])))
    print(f"\nratio platform / plain: {median(platform_walls) / median(plain):.2f} (goal ≤ 1.5)"
          + (f"; baseline / plain: {median(base_walls) / median(plain):.2f}" if base_walls else "")
          + f"; other load {load}\n")
    names = list(dict.fromkeys([*(base_steps[0] if base_steps else []), *steps[0]]))
    print(table(["start-up step (platform.run)", "median s"] + (["baseline"] if base_steps else []),
                [[name, f"{median([s.get(name, 0.0) for s in steps]):.2f}"]
                 + ([f"{median([s.get(name, 0.0) for s in base_steps]):.2f}"] if base_steps else [])
                 for name in names]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
