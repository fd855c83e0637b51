"""Wall time of the SimCLR pre-training stage (platform.runtime.pretrain) on 1 vs 2 Ray Train workers, no stage cache.

    python -m benchmarks.pretrain [--workers 1,2] [--epochs N] [--repeats 1]

Each row pre-trains ``cnn`` on the embedded default (``digits32``, ``public: {source: train_split, split:
first_half}``: 719 public images, 3×32×32) with the config's other pre-training defaults (batch 512, so one
global step an epoch), in a fresh local Ray with 2 CPUs (as ``platform.run`` on this machine), through a stage
cache that is disabled (every call computes). ``wall s`` is the whole stage as the driver sees it (Ray Train's
worker start, process group set-up, the epochs, the per-epoch checkpoints); ``s/epoch`` the workers' own mean
epoch time: ``(wall - start) / (epochs - 1)`` with ``start`` the wall time of a 1-epoch run on the same worker count); ``loss`` the first and last epoch's NT-Xent loss.
Each worker count gets the local Ray's CPUs split between its workers (``cpus_per_worker`` = CPUs / workers).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from benchmarks._common import local_ray, machine_line, median, table


def _stage(workers: int, epochs: int, cpus: int) -> dict:
    from platform.stages.cache import StageCache
    from platform.config.experiment import build_experiment
    from platform.runtime.pretrain import pretrain_features
    from platform.runtime.federation import share_dataset

    config = build_experiment({"dataset": {"name": "digits32"}, "model": {"name": "cnn"},
                               "public": {"source": "train_split", "split": "first_half"},
                               "pretrain": {"method": "simclr", "epochs": epochs, "workers": workers,
                                            "cpus_per_worker": cpus / workers, "use_gpu": False}})
    shared = share_dataset(config)
    with tempfile.TemporaryDirectory(prefix="fedsweep-bench-pretrain-") as root:
        cache = StageCache(root, enabled=False)
        started = time.perf_counter()
        value, _ = pretrain_features(config, "cnn", shared.public_ref, shared.input_shape, shared.num_classes,
                                     cache, log=lambda *a, **k: None)
        wall = time.perf_counter() - started
    return {"wall": wall, "losses": value["record"]["losses"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pretrain", description=__doc__.split("\n")[0])
    parser.add_argument("--workers", default="1,2", help="comma-separated Ray Train worker counts")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default: pretrain.epochs' default)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per row (the median is shown)")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray (shared by the workers)")
    args = parser.parse_args(argv)
    from platform.cli import quiet_libraries

    quiet_libraries()  # as the command lines: Ray Train V1 (RAY_TRAIN_V2_ENABLED=0 unless set), quiet Tune
    from platform.config.public_data import PretrainConfig

    epochs = args.epochs or PretrainConfig().epochs
    workers = [int(w) for w in args.workers.split(",")]
    print(machine_line())
    print(f"SimCLR pre-training of cnn on digits32 (719 public images), {epochs} epochs, batch 512, "
          f"local Ray with {args.cpus} CPUs, Ray Train {'V2' if os.environ['RAY_TRAIN_V2_ENABLED'] == '1' else 'V1'}")
    rows = []
    with local_ray(num_cpus=args.cpus):
        _stage(1, 1, args.cpus)  # warm the machine's file caches (imports, torch kernels) once
        for w in workers:
            start = median([_stage(w, 1, args.cpus)["wall"] for _ in range(args.repeats)])
            runs = [_stage(w, epochs, args.cpus) for _ in range(args.repeats)]
            wall = median([r["wall"] for r in runs])
            losses = runs[0]["losses"]
            rows.append([w, wall, start, (wall - start) / max(epochs - 1, 1), f"{losses[0]:.3f} -> {losses[-1]:.3f}"])
    base = rows[0][1]
    print(table(["workers", "wall s", "1-epoch run s", "s/epoch", "loss first -> last", "speed-up"],
                [r + [f"{base / r[1]:.2f}x"] for r in rows], ["", ".1f", ".1f", ".2f", "", ""]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
