"""What the single-image method's per-round selection costs, and what caching the crop pool saves.

    python -m benchmarks.single_image_selection [--rounds 4] [--repeats 5] [--pools 5000,50000] [--json]

1. **Selection cost per round.** On the ``single_image_pruning`` base config (digits32, the small ``cnn``, a
   5000-crop pool, s = 500), for three selection settings — the paper's main sizing (K-means a no-op, entropy
   e = 0.9 only), K-means acting (``kmeans_keep_ratio`` 0.5, K = 100) and K-means with K = 1000 — it times
   the three parts of :meth:`algorithms.single_image.SingleImage.select` in this process with one torch thread
   (as the parameter server runs them): the batched inference over the pool (embeddings + logits), the
   K-means balancing and the entropy pruning (medians of ``--repeats``). Then it runs the same config on the
   platform (real Ray actors, one seed, ``--rounds`` rounds) and reports the selection's share of the median
   round time (rounds after the first).
2. **Pool cached vs regenerated.** ``share_dataset`` (the driver's one-off step that builds the pool and puts
   it in the object store) with an empty stage cache (the pool is generated) and again with the filled cache
   (read back), for each ``--pools`` size.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

from benchmarks._common import local_ray, machine_line, table

SETTINGS = {
    "paper sizing (K-means no-op, e=0.9)": {},
    "K-means acting (keep 0.5, K=100)": {"kmeans_keep_ratio": 0.5},
    "K-means acting (keep 0.5, K=1000)": {"kmeans_keep_ratio": 0.5, "kmeans_k": 1000},
}


def _config(overrides: dict):
    from platform.config.experiment import apply_overrides, build_experiment
    from platform.config.search_space import load_search_space

    return build_experiment(apply_overrides(load_search_space("single_image_pruning").base, overrides))


def _time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def selection_parts(config, public_x, repeats: int) -> dict:
    """Median seconds of inference, K-means and entropy pruning for ``config``'s selection, one thread."""
    import torch

    from algorithms import resolve_algorithm
    from algorithms.common.pruning import entropy_prune, kmeans_balance, kmeans_target_size
    from algorithms.models import build_model
    from algorithms.single_image import embed_and_predict

    torch.set_num_threads(1)
    algo = resolve_algorithm(config.algorithm.name)(config.algorithm.params)
    hp = algo.hp
    model = build_model(config.model.name, tuple(public_x.shape[1:]), 10)
    features, logits = embed_and_predict(model, public_x)
    probs = torch.softmax(logits.double(), dim=1)
    s_k = kmeans_target_size(len(public_x), hp.num_distill, hp.entropy_rate, hp.kmeans_keep_ratio)
    kept = kmeans_balance(features, probs, hp.kmeans_k, hp.kmeans_factor, hp.kmeans_variant, size=s_k)
    return {
        "inference": _time(lambda: embed_and_predict(model, public_x), repeats),
        "kmeans": _time(lambda: kmeans_balance(features, probs, hp.kmeans_k, hp.kmeans_factor, hp.kmeans_variant,
                                               size=s_k), repeats),
        "entropy": _time(lambda: entropy_prune(probs[kept], hp.entropy_rate, hp.entropy_mode), repeats),
        "kmeans_target": s_k, "pool": len(public_x)}


def round_seconds(config, rounds: int, cache) -> float:
    from platform.runtime.federation import share_dataset
    from platform.runtime.trial import start_federations, stop_federations

    feds = start_federations(config, [config.seed], share_dataset(config, cache=cache), cache=cache)
    times = []
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            feds[0].finish_round(feds[0].start_round())
            times.append(time.perf_counter() - start)
    finally:
        stop_federations(feds)
    return statistics.median(times[1:] or times)


def pool_timing(size: int) -> dict:
    from platform.stages.cache import open_cache
    from platform.runtime.federation import share_dataset

    config = _config({"public.size": size, "algorithm.num_distill": min(500, size)})
    with tempfile.TemporaryDirectory(prefix="fedsweep-pool-") as root:
        cache = open_cache(root)
        start = time.perf_counter()
        share_dataset(config, cache=cache)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        share_dataset(config, cache=cache)
        warm = time.perf_counter() - start
    return {"pool": size, "generated_s": cold, "cached_s": warm}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.single_image_selection",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="platform rounds per setting (first one excluded)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of each timed selection part")
    parser.add_argument("--pools", default="5000,50000", help="pool sizes for the cached/regenerated timing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    import numpy as np
    import ray
    import torch

    from platform.stages.cache import open_cache
    from platform.runtime.federation import share_dataset

    results = {"selection": {}, "pool": []}
    with local_ray(2), tempfile.TemporaryDirectory(prefix="fedsweep-sel-") as root:
        cache = open_cache(root)
        for label, overrides in SETTINGS.items():
            config = _config({f"algorithm.{k}": v for k, v in overrides.items()})
            public_x = torch.from_numpy(np.asarray(ray.get(share_dataset(config, cache=cache).public_ref)))
            before = torch.get_num_threads()
            parts = selection_parts(config, public_x, args.repeats)
            torch.set_num_threads(before)
            parts["round"] = round_seconds(config, args.rounds, cache)
            results["selection"][label] = parts
            print(f"... {label}: {parts}", file=sys.stderr, flush=True)
        for size in (int(s) for s in args.pools.split(",")):
            results["pool"].append(pool_timing(size))
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(machine_line())
    rows = []
    for label, p in results["selection"].items():
        total = p["inference"] + p["kmeans"] + p["entropy"]
        rows.append([label, f"{p['kmeans_target']}/{p['pool']}", f"{p['inference']:.3f}", f"{p['kmeans']:.3f}",
                     f"{p['entropy']:.4f}", f"{total:.3f}", f"{p['round']:.2f}", f"{100 * total / p['round']:.0f} %"])
    print(table(["selection", "s_K/N_pool", "inference s", "K-means s", "entropy s", "selection s", "round s",
                 "share of round"], rows))
    print(table(["pool crops", "generated s", "from cache s"],
                [[p["pool"], f"{p['generated_s']:.2f}", f"{p['cached_s']:.2f}"] for p in results["pool"]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
