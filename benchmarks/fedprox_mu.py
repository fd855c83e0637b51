"""The FedProx μ curve: is accuracy flat for small μ? (docs/methods/feded.md §2.3, thesis μ grid
{0.01, 0.1, 0.5, 1})

    python -m benchmarks.fedprox_mu [--seeds 0,1,2,3,4] [--rounds 30] [--alpha 0.1] [--mus 0,0.001,...] [--json]

The FedED thesis's FedAvg/FedProx setting (docs/methods/feded.md §4, Table 4.1 setup): 10 clients, all participating,
Dirichlet(α) label skew, E = 1 local epoch, SGD with momentum 0.9, μ = 0.1 as the reported value, tuned over
{0.01, 0.1, 0.5, 1}. Its code never applied the proximal term (§2.3), so the thesis has no real μ curve; this one
is FedProx with the term applied. Scaled to embedded digits (about 130 training images per client): batch 16 and
lr 0.05 instead of 64 and 1e-3 (which leave these clients untrained), 30 rounds instead of 100 (digits converges
within them).

Each μ is one arm (μ = 0 trains exactly as FedAvg) on the same seeds. Reported: the learning table (validation
metrics, test at the final round and at the best-validation round) and the claim "the curve is flat for small μ",
read as: for every μ ≤ ``--flat-up-to`` (0.1, the thesis's value), the mean final validation accuracy is within
``--tolerance`` (0.01) of μ = 0's.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from benchmarks._common import print_learning, run_arms

DEFAULT_MUS = (0.0, 0.001, 0.01, 0.1, 0.5, 1.0)


def base_config(rounds: int, alpha: float) -> dict:
    return {"dataset": {"name": "digits"}, "partition": {"kind": "dirichlet", "alpha": alpha},
            "model": {"name": "cnn"},
            "clients": {"num_clients": 10, "clients_per_round": 10, "local_epochs": 1, "batch_size": 16,
                        "optimizer": "sgd", "lr": 0.05, "momentum": 0.9},
            "rounds": rounds, "seed": 0}


def label(mu: float) -> str:
    return f"mu={mu:g}"


def configs(rounds: int, alpha: float, mus) -> dict:
    from platform.config.experiment import build_experiment

    return {label(mu): build_experiment({**base_config(rounds, alpha), "algorithm": {"name": "fedprox", "mu": mu}})
            for mu in mus}


def flat_verdict(results: dict, mus, up_to: float, tolerance: float) -> str:
    reference = float(np.mean(results[label(0.0)]["final_val"]))
    small = [mu for mu in mus if 0 < mu <= up_to]
    gaps = {mu: float(np.mean(results[label(mu)]["final_val"])) - reference for mu in small}
    holds = all(abs(g) <= tolerance for g in gaps.values())
    detail = ", ".join(f"mu={mu:g}: {g:+.4f}" for mu, g in gaps.items())
    return (f"flat for mu <= {up_to:g} (|mean final val - mu=0's| <= {tolerance:g}): {detail} -> "
            f"{'holds' if holds else 'does NOT hold'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fedprox_mu", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated replicate seeds")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--alpha", type=float, default=0.1, help="Dirichlet concentration (the scenario)")
    parser.add_argument("--mus", default=",".join(f"{m:g}" for m in DEFAULT_MUS),
                        help="comma-separated μ values; must include 0 (the reference)")
    parser.add_argument("--flat-up-to", type=float, default=0.1, help="largest μ the flatness claim covers")
    parser.add_argument("--tolerance", type=float, default=0.01, help="largest |Δ mean final val| still 'flat'")
    parser.add_argument("--json", action="store_true", help="print the per-seed results as JSON")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    mus = [float(m) for m in args.mus.split(",")]
    if 0.0 not in mus:
        parser.error("--mus: must include 0 (the FedAvg reference)")
    if any(m < 0 for m in mus):
        parser.error("--mus: every μ must be >= 0")

    results = run_arms(configs(args.rounds, args.alpha, mus), seeds, args.rounds)
    print_learning(results, args.json, f"digits, Dirichlet alpha {args.alpha:g}, 10 clients, E = 1, {args.rounds} "
                   f"rounds, seeds {args.seeds}", [flat_verdict(results, mus, args.flat_up_to, args.tolerance)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
