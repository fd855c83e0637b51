"""The plain PyTorch script a researcher would write for benchmarks.run_startup's workload: FedAvg on scikit-learn's
digits, IID over 10 clients, all 10 per round, 1 local epoch of SGD (batch 16, lr 0.05), the platform's small
``cnn`` (two 3×3 conv blocks, 16 and 32 channels, 2×2 max-pool, a linear head), 20 rounds, test accuracy printed each
round. No Ray, no MLflow, no fedsweep import: one process, torch and scikit-learn only.

    python benchmarks/plain_fedavg.py [--rounds 20]
"""
import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn


def model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(y)
    order = rng.permutation(len(y))
    test, train = order[:360], order[360:]
    clients = np.array_split(rng.permutation(train), 10)
    global_model, local = model(), model()
    for r in range(1, args.rounds + 1):
        start = time.perf_counter()
        state = {k: v.clone() for k, v in global_model.state_dict().items()}
        total = {k: torch.zeros_like(v) for k, v in state.items()}
        for idx in clients:
            local.load_state_dict(state)
            optimizer = torch.optim.SGD(local.parameters(), lr=0.05)
            idx = torch.from_numpy(idx)
            for batch in idx[torch.randperm(len(idx))].split(16):
                optimizer.zero_grad()
                F.cross_entropy(local(x[batch]), y[batch]).backward()
                optimizer.step()
            for k, v in local.state_dict().items():
                total[k] += v * (len(idx) / len(train))
        global_model.load_state_dict(total)
        with torch.no_grad():
            accuracy = (global_model(x[test]).argmax(1) == y[test]).float().mean().item()
        print(f"round {r:3d}  test_accuracy {accuracy:.4f}  {time.perf_counter() - start:.2f}s", flush=True)


if __name__ == "__main__":
    main()
