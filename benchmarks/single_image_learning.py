"""Does distillation from one image's crops improve the global model over FedAvg-only rounds? (spec/single_image.md)

    python -m benchmarks.single_image_learning [--seeds 0,1,2] [--rounds 20] [--alpha 1.0] [--json]

Arms, all on the ``single_image_pruning`` base config (digits32, Dirichlet α with equal sizes, 20 clients, 8 per
round, the small ``cnn``, a 5000-crop pool of scikit-learn's china photo, K-means + entropy selection of 500 crops,
the same LN_c-clipped local training) and the same seeds:

- ``FedAvg only``: ``distill_steps: 0`` and a FedAvg warm start every round, i.e. plain FedAvg of the same clients;
- ``FedAvg + distillation (ρ = 100 %)``: the warm start every round, then distillation on the selected crops;
- ``distillation, ρ = 20 %``: the paper's main schedule, a FedAvg warm start only in rounds 1, 5, 10, …; the other
  rounds distil on from the last distilled model.

Reported: the mean over seeds of the final and the best-over-rounds *validation* accuracy, the test accuracy at
the final round and at the best-validation round (selection is never on test), with the per-seed figures, and
whether ``ρ = 100 %`` beats ``FedAvg only`` on the mean final validation accuracy.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from benchmarks._common import print_learning, run_arms

ARMS = {
    "FedAvg only": {"distill_steps": 0, "fedavg_init_every": 1},
    "FedAvg + distillation (rho 100%)": {"fedavg_init_every": 1},
    "distillation, rho 20%": {"fedavg_init_every": 5},
}


def configs(rounds: int, alpha: float, extra: dict | None = None) -> dict:
    """label -> ExperimentConfig of each arm, on the single_image_pruning base config."""
    from platform.config.experiment import apply_overrides, build_experiment
    from platform.config.search_space import load_search_space

    base = apply_overrides(load_search_space("single_image_pruning").base,
                           {"rounds": rounds, "partition.alpha": alpha, **(extra or {})})
    return {label: build_experiment(apply_overrides(base, {f"algorithm.{k}": v for k, v in arm.items()}))
            for label, arm in ARMS.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.single_image_learning",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated replicate seeds")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--alpha", type=float, default=1.0, help="Dirichlet concentration (the scenario)")
    parser.add_argument("--cache-dir", default=None, help="stage cache (default: the platform's)")
    parser.add_argument("--json", action="store_true", help="print the per-seed results as JSON")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]

    from platform.stages.cache import open_cache

    results = run_arms(configs(args.rounds, args.alpha), seeds, args.rounds, cache=open_cache(args.cache_dir))
    gain = np.mean(results["FedAvg + distillation (rho 100%)"]["final_val"]) - np.mean(results["FedAvg only"]["final_val"])
    print_learning(results, args.json, f"digits32, alpha {args.alpha:g}, {args.rounds} rounds, seeds {args.seeds}",
                   [f"distillation over FedAvg-only rounds (rho 100%, mean final val): {gain:+.4f} -> "
                    f"{'holds' if gain > 0 else 'does NOT hold'}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
