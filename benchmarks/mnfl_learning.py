"""MNFL against its baselines on the embedded default (the paper's Table 1 ordering, docs/methods/mnfl.md §6, §9).

    python -m benchmarks.mnfl_learning [--seeds 0,1,2,3,4] [--rounds 30] [--arms MNFL,FedDF,FedMD,...] [--json]

Every arm runs the ``mnfl_rho`` base config (digits, Non-IID_2: every class on every client in unequal counts,
12 clients all sampled, four architectures in blocks of 3, 20 % of each client's images as its validation split,
the first 30 % of the training set as the unlabelled public pool, E = 20, batch 128, lr 0.01) on the same seeds,
with each method's defaults:

- MNFL (ρ = 0.7, λ = 1, η3 = 0.01, T = 1, R = 1);
- FedDF: ``pfeddf`` with ``finetune_epochs: 0`` (the fused per-architecture models scored on each client's splits);
- pFedDF: ``pfeddf`` with its default 5 fine-tuning epochs;
- FedMD, Sim-pFL, TopK-pFL (K = 5).

Reported: the mean over seeds of the mean per-client validation accuracy (final and best over rounds) and the
mean per-client test accuracy (final, and at the best-validation round), per seed too, and the verdicts of the
paper's Table 1 claim (MNFL above FedDF and above FedMD) on the mean final validation accuracy, with the lead ±
its standard error over seeds and Welch p (within noise is said so).
"""
from __future__ import annotations

import argparse
import sys


from benchmarks._common import chosen_arms, claim_verdict, print_learning, run_arms

ARMS = {
    "MNFL": {"name": "mnfl"},
    "FedDF": {"name": "pfeddf", "finetune_epochs": 0},
    "FedMD": {"name": "fedmd"},
    "pFedDF": {"name": "pfeddf"},
    "Sim-pFL": {"name": "sim_pfl"},
    "TopK-pFL": {"name": "topk_pfl"},
}


def configs(rounds: int, arms: list[str]) -> dict:
    from platform.config.experiment import apply_overrides, build_experiment
    from platform.config.search_space import load_search_space

    base = apply_overrides(load_search_space("mnfl_rho").base, {"rounds": rounds})
    out = {}
    for label in arms:
        data = dict(base)
        data["algorithm"] = {"public_size": base["algorithm"].get("public_size"), **ARMS[label]}
        out[label] = build_experiment(data)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mnfl_learning", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated replicate seeds")
    parser.add_argument("--rounds", type=int, default=30, help="rounds (default: the mnfl_rho base's 30)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {', '.join(ARMS)}")
    parser.add_argument("--json", action="store_true", help="print the per-seed results as JSON")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = chosen_arms(parser, args.arms, ARMS)

    built = configs(args.rounds, arms)
    results = run_arms(built, seeds, args.rounds)
    verdicts = [claim_verdict(results, "MNFL", other, f"Table 1: MNFL above {other}")
                for other in ("FedDF", "FedMD") if {"MNFL", other} <= set(results)]
    some = next(iter(built.values()))
    print_learning(results, args.json, f"digits, {some.partition.kind}, {some.clients.num_clients} clients, "
                   f"{args.rounds} rounds, seeds {args.seeds}; accuracies are means over clients of each client's own "
                   f"validation / test split", verdicts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
