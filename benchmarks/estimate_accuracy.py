"""How close ``--estimate`` comes: for each sweep, the prediction, then the sweep itself, on this machine.

    python -m benchmarks.estimate_accuracy [--sweeps fedkp_bandwidth,smoke,mnfl_rho_short] [--json]

For each sweep (below) it runs, one after the other:

1. ``python -m platform.sweep SPACE [ARGS] --estimate --address local``: the estimate as a user runs it, in a fresh
   interpreter with a fresh local Ray; the predicted wall time is read from its ``estimate: predicted ... seconds``
   line (``--estimate`` prints the exact seconds beside the rounded figure).
2. ``python -m platform.sweep SPACE [ARGS] --address local``: the sweep, timed from the command's start to its exit
   (every fixed cost included: the interpreter, Ray's start, MLflow, Tune), with its results home, stage cache and
   Ray's temp dir in a fresh temporary directory (a cold cache, as a first sweep has).

It reports predicted and actual wall time, their ratio (actual / predicted; 1.0 is exact) and the other load on
the machine during each (``other load``: cores other processes used, benchmarks._common.ForeignLoad). Goal: within
±25 % on a quiet machine.

Sweeps:

- ``fedkp_bandwidth``: the space's default (one-round mode: 2 cells x 20 TPE trials, 3 seeds, cached clients).
- ``smoke``: the smoke space's default (FedAvg against FedProx, a few rounds).
- ``mnfl_rho_short``: mnfl_rho (30 rounds, 8 grid values) shortened to a few minutes: ``--num-samples 2 --set
  rounds=6``: a multi-round space with heterogeneous client models and distillation every round.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks._common import ForeignLoad, machine_line, table, wait_for_quiet

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEPS = {
    "fedkp_bandwidth": ["fedkp_bandwidth"],
    "smoke": ["smoke"],
    "mnfl_rho_short": ["mnfl_rho", "--num-samples", "2", "--set", "rounds=6"],
}
PREDICTED = re.compile(r"wall time ≈ [^()]*\((\d+(?:\.\d+)?) s\)")


def _run(args: list[str], home: str, timeout: float) -> tuple[float, float, str]:
    """(wall seconds, other load, output) of ``python -m platform.sweep ARGS --address local`` with its own results
    home and Ray temp dir under ``home``."""
    os.makedirs(home, exist_ok=True)
    ray_tmp = tempfile.mkdtemp(prefix="fea-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = dict(os.environ, FEDSWEEP_HOME=home, RAY_TMPDIR=ray_tmp, RAY_ADDRESS="", RAY_USAGE_STATS_ENABLED="0",
               MLFLOW_TRACKING_URI="", FEDSWEEP_CACHE="")
    started = time.perf_counter()
    try:
        with ForeignLoad() as load:
            done = subprocess.run([sys.executable, "-m", "platform.sweep", *args, "--address", "local"], cwd=home,
                                  env=env, capture_output=True, text=True, timeout=timeout)
        wall = time.perf_counter() - started
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"platform.sweep {' '.join(args)} exited {done.returncode}:\n{done.stdout[-2000:]}\n"
                           f"{done.stderr[-2000:]}")
    return wall, load.cores, done.stdout + done.stderr


def measure(name: str, timeout: float) -> dict:
    args = SWEEPS[name]
    with tempfile.TemporaryDirectory(prefix="fedsweep-estimate-accuracy-") as home:
        wait_for_quiet(timeout=60)
        estimate_wall, estimate_load, text = _run([*args, "--estimate"], os.path.join(home, "estimate"), timeout)
        match = PREDICTED.search(text)
        if match is None:
            raise RuntimeError(f"no predicted wall time in the estimate's output:\n{text[-3000:]}")
        predicted = float(match.group(1))
        wait_for_quiet(timeout=60)
        actual, load, _ = _run(args, os.path.join(home, "sweep"), timeout)
    return {"sweep": name, "command": "python -m platform.sweep " + " ".join(args), "predicted_s": predicted,
            "actual_s": actual, "ratio": actual / predicted, "estimate_s": estimate_wall,
            "estimate_other_load": estimate_load, "other_load": load}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.estimate_accuracy", description=__doc__.split("\n")[0])
    parser.add_argument("--sweeps", default=",".join(SWEEPS), help=f"comma-separated, of {', '.join(SWEEPS)}")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per command (default 1800)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    names = [n for n in args.sweeps.split(",") if n]
    unknown = [n for n in names if n not in SWEEPS]
    if unknown:
        parser.error(f"--sweeps: unknown sweep {unknown[0]!r}; allowed: {', '.join(SWEEPS)}")
    rows = []
    for name in names:
        print(f"{name}: estimating, then running ...", file=sys.stderr, flush=True)
        rows.append(measure(name, args.timeout))
        row = rows[-1]
        print(f"  predicted {row['predicted_s']:.0f} s, actual {row['actual_s']:.0f} s, ratio {row['ratio']:.2f}",
              file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(machine_line())
    print(table(["sweep", "predicted s", "actual s", "actual / predicted", "estimate took s", "other load"],
                [[r["sweep"], f"{r['predicted_s']:.0f}", f"{r['actual_s']:.0f}", f"{r['ratio']:.2f}",
                  f"{r['estimate_s']:.0f}", f"{r['other_load']:.2f}"] for r in rows]))
    for r in rows:
        print(f"  {r['sweep']}: {r['command']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
