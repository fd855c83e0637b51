"""Federated SGLD as the FedKP thesis runs it (docs/methods/fedkp_fedpa.md §5.4, §12 A18).

Clients are FedAvg clients (E local epochs of SGD from θ_t, Δ_k = θ_k − θ_t). The server forms the Langevin
proposal θ′ = θ_t + Σ_k w_k Δ_k + ξ, ξ ~ N(0, σ²·I), and then takes its server step on θ′ − θ_t:
θ_{t+1} = θ_t + η_s·v, v = m_s·v + (θ′ − θ_t). The thesis code uses data-size weights w_k = |𝒟_k|/Σ|𝒟| and
σ = 2η_c (η_c the client lr), so the injected noise per round has std η_s·2η_c. The chain state θ_t is what
is broadcast; the evaluated model is the chain state during the burn-in and, from then on, the running uniform
average of the chain states produced in rounds t ≥ B.

Noise. ξ is drawn on the clients, from ``ClientContext.noise_generator`` (seeded by (noise seed, round,
client)), never from the global RNG: client k sends z_k = σ·ε_k, ε_k ~ N(0, I), next to Δ_k, plus the
scalar w_k. The server receives the weighted means z̄ = Σ_k (w_k/W) z_k and q = Σ_k (w_k/W)·w_k (W = Σ w_k;
both survive the actors' pre-reduction, so SGLD stays ``summable``) and sets ξ = z̄·√(W/q): since
Var(z̄) = σ²·Σ w_k²/W² = σ²·q/W, ξ ~ N(0, σ²·I) exactly, one draw per round, as the thesis's server-side
draw. The price is a second d-vector per client upload.

Deviations and choices:

- Where the noise is drawn (clients, combined exactly on the server, above) differs from the code (one
  NumPy draw on the server); the distribution of θ_{t+1} is the same.
- ``noise_rule`` (§12 A18): ``code`` (default) σ = 2η_c as the code ran; ``thesis`` σ = √(2η_c), the
  variance 2η of Eq. 2.16; ``noise_std`` overrides both with a fixed σ.
- ``weighting``: data_size (default, the code's SGLD) or uniform (§12 A22).
- ``evaluate``: chain_average (default, the code's evaluated server model after burn-in) or chain_state.
  The average counts the chain states θ_{t+1} produced by rounds t ≥ B (0-based); the thesis does not say
  whether the state at the switch is included.
- A client with no data sends weight 0 and takes no part in the mean or the noise normaliser.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from algorithms.base import ClientContext, ClientUpdate, ServerContext, ServerState, reduce_updates, register
from algorithms.common import server_step
from algorithms.fedavg import FedAvg
from algorithms.common.params import spec


def langevin_std(client_lr: float, rule: str = "code", noise_std: Optional[float] = None) -> float:
    """σ of the per-round Langevin noise: 2η_c (code), √(2η_c) (thesis Eq. 2.16), or a fixed ``noise_std``."""
    if noise_std is not None:
        return float(noise_std)
    if rule == "code":
        return 2.0 * client_lr
    if rule == "thesis":
        return math.sqrt(2.0 * client_lr)
    raise ValueError(f"unknown noise rule {rule!r}; allowed: code, thesis")


@dataclass(frozen=True)
class SGLDHyperparams:
    burnin_rounds: int = spec(25, doc="B (§5.4): server rounds before the evaluated model becomes the running "
                                      "average of the chain; the thesis uses FedPA's B (25 / 500 / 400).", ge=0)
    noise_rule: str = spec("code", doc="σ of the Langevin noise ξ (§5.4, §12 A18): code = 2η_c (what ran, η_c "
                                       "= clients.lr); thesis = √(2η_c), Eq. 2.16's variance 2η.",
                           choices=("code", "thesis"))
    noise_std: Optional[float] = spec(None, doc="A fixed σ overriding noise_rule (§12 A18's explicit "
                                                "noise_std); null = from noise_rule.", ge=0)
    weighting: str = spec("data_size", doc="Client weights of the mean (§2.2, §12 A22): data_size (the code's "
                                           "SGLD) or uniform.", choices=("data_size", "uniform"))
    evaluate: str = spec("chain_average", doc="Evaluated model after the burn-in (§5.4): chain_average (code) "
                                              "or chain_state.", choices=("chain_average", "chain_state"))


@register
class SGLD(FedAvg):
    name = "sgld"
    Hyperparams = SGLDHyperparams
    summable = True
    heterogeneous_models = False

    def client_stage_fields(self) -> dict:
        return {"procedure": "local_sgd_langevin_noise", "noise_rule": self.hp.noise_rule,
                "noise_std": self.hp.noise_std, "weighting": self.hp.weighting}

    def client_update(self, payload: dict, client: ClientContext) -> ClientUpdate:
        update = super().client_update(payload, client)  # FedAvg's client: Δ_k, weight N_k
        if client.num_samples == 0:
            update.weight = 0.0
        elif self.hp.weighting == "uniform":
            update.weight = 1.0
        delta = update.tensors["delta"]
        sigma = langevin_std(client.training.lr, self.hp.noise_rule, self.hp.noise_std)
        eps = torch.randn(delta.shape, generator=client.noise_generator, dtype=delta.dtype,
                          device=client.noise_generator.device)
        update.tensors["noise"] = (sigma * eps).to(delta.device)
        update.tensors["noise_weight"] = torch.tensor([update.weight], dtype=torch.float64)
        return update

    @staticmethod
    def combined_noise(mean: ClientUpdate) -> torch.Tensor:
        """ξ ~ N(0, σ²·I) from the weighted mean of the clients' z_k (see the module docstring)."""
        q = float(mean.tensors["noise_weight"])
        if mean.weight <= 0 or q <= 0:
            return torch.zeros_like(mean.tensors["noise"])
        return mean.tensors["noise"] * math.sqrt(mean.weight / q)

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate],
                  ctx: ServerContext) -> tuple[ServerState, dict]:
        mean = reduce_updates(updates)
        if mean.weight <= 0:
            return ServerState(weights=state.weights, optimizer=state.optimizer, extra=state.extra), {}
        step = mean.tensors["delta"] + self.combined_noise(mean)
        weights, opt_state = server_step(state.weights, step, state.optimizer, ctx.server_lr, ctx.server_momentum)
        extra = dict(state.extra)
        if state.round >= self.hp.burnin_rounds:
            count = int(extra.get("chain_count", 0)) + 1
            average = extra.get("chain_average")
            extra["chain_average"] = weights.clone() if average is None else average + (weights - average) / count
            extra["chain_count"] = count
        return ServerState(weights=weights, optimizer=opt_state, extra=extra), {}

    def evaluation_weights(self, state: ServerState) -> torch.Tensor:
        if self.hp.evaluate == "chain_average" and state.extra.get("chain_average") is not None:
            return state.extra["chain_average"]
        return state.weights
