"""FedAUX vs FedDF+P vs FedDF on the embedded default (the paper's Table I ordering, docs/methods/fedaux.md §7).

    python -m benchmarks.fedaux_learning [--seeds 0,1,2,3,4] [--rounds 10] [--distill-lr 0.001] [--epsilon 0.1]
                                         [--arms FedDF,FedDF+P,FedAUX] [--json]

The three methods run the ``fedaux_dp`` base config (digits32, Dirichlet α = 0.16 with equal sizes, 10 clients,
8 per round, E = 20, the small ``cnn``, SimCLR pre-training on the first half of the training set, 10
distillation epochs a round) on the same seeds:

- FedDF: ``feddf`` without pre-training (random feature extractor);
- FedDF+P: ``feddf`` with the SimCLR-pre-trained feature extractor;
- FedAUX: ``fedaux`` with it, certainty-weighted distillation with the paper's λ = 0.1, ε = 0.1, δ = 1e-5.

Every method gets the same distillation lr (``--distill-lr``; the paper's 5e-5 moves a model little with 575
distillation images). Reported: the mean over seeds of the final and the best-over-rounds validation accuracy,
and the test accuracy at the final round (selection is never on test), with the per-seed figures.
"""
from __future__ import annotations

import argparse
import functools
import sys

from benchmarks._common import chosen_arms, claim_verdict, print_learning, run_arms


def _configs(rounds: int, distill_lr: float, epsilon: float) -> dict:
    from platform.config.experiment import build_experiment
    from platform.config.search_space import load_search_space

    base = dict(load_search_space("fedaux_dp").base)
    base["rounds"] = rounds or base["rounds"]

    shared = {k: base["algorithm"][k] for k in ("distill_epochs", "distill_batch_size") if k in base["algorithm"]}

    def make(name: str, pretrain: bool, extra: dict):
        data = {**base, "algorithm": {"name": name, "distill_lr": distill_lr, **shared, **extra},
                "pretrain": {**base["pretrain"], "method": "simclr"} if pretrain else {"method": "none"}}
        return build_experiment(data)

    return {"FedDF": make("feddf", False, {}), "FedDF+P": make("feddf", True, {}),
            "FedAUX": make("fedaux", True, {"epsilon": epsilon})}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fedaux_learning", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default: the fedaux_dp base's)")
    parser.add_argument("--distill-lr", type=float, default=1e-3)
    parser.add_argument("--epsilon", type=float, default=0.1, help="FedAUX's DP epsilon (inf: the non-private scorer)")
    parser.add_argument("--arms", default="FedDF,FedDF+P,FedAUX", help="comma-separated subset of FedDF, FedDF+P, FedAUX")
    parser.add_argument("--cache-dir", default=None, help="stage cache (default: the platform's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]

    from platform.stages.cache import open_cache
    from platform.runtime.pretrain import prepare_pretrained
    from platform.runtime.federation import share_dataset
    from platform.runtime.seeding import replicate_over_seeds

    cache = open_cache(args.cache_dir)

    def shared_for(config):
        return prepare_pretrained(share_dataset(config, cache=cache), replicate_over_seeds(config, seeds), cache,
                                  log=functools.partial(print, file=sys.stderr))  # stdout: the table / JSON

    arms = chosen_arms(parser, args.arms, ("FedDF", "FedDF+P", "FedAUX"))
    configs = {label: config for label, config in _configs(args.rounds, args.distill_lr, args.epsilon).items()
               if label in arms}
    some = next(iter(configs.values()))
    rounds = some.rounds
    results = run_arms(configs, seeds, rounds, cache=cache,
                       shared_for=shared_for)
    alpha = some.partition.alpha
    print_learning(results, args.json, f"digits32, alpha {alpha:g}, {rounds} rounds, epsilon {args.epsilon:g}, "
                                       f"seeds {args.seeds}",
                   [claim_verdict(results, ours, other, f"Table I: {ours} above {other}")
                    for ours, other in (("FedAUX", "FedDF+P"), ("FedDF+P", "FedDF")) if {ours, other} <= set(results)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
