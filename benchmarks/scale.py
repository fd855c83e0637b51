"""Seconds per round and memory with 1k, 10k and 100k virtual clients (100 sampled per round).

    python -m benchmarks.scale [--clients 1000,10000,100000] [--per-round 100] [--samples 25] [--rounds 5]

Data: the Synthetic(α, β) dataset (``dataset.name: synthetic``, ``synthetic_clients`` = the total, natural
partition: one virtual client per generating client), ``synthetic_samples`` samples each (default 25: 20 train,
5 test), the ``mlp`` model, FedAvg, batch 10, 1 epoch, ``resources.cpu`` = all cores.

The arrays are made with the product's generator (:func:`platform.data.generate_synthetic`) and its fixed
per-client 80/20 split, computed here in O(N) (the loader's split scans every sample once per client, O(K·N):
minutes at 100k clients; ``load s`` shows the product loader's own time where ``--time-loader`` asks for it).
At the smallest size the benchmark checks that its arrays equal ``load_dataset``'s. The arrays go to the
runtime as ``SharedData``, exactly what ``share_dataset`` would build.

The server evaluates on a fixed, seeded subsample of ``--test-samples`` test samples (default 5,000) at
every size: the full test set grows with the clients (5 samples each, 500,000 at 100k clients), and its
evaluation would measure the test set, not the platform (``--test-samples 0`` keeps it whole).

Columns: ``s/round`` median wall seconds of ``--rounds`` rounds after a warm-up; ``train``/``eval`` the median
slowest actor's local-training time and the server's test evaluation; ``start s`` :func:`start_federations`;
``peak RSS``/``peak PSS``: the sum over every Ray process (gcs_server, raylet, workers, agents) sampled every
0.25 s during start-up and rounds (PSS counts shared pages, e.g. the object store, once; RSS counts them in
every process that maps them); ``actors USS``: the private memory (no object-store data, no shared libraries)
of the parameter server and client actors together, where per-client Python objects or models would show;
``B/idle client``: the growth of actors USS plus driver Δ from the previous size, per extra client (the
memory an extra idle client costs outside the data); ``data``: the arrays' bytes (in the object store once);
``driver Δ`` is this process's USS growth (the trial loop: it holds every client's sample indices, 8 bytes a
sample, plus 16 bytes a client; in a sweep it runs in a Ray worker).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from benchmarks._common import ForeignLoad, MemorySampler, local_ray, machine_line, median, table, wait_for_quiet


def _config(num_clients: int, per_round: int, samples: int, rounds: int, cpus: int):
    from platform.config.experiment import build_experiment

    return build_experiment({
        "dataset": {"name": "synthetic", "synthetic_clients": num_clients, "synthetic_samples": samples},
        "partition": {"kind": "natural"}, "model": {"name": "mlp"}, "algorithm": {"name": "fedavg"},
        "clients": {"num_clients": num_clients, "clients_per_round": per_round, "local_epochs": 1, "batch_size": 10,
                    "lr": 0.05},
        "rounds": rounds, "seed": 0, "resources": {"cpu": cpus},
        "server": {"val_fraction": 0.0}})  # the data below are shared without a server validation split


def synthetic_arrays(dataset_cfg):
    """``load_dataset(dataset_cfg)``'s train and test ArrayDatasets, with the 80/20 split in O(N)."""
    from platform.data import ArrayDataset, generate_synthetic
    from platform.data.datasets import SYNTHETIC_CLASSES, SYNTHETIC_DEFAULTS, SYNTHETIC_TEST_FRACTION

    def setting(key):
        value = getattr(dataset_cfg, f"synthetic_{key}", None)
        return SYNTHETIC_DEFAULTS[key] if value is None else value

    seed = setting("seed")
    x, y, groups = generate_synthetic(setting("alpha"), setting("beta"), setting("clients"), seed,
                                      dataset_cfg.synthetic_samples, bool(dataset_cfg.synthetic_class_means))
    # The loader: for k in sorted groups, idx = flatnonzero(groups == k); test_mask[rng.permutation(idx)[:n]].
    # Groups are contiguous and sorted here, and permutation(idx) == idx[permutation(len(idx))]: same stream.
    test_mask = np.zeros(len(y), dtype=bool)
    rng = np.random.default_rng([seed, 2**31])
    ids, starts, counts = np.unique(groups, return_index=True, return_counts=True)
    assert np.all(np.diff(groups) >= 0)
    for start, count in zip(starts, counts):
        n_test = max(1, int(round(count * SYNTHETIC_TEST_FRACTION)))
        test_mask[start + rng.permutation(count)[:n_test]] = True
    return [ArrayDataset(np.ascontiguousarray(x[m]), y[m], SYNTHETIC_CLASSES, groups=groups[m])
            for m in (~test_mask, test_mask)]


def _driver_uss_mib() -> float:
    """This process's private memory: not the object-store pages it wrote the data into (RSS counts those)."""
    import psutil

    return psutil.Process(os.getpid()).memory_full_info().uss / 2 ** 20


def measure(num_clients: int, args, check_loader: bool) -> dict:
    import ray

    from benchmarks._common import ray_memory_mib
    from platform.runtime.federation import SharedData
    from platform.runtime.trial import run_rounds, start_federations, stop_federations

    config = _config(num_clients, args.per_round, args.samples, args.rounds + 1, args.cpus)
    t0 = time.perf_counter()
    train, test = synthetic_arrays(config.dataset)
    generate_s = time.perf_counter() - t0
    out = {"clients": num_clients, "generate_s": generate_s, "train_samples": len(train.y),
           "data_mib": (train.x.nbytes + train.y.nbytes + train.groups.nbytes + test.x.nbytes + test.y.nbytes) / 2**20}
    if check_loader or args.time_loader:
        from platform.data import load_dataset

        t0 = time.perf_counter()
        ref_train, ref_test = load_dataset(config.dataset)
        out["load_s"] = time.perf_counter() - t0
        for a, b in ((train, ref_train), (test, ref_test)):
            assert np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y) and np.array_equal(a.groups, b.groups), \
                "benchmark arrays differ from load_dataset's"
        del ref_train, ref_test
    if args.test_samples and len(test.y) > args.test_samples:
        from platform.data import ArrayDataset

        keep = np.sort(np.random.default_rng(0).choice(len(test.y), args.test_samples, replace=False))
        test = ArrayDataset(np.ascontiguousarray(test.x[keep]), test.y[keep], test.num_classes, groups=test.groups[keep])
    out["test_samples"] = len(test.y)
    object_store = int(out["data_mib"] * 2) + 512
    wait_for_quiet(timeout=args.quiet_wait)
    with ForeignLoad() as load, local_ray(args.cpus, object_store_mib=object_store):
        time.sleep(2.0)  # let Ray's own start-up settle before the idle reading
        idle = ray_memory_mib()
        driver_before = _driver_uss_mib()
        with MemorySampler(0.25) as sampler:
            shared = SharedData(config.dataset, ray.put((train.x, train.y)), ray.put((test.x, test.y)), train.y,
                                train.input_shape, train.num_classes, train.groups, None, config.public, None)
            t0 = time.perf_counter()
            federations = start_federations(config, [config.seed], shared)
            out["start_s"] = time.perf_counter() - t0
            rounds = []
            try:
                gen = run_rounds(federations, args.rounds + 1)
                for _ in range(args.rounds + 1):
                    t0 = time.perf_counter()
                    metrics = next(gen)
                    metrics["wall"] = time.perf_counter() - t0
                    rounds.append(metrics)
                out["driver_delta_mib"] = _driver_uss_mib() - driver_before
            finally:
                stop_federations(federations)
    timed = rounds[1:]
    out.update({
        "round_s": median([m["wall"] for m in timed]),
        "train_s": median([m["local_train_seconds"] for m in timed]),
        "eval_s": median([m["evaluate_seconds"] for m in timed]),
        "aggregate_s": median([m["aggregate_seconds"] for m in timed]),
        "peak_rss_mib": sampler.peak_rss, "peak_pss_mib": sampler.peak_pss,
        "peak_actors_uss_mib": sampler.peak_actors_uss, "idle_pss_mib": idle["pss_mib"],
        "ray_delta_mib": sampler.peak_pss - idle["pss_mib"], "other_load": load.cores,
        "test_accuracy": timed[-1]["test_accuracy"],
    })
    return out


def render(results: list[dict]) -> str:
    rows, prev = [], None
    for r in results:
        marginal = "-"
        if prev is not None:
            extra = ((r["peak_actors_uss_mib"] + r["driver_delta_mib"])
                     - (prev["peak_actors_uss_mib"] + prev["driver_delta_mib"]))
            marginal = f"{extra * 2**20 / (r['clients'] - prev['clients']):.0f}"
        rows.append([f"{r['clients']:,}", f"{r['round_s']:.3f}", f"{r['train_s']:.3f}", f"{r['eval_s']:.3f}",
                     f"{r['start_s']:.2f}", f"{r['generate_s']:.1f}",
                     f"{r['load_s']:.1f}" if "load_s" in r else "-",
                     f"{r['peak_rss_mib']:.0f}", f"{r['peak_pss_mib']:.0f}", f"{r['peak_actors_uss_mib']:.0f}",
                     f"{r['data_mib']:.0f}", f"{r['driver_delta_mib']:.0f}", marginal, f"{r['other_load']:.2f}"])
        prev = r
    return table(["clients", "s/round", "train", "eval", "start s", "gen s", "load s", "peak RSS MiB",
                  "peak PSS MiB", "actors USS MiB", "data MiB", "driver Δ MiB", "B/idle client", "other load"],
                 rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="1000,10000,100000", help="total clients, comma-separated")
    parser.add_argument("--per-round", type=int, default=100, help="clients per round (default 100)")
    parser.add_argument("--samples", type=int, default=25, help="synthetic_samples per client (default 25)")
    parser.add_argument("--test-samples", type=int, default=5000,
                        help="evaluate on this many test samples at every size (default 5000; 0: all)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds after a warm-up (default 5)")
    parser.add_argument("--cpus", type=int, default=os.cpu_count(), help="Ray CPUs and resources.cpu (default: all)")
    parser.add_argument("--time-loader", action="store_true",
                        help="also time load_dataset at every size (slow: O(clients x samples))")
    parser.add_argument("--quiet-wait", type=float, default=60.0,
                        help="seconds to wait for other processes to go quiet before each size (default 60)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per size")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.clients.split(",") if s.strip()]
    print(machine_line(), flush=True)
    results = []
    for i, n in enumerate(sizes):
        print(f"... {n} clients", file=sys.stderr, flush=True)
        results.append(measure(n, args, check_loader=(i == 0)))
        if args.json:
            print(json.dumps(results[-1]), flush=True)
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
