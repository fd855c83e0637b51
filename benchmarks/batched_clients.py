"""Where batched client training pays: one actor's local training, sequential against batched, per model and batch.

    python -m benchmarks.batched_clients [--clients 5] [--samples 64] [--repeats 3]
    python -m benchmarks.batched_clients --agreement [--rounds 10] [--workloads digits_cnn,...]

For each case, K clients of ``--samples`` samples (random inputs of the model's usual shape) train one epoch from
the same weights, one thread (as a client actor): (a) ``train_local`` on each in turn, the global generator seeded
per client (as the actor does); (b) ``train_local_batched`` on all K. Median seconds over ``--repeats`` after one
warm-up. ``work`` = parameters × batch size, the quantity ``clients.batched: auto`` thresholds
(:data:`algorithms.common.batched_training.AUTO_MAX_WORK_CPU`). ``max |Δw|`` is the largest difference between
the two paths' final weights. ``other load``: cores other processes used meanwhile (the machine is shared).

``--agreement``: the tolerance of the contract. For each workload of :mod:`benchmarks.round_throughput`, FedAvg
runs ``--rounds`` rounds twice in this process through one :class:`platform.runtime.actors.ClientPool` hosting
every client (no Ray), ``clients.batched: off`` and ``on``, the same sampled clients and seeds; it prints the
|Δ test_loss| and max |Δ weight| of the global models after round 1 and after the last round.
"""
from __future__ import annotations

import argparse
import sys
import time

from benchmarks._common import ForeignLoad, machine_line, median, table

CASES = [  # (model, input shape, batch size)
    ("cnn", (1, 8, 8), 32), ("cnn", (1, 8, 8), 10), ("mlp", (1, 8, 8), 32), ("cnn1", (1, 28, 28), 32),
    ("resnet8_narrow", (3, 32, 32), 32), ("fedkp_mnist_cnn", (1, 28, 28), 32), ("leaf_cnn", (3, 32, 32), 10),
]


def measure(name, shape, batch, clients, samples, repeats):
    import torch

    from algorithms.common.batched_training import train_local_batched
    from algorithms.common.training import LocalTraining, train_local
    from algorithms.common.weights import get_flat_weights, set_flat_weights
    from platform.config.models import build_model

    torch.manual_seed(0)
    model = build_model(name, shape, 10)
    start = get_flat_weights(model)
    xs = [torch.randn(samples, *shape) for _ in range(clients)]
    ys = [torch.randint(0, 10, (samples,)) for _ in range(clients)]
    cfg = LocalTraining(1, batch, lr=0.05)

    def sequential():
        out = []
        for k in range(clients):
            set_flat_weights(model, start)
            torch.default_generator.manual_seed(1000 + k)
            train_local(model, xs[k], ys[k], cfg, torch.Generator().manual_seed(k))
            out.append(get_flat_weights(model))
        return torch.stack(out)

    def batched():
        set_flat_weights(model, start)
        return train_local_batched(model, xs, ys, cfg, [torch.Generator().manual_seed(k) for k in range(clients)],
                                   [torch.Generator().manual_seed(1000 + k) for k in range(clients)])[0]

    times = {}
    results = {}
    for fn in (sequential, batched):
        results[fn.__name__] = fn()
        spent = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - t0)
        times[fn.__name__] = median(spent)
    params = sum(p.numel() for p in model.parameters())
    return {"case": f"{name} {'x'.join(map(str, shape))} B={batch}", "work": params * batch,
            "seq": times["sequential"], "batched": times["batched"],
            "dw": float((results["sequential"] - results["batched"]).abs().max())}


def agreement(name: str, rounds: int) -> dict:
    from benchmarks.round_throughput import WORKLOADS, _arrays, _config, pool_rounds

    workload = WORKLOADS[name]
    out = {}
    for batched in ("off", "on"):
        config = _config(workload, 1, rounds, batched)
        out[batched] = pool_rounds(config, _arrays(workload, config), rounds, threads=1)
    seq, bat = out["off"], out["on"]
    return {"workload": name, "dloss1": abs(seq[0]["test_loss"] - bat[0]["test_loss"]),
            "dw1": float((seq[0]["weights"] - bat[0]["weights"]).abs().max()),
            "dloss": abs(seq[-1]["test_loss"] - bat[-1]["test_loss"]),
            "dw": float((seq[-1]["weights"] - bat[-1]["weights"]).abs().max()), "loss": seq[-1]["test_loss"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batched_clients", description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=5, help="clients trained together (default 5)")
    parser.add_argument("--samples", type=int, default=64, help="samples per client (default 64)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats after a warm-up (default 3)")
    parser.add_argument("--agreement", action="store_true", help="batched vs sequential FedAvg over --rounds rounds")
    parser.add_argument("--rounds", type=int, default=10, help="rounds for --agreement (default 10)")
    parser.add_argument("--workloads", default="digits_cnn,digits32_resnet8,cifar_pfl",
                        help="round_throughput workloads for --agreement")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    print(machine_line(), flush=True)
    if args.agreement:
        rows = []
        for name in args.workloads.split(","):
            r = agreement(name.strip(), args.rounds)
            rows.append([r["workload"], f"{r['dloss1']:.0e}", f"{r['dw1']:.0e}", f"{r['dloss']:.0e}", f"{r['dw']:.0e}",
                         f"{r['loss']:.4f}"])
            print(f"... {name}", file=sys.stderr, flush=True)
        print(table(["workload", "|Δ test_loss| round 1", "max |Δw| round 1", f"|Δ test_loss| round {args.rounds}",
                     f"max |Δw| round {args.rounds}", f"test_loss round {args.rounds} (seq)"], rows))
        return 0
    rows = []
    for name, shape, batch in CASES:
        with ForeignLoad() as load:
            r = measure(name, shape, batch, args.clients, args.samples, args.repeats)
        rows.append([r["case"], f"{r['work']:,}", f"{r['seq']:.4f}", f"{r['batched']:.4f}",
                     f"{r['seq'] / r['batched']:.2f}", f"{r['dw']:.0e}", f"{load.cores:.2f}"])
        print(f"... {r['case']}", file=sys.stderr, flush=True)
    print(table(["case", "work (params x B)", "sequential s", "batched s", "speed-up", "max |Δw|", "other load"],
                rows))
    print(f"\n{args.clients} clients x {args.samples} samples, 1 epoch, SGD lr 0.05, 1 thread")
    return 0


if __name__ == "__main__":
    sys.exit(main())
