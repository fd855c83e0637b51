"""FedAUX vs FedDF+P vs FedDF on the embedded default (the paper's Table I ordering, spec/fedaux.md §7).

    python -m benchmarks.fedaux_learning [--seeds 0,1,2] [--rounds 20] [--distill-lr 0.001] [--epsilon 0.1]

The three methods run the ``fedaux_dp`` base config (digits32, Dirichlet α = 0.01 with equal sizes, 10 clients,
8 per round, the small ``cnn``, SimCLR pre-training on the first half of the training set) on the same seeds:

- FedDF: ``feddf`` without pre-training (random feature extractor);
- FedDF+P: ``feddf`` with the SimCLR-pre-trained feature extractor;
- FedAUX: ``fedaux`` with it, certainty-weighted distillation with the paper's λ = 0.1, ε = 0.1, δ = 1e-5.

Every method gets the same distillation lr (``--distill-lr``; the paper's 5e-5 moves a model little with 575
distillation images). Reported: the mean over seeds of the final and the best-over-rounds validation accuracy,
and the test accuracy at the final round (selection is never on test), with the per-seed figures.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from benchmarks._common import learning_summary, machine_line, run_federated, table


def _configs(rounds: int, distill_lr: float, epsilon: float) -> dict:
    from platform.config import build_experiment
    from platform.search_space import load_search_space

    base = dict(load_search_space("fedaux_dp").base)
    base["rounds"] = rounds

    def make(name: str, pretrain: bool, extra: dict):
        data = {**base, "algorithm": {"name": name, "distill_lr": distill_lr, **extra},
                "pretrain": {"method": "simclr" if pretrain else "none"}}
        return build_experiment(data)

    return {"FedDF": make("feddf", False, {}), "FedDF+P": make("feddf", True, {}),
            "FedAUX": make("fedaux", True, {"epsilon": epsilon})}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fedaux_learning", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--distill-lr", type=float, default=1e-3)
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--cache-dir", default=None, help="stage cache (default: the platform's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]

    import ray

    from platform.cache import open_cache
    from platform.pretrain import prepare_pretrained
    from platform.runtime.federation import replicate_over_seeds, share_dataset

    ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
    cache = open_cache(args.cache_dir)
    results = {}
    for label, config in _configs(args.rounds, args.distill_lr, args.epsilon).items():
        shared = prepare_pretrained(share_dataset(config, cache=cache), replicate_over_seeds(config, seeds), cache)
        summary = learning_summary(run_federated(config, seeds, args.rounds, shared=shared, cache=cache))
        results[label] = {k: summary[k] for k in ("final_val", "best_val", "final_test")}
        print(f"... {label}: final val {np.mean(results[label]['final_val']):.4f}", file=sys.stderr, flush=True)
    ray.shutdown()
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(machine_line())
    rows = [[label, f"{np.mean(r['final_val']):.4f}", f"{np.mean(r['best_val']):.4f}", f"{np.mean(r['final_test']):.4f}",
             " ".join(f"{v:.3f}" for v in r["final_val"])] for label, r in results.items()]
    print(table(["method", "final val (mean)", "best val (mean)", "final test (mean)", "final val per seed"], rows))
    order = [np.mean(results[k]["final_val"]) for k in ("FedAUX", "FedDF+P", "FedDF")]
    holds = order[0] >= order[1] >= order[2]
    print(f"FedAUX >= FedDF+P >= FedDF on mean final validation accuracy: {'holds' if holds else 'does NOT hold'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
