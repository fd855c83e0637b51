"""Seconds per FedAvg round on the platform's client actors against the same work in one plain PyTorch loop.

    python -m benchmarks.round_throughput [--workloads digits_cnn,digits32_resnet8,cifar_pfl] [--rounds 5]
                                          [--raw-threads 2] [--cpus 2] [--json]
    python -m benchmarks.round_throughput --device cuda --in-process \
        --workloads digits_cnn,digits32_resnet8,cifar_pfl,cifar_pfl_1000

For each workload the same FedAvg rounds (same sampled clients, data, model, epochs, batch size and seeds)
run two ways, one after the other on the same cores:

(a) ``raw``: one process, torch using ``--raw-threads`` threads (default: every core), training the sampled
    clients one after another with :func:`algorithms.common.train_local` and the platform's per-(round, client)
    generators (:mod:`platform.runtime.seeding`), then the N_k-weighted mean and the test-set evaluation the
    platform's server also does. No Ray, no actors, no serialisation: the physical limit of this machine for
    this work.
(b) ``platform``: :func:`platform.runtime.trial.start_federations` and :func:`run_rounds` inside
    ``ray.init(num_cpus=--cpus)``, experiment ``resources.cpu = --cpus`` (so its default client actors and threads),
    with ``clients.batched: off``: each actor trains its clients one after another (``platform seq``);
(c) ``batched``: the same with ``clients.batched: on``: each actor trains its clients as one vmapped computation
    (:mod:`algorithms.common.batched_training`). ``auto`` says which of (b)/(c) ``clients.batched: auto`` (the
    default) picks for the workload.

``--in-process`` replaces Ray in (b) and (c) by one :class:`platform.runtime.actors.ClientPool` (the client
actor's own class) hosting every client in this process, with the server's aggregation and evaluation done here as
in (a): the platform's client code without Ray's calls and transfers (for a GPU machine without Ray,
or to separate the two). ``--device cuda`` runs (a), (b) and (c) on the GPU (``resources.gpu = 1``;
with Ray, one client actor holds it).

Each reports the median seconds per round over ``--rounds`` rounds after one warm-up round; ``ratio`` is
platform / raw with the first ``--raw-threads`` (≤ 1.0: the platform is as fast as the plain loop), ``raw/batched``
how many times faster than the raw loop (c) is. ``Δ batched`` compares (c) with (b) the same way as ``Δ test_loss``
compares (a) and (b).
``Δ test_loss`` compares (a) with the first ``--raw-threads`` and (b): after round 1, where the same work
gives the same model up to float rounding (~1e-7: pre-reduction order, thread counts), and its largest value
over the rounds, where training amplifies that rounding (resnet8's BatchNorm at lr 0.05 turns a 1e-7 change of
the weights into ~1e-3 of the loss within a round; the cnn keeps it at ~1e-7). Dropout (``leaf_cnn``) draws
from torch's global generator, which both seed per (round, client) as the client actors do. Start-up
(actor creation) is not in the per-round figure; ``benchmarks.trial_startup`` measures it.

Workloads:

- ``digits_cnn``: embedded 8×8 digits, the 6k-parameter ``cnn``; overhead-dominated (a client trains in ms).
- ``digits32_resnet8``: digits upscaled to 3×32×32, the 4.9M-parameter ``resnet8``; compute-dominated.
- ``cifar_pfl``: pfl-research's cross-device CIFAR-10 setup: 1,000 clients × 50 images of 3×32×32 (synthetic
  random values, built here and handed to the runtime as arrays via ``SharedData``), 50 clients per round,
  batch 10, 1 local epoch, SGD lr 0.1, the 2-conv CNN (32, 64 channels, max-pool, dense 128: ``leaf_cnn``,
  the Reddi et al. / pfl-research CNN). Test set: 1,000 synthetic images (evaluated every round).
- ``cifar_pfl_1000``: the same with all 1,000 clients in every round (a GPU workload).

The machine is shared: ``other load`` is the average number of cores other processes used during each
measurement; figures taken with other load well above 0 are not comparable.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from benchmarks._common import ForeignLoad, local_ray, machine_line, median, table, wait_for_quiet

FEDAVG = {"name": "fedavg"}


@dataclass
class Workload:
    title: str
    config: dict
    arrays: Optional[Callable[[], tuple]] = None  # () -> (train_x, train_y, test_x, test_y); None = the dataset
    notes: list = field(default_factory=list)


def _cifar_like_arrays(clients: int = 1000, per_client: int = 50, test: int = 1000, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = clients * per_client
    train_x = rng.standard_normal((n, 3, 32, 32), dtype=np.float32)
    train_y = rng.integers(0, 10, n).astype(np.int64)
    test_x = rng.standard_normal((test, 3, 32, 32), dtype=np.float32)
    test_y = rng.integers(0, 10, test).astype(np.int64)
    return train_x, train_y, test_x, test_y


WORKLOADS = {
    "digits_cnn": Workload(
        "digits, cnn, 20 clients, 10/round, B=32, E=1",
        {"dataset": {"name": "digits"}, "model": {"name": "cnn"}, "algorithm": FEDAVG,
         "partition": {"kind": "dirichlet", "alpha": 0.5},
         "clients": {"num_clients": 20, "clients_per_round": 10, "local_epochs": 1, "batch_size": 32, "lr": 0.05}}),
    "digits32_resnet8": Workload(
        "digits32, resnet8, 20 clients, 4/round, B=32, E=1",
        {"dataset": {"name": "digits32"}, "model": {"name": "resnet8"}, "algorithm": FEDAVG,
         "partition": {"kind": "iid"},
         "clients": {"num_clients": 20, "clients_per_round": 4, "local_epochs": 1, "batch_size": 32, "lr": 0.05}}),
    "cifar_pfl": Workload(
        "pfl CIFAR-10 x-device: 1000x50 synthetic 3x32x32, leaf_cnn, 50/round, B=10, E=1, lr 0.1",
        # dataset.name only labels the run: the arrays below replace its data (input shape 3x32x32 as digits32)
        {"dataset": {"name": "digits32"}, "model": {"name": "leaf_cnn"}, "algorithm": FEDAVG,
         "partition": {"kind": "iid"},
         "clients": {"num_clients": 1000, "clients_per_round": 50, "local_epochs": 1, "batch_size": 10, "lr": 0.1}},
        arrays=_cifar_like_arrays),
}
WORKLOADS["cifar_pfl_1000"] = Workload(
    "pfl CIFAR-10 x-device as cifar_pfl, all 1000 clients per round",
    {**WORKLOADS["cifar_pfl"].config,
     "clients": {**WORKLOADS["cifar_pfl"].config["clients"], "clients_per_round": 1000}},
    arrays=_cifar_like_arrays)


def _config(workload: Workload, cpus: float, rounds: int, batched: str = "off", gpu: float = 0.0):
    from platform.config.experiment import build_experiment

    # No server validation split: the raw loop has none, and both sides must do the same work.
    return build_experiment({**workload.config, "rounds": rounds, "seed": 0,
                             "resources": {"cpu": cpus, "gpu": gpu},
                             "server": {"val_fraction": 0.0},
                             "clients": {**workload.config["clients"], "batched": batched}})


def _arrays(workload: Workload, config):
    """(train_x, train_y, test_x, test_y, groups, coarse, num_classes); NumPy arrays."""
    if workload.arrays is not None:
        train_x, train_y, test_x, test_y = workload.arrays()
        return train_x, train_y, test_x, test_y, None, None, int(train_y.max()) + 1
    from platform.data import load_dataset

    train, test = load_dataset(config.dataset)
    return train.x, train.y, test.x, test.y, train.groups, train.coarse_y, train.num_classes


# --- (a) the plain PyTorch loop ----------------------------------------------------------------------------

def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def raw_rounds(config, data, rounds: int, threads: int, device=None) -> list[dict]:
    """FedAvg in one process: the platform's work (train the sampled clients, weighted mean, evaluate), no Ray."""
    import torch

    from algorithms.common import LocalTraining, evaluate, get_flat_weights, set_flat_weights, train_local
    from platform.data import partition_clients
    from platform.config.models import build_model
    from platform.runtime.actors import GLOBAL_RNG_KEY
    from platform.runtime.seeding import derived_seed, generator, sample_clients

    device = device or torch.device("cpu")
    torch.set_num_threads(threads)
    train_x, train_y, test_x, test_y, groups, coarse, num_classes = data
    c = config.clients
    shards = partition_clients(train_y, config.partition, c.num_clients, config.stream_seed("partition"), groups,
                               coarse)
    x, y = torch.from_numpy(train_x), torch.from_numpy(train_y)  # clients' samples move to the device as the pool's
    tx, ty = torch.from_numpy(test_x).to(device), torch.from_numpy(test_y).to(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.stream_seed("init"))
        model = build_model(config.model.name, train_x.shape[1:], num_classes).to(device)
    training = LocalTraining(c.local_epochs, c.batch_size, c.optimizer, c.lr, c.momentum, c.weight_decay)
    training_seed, sampling_seed = config.stream_seed("training"), config.stream_seed("sampling")
    weights = get_flat_weights(model)
    out = []
    for r in range(rounds):
        start = time.perf_counter()
        total, acc, loss_sum = 0.0, torch.zeros_like(weights), 0.0
        for k in sample_clients(c.num_clients, c.clients_per_round, sampling_seed, r):
            idx = torch.from_numpy(shards[k])
            set_flat_weights(model, weights)
            seed = derived_seed(training_seed, r, k, GLOBAL_RNG_KEY)  # dropout, as the actors seed it
            torch.default_generator.manual_seed(seed)
            if device.type == "cuda":
                torch.cuda.manual_seed(seed)
            loss = train_local(model, x[idx].to(device), y[idx].to(device), training, generator(training_seed, r, k))
            n_k = float(len(idx))
            acc += n_k * (get_flat_weights(model) - weights)
            total, loss_sum = total + n_k, loss_sum + n_k * loss
        weights = weights + acc / total
        set_flat_weights(model, weights)
        _synchronize(device)
        trained = time.perf_counter()
        metrics = evaluate(model, tx, ty)
        now = time.perf_counter()
        metrics.update({"round": r + 1, "train_loss": loss_sum / total, "seconds": now - start,
                        "train_seconds": trained - start, "evaluate_seconds": now - trained})
        out.append(metrics)
    return out


# --- (b) the platform --------------------------------------------------------------------------------------

def platform_rounds(config, data, rounds: int, cpus: int) -> tuple[list[dict], float]:
    """The same rounds through start_federations/run_rounds; returns per-round metrics and start-up seconds."""
    import ray

    from platform.runtime.federation import SharedData
    from platform.runtime.trial import run_rounds, start_federations, stop_federations

    train_x, train_y, test_x, test_y, groups, coarse, num_classes = data
    object_store = int((train_x.nbytes + test_x.nbytes) * 1.5 / 2 ** 20) + 512
    with local_ray(cpus, object_store_mib=object_store):
        shared = SharedData(config.dataset, ray.put((train_x, train_y)), ray.put((test_x, test_y)), train_y,
                            tuple(train_x.shape[1:]), num_classes, groups, coarse, config.public, None)
        started = time.perf_counter()
        federations = start_federations(config, [config.seed], shared)
        startup = time.perf_counter() - started
        out = []
        try:
            gen = run_rounds(federations, rounds)
            for _ in range(rounds):
                t0 = time.perf_counter()
                metrics = next(gen)
                metrics["wall_seconds"] = time.perf_counter() - t0
                out.append(metrics)
        finally:
            stop_federations(federations)
    return out, startup


def pool_rounds(config, data, rounds: int, threads: int) -> list[dict]:
    """The same rounds through one :class:`ClientPool` in this process (the client actor's class, no Ray): every
    sampled client trained by the pool (``clients.batched`` as configured; on the GPU with ``resources.gpu``), then
    the N_k-weighted mean and the test-set evaluation, as the raw loop. Per round also ``local_train_seconds``
    (the pool's call) and the pool's ``_client_paths``."""
    import torch

    from algorithms.base import reduce_updates
    from algorithms.common import evaluate, get_flat_weights, set_flat_weights
    from platform.data import partition_clients
    from platform.runtime.actors import ClientPool
    from platform.runtime.seeding import sample_clients

    train_x, train_y, test_x, test_y, groups, coarse, num_classes = data
    c = config.clients
    shards = partition_clients(train_y, config.partition, c.num_clients, config.stream_seed("partition"), groups,
                               coarse)
    pool = ClientPool(config, (train_x, train_y), dict(enumerate(shards)), tuple(train_x.shape[1:]), num_classes,
                      num_threads=threads, wants_gpu=config.resources.gpu > 0)
    model = pool.models[config.model.name]
    tx, ty = torch.from_numpy(test_x).to(pool.device), torch.from_numpy(test_y).to(pool.device)
    weights = get_flat_weights(model)
    out = []
    for r in range(rounds):
        start = time.perf_counter()
        ks = [int(k) for k in sample_clients(c.num_clients, c.clients_per_round, config.stream_seed("sampling"), r)]
        result = pool.train({"weights": weights}, ks, r)
        mean = reduce_updates(result.updates)
        _synchronize(pool.device)
        trained = time.perf_counter()
        weights = weights + mean.tensors["delta"].to(weights.device)
        set_flat_weights(model, weights)
        metrics = evaluate(model, tx, ty)
        now = time.perf_counter()
        metrics.update({"round": r + 1, "seconds": now - start, "wall_seconds": now - start,
                        "local_train_seconds": trained - start, "batched_clients": result.batched_clients,
                        "_client_paths": "; ".join(result.paths), "weights": weights.detach().cpu()})
        out.append(metrics)
    return out


def measure(name: str, rounds: int, raw_threads: list[int], cpus: int, quiet_wait: float,
            device: str = "cpu", in_process: bool = False) -> dict:
    import torch

    workload = WORKLOADS[name]
    gpu = 1.0 if device == "cuda" else 0.0
    config = _config(workload, cpus, rounds + 1, gpu=gpu)
    data = _arrays(workload, config)
    run_platform = ((lambda cfg: (pool_rounds(cfg, data, rounds + 1, cpus), float("nan"))) if in_process
                    else (lambda cfg: platform_rounds(cfg, data, rounds + 1, cpus)))
    result = {"workload": name, "title": workload.title, "rounds_timed": rounds, "cpus": cpus}
    raws = {}
    for threads in raw_threads:
        wait_for_quiet(timeout=quiet_wait)
        with ForeignLoad() as load:
            raws[threads] = raw_rounds(config, data, rounds + 1, threads, torch.device(device))
        result[f"raw{threads}_s"] = median([m["seconds"] for m in raws[threads][1:]])
        result[f"raw{threads}_train_s"] = median([m["train_seconds"] for m in raws[threads][1:]])
        result[f"raw{threads}_evaluate_s"] = median([m["evaluate_seconds"] for m in raws[threads][1:]])
        result[f"raw{threads}_other_load"] = load.cores
    wait_for_quiet(timeout=quiet_wait)
    with ForeignLoad() as load:
        plat, startup = run_platform(config)
    result["platform_s"] = median([m["wall_seconds"] for m in plat[1:]])
    result["platform_other_load"] = load.cores
    result["platform_startup_s"] = startup
    wait_for_quiet(timeout=quiet_wait)
    with ForeignLoad() as load:
        batched, _ = run_platform(_config(workload, cpus, rounds + 1, "on", gpu))
    result["batched_s"] = median([m["wall_seconds"] for m in batched[1:]])
    result["batched_other_load"] = load.cores
    result["batched_local_train_s"] = median([m.get("local_train_seconds", 0.0) for m in batched[1:]])
    result["batched_clients"] = batched[-1].get("batched_clients", 0)
    result["batched_paths"] = batched[-1].get("_client_paths", "")
    result["batched_dloss1"] = abs(batched[0]["test_loss"] - plat[0]["test_loss"])
    result["batched_dloss"] = max(abs(a["test_loss"] - b["test_loss"]) for a, b in zip(batched, plat))
    result["auto"] = _auto_choice(_config(workload, cpus, rounds + 1, "auto", gpu), data)
    result["device"], result["in_process"] = device, in_process
    for phase in ("broadcast", "local_train", "aggregate", "evaluate"):
        result[f"platform_{phase}_s"] = median([m.get(f"{phase}_seconds", 0.0) for m in plat[1:]])
    reference = raws[raw_threads[0]]
    result["raw_s"] = result[f"raw{raw_threads[0]}_s"]
    result["ratio"] = result["platform_s"] / result["raw_s"]
    result["speedup_batched"] = result["raw_s"] / result["batched_s"]
    for threads, raw in raws.items():
        # round 1: the same work gives the same model up to float rounding (aggregation order, thread count);
        # later rounds: that rounding amplified by training (a lot for resnet8's BatchNorm at lr 0.05)
        result[f"raw{threads}_dloss1"] = abs(raw[0]["test_loss"] - plat[0]["test_loss"])
        result[f"raw{threads}_dloss"] = max(abs(a["test_loss"] - b["test_loss"]) for a, b in zip(raw, plat))
    result["final_test_accuracy"] = {"raw": reference[-1]["test_accuracy"], "platform": plat[-1]["test_accuracy"]}
    return result


def _auto_choice(config, data) -> str:
    """What ``clients.batched: auto`` picks for one actor's share of a round (the rule, no training)."""
    import torch

    from algorithms.common.batched_training import prefers_batched
    from platform.config.models import build_model

    gpu = config.resources.gpu > 0 and torch.cuda.is_available()
    per_actor = -(-config.clients.clients_per_round // (1 if gpu else max(int(config.resources.cpu), 1)))
    model = build_model(config.model.name, data[0].shape[1:], data[6])
    wanted, _ = prefers_batched(model, config.clients.batch_size, per_actor, torch.device("cuda" if gpu else "cpu"))
    return "batched" if wanted else "seq"


def render(results: list[dict], raw_threads: list[int]) -> str:
    headers = ["workload", *[f"raw {t}T s/round" for t in raw_threads], "platform seq s/round", "ratio",
               "batched s/round", "raw/batched", "auto", "Δ test_loss round 1 / max (raw vs seq)",
               "Δ batched vs seq round 1 / max", "other load (raw/seq/batched)"]
    rows = []
    for r in results:
        t0 = raw_threads[0]
        dloss = f"{r[f'raw{t0}_dloss1']:.0e} / {r[f'raw{t0}_dloss']:.0e}"
        loads = ("/".join(f"{r[f'raw{t}_other_load']:.2f}" for t in raw_threads)
                 + f"/{r['platform_other_load']:.2f}/{r['batched_other_load']:.2f}")
        rows.append([r["workload"], *[f"{r[f'raw{t}_s']:.4f}" for t in raw_threads], f"{r['platform_s']:.4f}",
                     f"{r['ratio']:.2f}", f"{r['batched_s']:.4f}", f"{r['speedup_batched']:.2f}x", r["auto"], dloss,
                     f"{r['batched_dloss1']:.0e} / {r['batched_dloss']:.0e}", loads])
    phases = table(["workload", *[f"raw {t}T train / eval" for t in raw_threads], "platform train (max actor)",
                    "batched train (max actor)",
                    "aggregate", "evaluate (overlapped)", "rest", "start-up s"],
                   [[r["workload"], *[f"{r[f'raw{t}_train_s']:.4f} / {r[f'raw{t}_evaluate_s']:.4f}" for t in raw_threads],
                     f"{r['platform_local_train_s']:.4f}", f"{r['batched_local_train_s']:.4f}",
                     *[f"{r[f'platform_{p}_s']:.4f}" for p in ("aggregate", "evaluate")],
                     f"{r['platform_s'] - r['platform_local_train_s'] - r['platform_aggregate_s']:.4f}",
                     f"{r['platform_startup_s']:.2f}"] for r in results])
    return (table(headers, rows) + "\n\nphases, median s/round (platform: the server's timers; the server evaluates "
            "round r while round r+1's clients train, so evaluate is not on the critical path; rest = s/round - "
            "train - aggregate: Ray calls, transfers, pre-reduction, evaluation's share of the cores):\n" + phases
            + "\n\n" + "\n".join(f"{r['workload']}: {r['title']}" for r in results)
            + "\n\nbatched run, last round: " + "\n".join(f"{r['workload']}: {r['batched_paths']}" for r in results))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.round_throughput",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated: {', '.join(WORKLOADS)}")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds after one warm-up round (default 5)")
    parser.add_argument("--raw-threads", default=str(os.cpu_count()),
                        help="torch threads of the raw loop; several, comma-separated, give one column each "
                             "(the ratio uses the first; default: every core)")
    parser.add_argument("--cpus", type=int, default=os.cpu_count(), help="Ray CPUs and resources.cpu (default: all)")
    parser.add_argument("--quiet-wait", type=float, default=60.0,
                        help="seconds to wait for other processes to go quiet before each measurement (default 60)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where every path trains and evaluates (default cpu; cuda: resources.gpu = 1)")
    parser.add_argument("--in-process", action="store_true",
                        help="the platform paths run one ClientPool in this process instead of Ray actors "
                             "(for a machine without Ray, such as a GPU node with nothing installed)")
    parser.add_argument("--batched-convolutions", choices=("default", "grouped", "products"), default="default",
                        help="how the batched path computes convolutions in this process (--in-process): vmap's "
                             "grouped convolutions, or unfold + batched matrix products (default: grouped, "
                             "algorithms.common.batched_training.CONVOLUTIONS_AS_PRODUCTS_ON)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per workload")
    args = parser.parse_args(argv)
    if args.batched_convolutions != "default":
        if not args.in_process:
            parser.error("--batched-convolutions applies to this process only: add --in-process")
        from algorithms.common import batched_training

        batched_training.CONVOLUTIONS_AS_PRODUCTS_ON = (frozenset({"cpu", "cuda"})
                                                        if args.batched_convolutions == "products" else frozenset())
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; allowed: {', '.join(WORKLOADS)}")
    raw_threads = [int(t) for t in args.raw_threads.split(",")]
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA device is visible to torch here")
    print(machine_line(), flush=True)
    print(f"paths: raw loop, platform {'ClientPool in this process (no Ray)' if args.in_process else 'on Ray actors'}"
          f", device {args.device}, batched convolutions: {args.batched_convolutions}", flush=True)
    results = []
    for name in names:
        print(f"... {name}", file=sys.stderr, flush=True)
        results.append(measure(name, args.rounds, raw_threads, args.cpus, args.quiet_wait, args.device,
                               args.in_process))
        if args.json:
            print(json.dumps(results[-1]), flush=True)
    print(render(results, raw_threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
