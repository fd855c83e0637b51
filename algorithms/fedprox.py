"""FedProx (Li et al. 2020; docs/methods/feded.md §2.3) with a *correct* proximal term.

Each client minimises L_k(θ) + (μ/2)‖θ − θ_t‖², the norm taken over trainable parameters, with the
gradient flowing through the term (the thesis's reference code never applied it; see §2.3 [code]).
Everything else, including the server step, is FedAvg.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from algorithms.base import ClientContext, register
from algorithms.fedavg import FedAvg
from algorithms.common.params import spec


@dataclass(frozen=True)
class FedProxHyperparams:
    mu: float = spec(0.1, doc="μ, proximal coefficient (eq. 2.7); the thesis used 0.1, tuned over "
                              "{0.01, 0.1, 0.5, 1}.", ge=0)


@register
class FedProx(FedAvg):
    name = "fedprox"
    Hyperparams = FedProxHyperparams

    def client_stage_fields(self) -> dict:
        if self.hp.mu == 0:
            return super().client_stage_fields()  # μ = 0 trains exactly as FedAvg
        return {"procedure": "local_sgd_proximal", "mu": self.hp.mu}

    def proximal_term(self, client: ClientContext, payload: dict):
        return proximal_term(client.model, self.hp.mu)


def proximal_term(model: torch.nn.Module, mu: float, square_of_sum: bool = False):
    """The loss ``extra_loss(model)`` adding (μ/2)‖θ − θ_t‖² with θ_t the weights ``model`` holds now (load the
    global model first); None when μ = 0.

    ``square_of_sum=True`` reproduces the single-image code's bug (docs/methods/single_image.md §4.5, §8 A13):
    (μ/2)(Σ_j (θ_j − θ_t,j))², the square of the *sum* of parameter differences."""
    if mu == 0:
        return None
    anchors = [p.detach().clone() for p in model.parameters()]  # θ_t, after the weights were loaded

    if square_of_sum:
        def term(m: torch.nn.Module) -> torch.Tensor:
            return 0.5 * mu * sum((p - a).sum() for p, a in zip(m.parameters(), anchors)) ** 2
    else:
        def term(m: torch.nn.Module) -> torch.Tensor:
            return 0.5 * mu * sum(((p - a) ** 2).sum() for p, a in zip(m.parameters(), anchors))

    return term
