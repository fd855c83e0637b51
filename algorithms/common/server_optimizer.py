"""The server step shared by methods that move the global model along an aggregated update.

θ ← θ + η_s·v with v ← m·v + Δ (FedAvgM, Hsu et al. 2019). With η_s = 1 and m = 0 this is plain
FedAvg: θ_{t+1} = θ_t + Δ, the N_k-weighted mean of the client models.
"""
from __future__ import annotations

import torch


def server_step(weights: torch.Tensor, delta: torch.Tensor, optimizer_state: dict, lr: float,
                momentum: float) -> tuple[torch.Tensor, dict]:
    if momentum > 0:
        velocity = optimizer_state.get("velocity")
        velocity = delta.clone() if velocity is None else momentum * velocity + delta
        return weights + lr * velocity, {**optimizer_state, "velocity": velocity}
    return weights + lr * delta, optimizer_state
