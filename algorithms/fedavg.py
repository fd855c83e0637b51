"""FedAvg (McMahan et al. 2017; docs/methods/feded.md §2.2), with an optional server learning rate and momentum.

Clients start from θ_t, run E local epochs of SGD and return Δ_k = θ_k − θ_t weighted by N_k. The
server forms Δ = Σ_k (N_k/N) Δ_k over the sampled clients and steps θ_{t+1} = θ_t + η_s·v, v = m·v + Δ.
With η_s = 1 and m = 0 (the defaults) θ_{t+1} is exactly the N_k-weighted mean of the client models.

Model-heterogeneous runs (``model.architectures``): one global model per architecture, each averaged over the
clients of that architecture only (the "FedAvg within groups" baseline of FedDF, Lin et al. 2020 §4.1), with its
own server momentum buffer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from algorithms.base import (Algorithm, ClientContext, ClientUpdate, ServerContext, ServerState, group_by_architecture,
                             reduce_updates, register, weights_for)
from algorithms.common import get_flat_weights, server_step, set_flat_weights, train_local
from algorithms.common.batched_training import batching_obstacle, train_local_batched


@dataclass(frozen=True)
class FedAvgHyperparams:
    pass


@register
class FedAvg(Algorithm):
    name = "fedavg"
    Hyperparams = FedAvgHyperparams
    heterogeneous_models = True  # averages within each architecture group

    def client_stage_fields(self) -> dict:
        return {"procedure": "local_sgd"}  # plain local training: shared with every method that uses it

    def proximal_term(self, client: ClientContext, payload: dict) -> Optional[callable]:
        """An extra loss added to each local batch; FedAvg has none (FedProx overrides this)."""
        return None

    def client_update(self, payload: dict, client: ClientContext) -> ClientUpdate:
        start = weights_for(payload["weights"], client.architecture)
        if client.num_samples == 0:
            return ClientUpdate(weight=0.0, tensors={"delta": torch.zeros_like(start)}, metrics={"train_loss": 0.0})
        set_flat_weights(client.model, start)
        loss = train_local(client.model, client.x, client.y, client.training, client.generator,
                           extra_loss=self.proximal_term(client, payload), augment_generator=client.augment_generator)
        delta = get_flat_weights(client.model) - start
        return ClientUpdate(weight=float(client.num_samples), tensors={"delta": delta}, metrics={"train_loss": loss})

    def batching_obstacle(self, payload: dict, clients: Sequence[ClientContext]) -> Optional[str]:
        """FedAvg's clients (and FedProx's) train batched unless a subclass trains its own way (overrides
        ``client_update``), or the model or optimiser is one :func:`train_local_batched` does not reproduce."""
        if type(self).client_update is not FedAvg.client_update:
            return f"{self.name} overrides client_update"
        if not clients:
            return None  # the method itself can
        return batching_obstacle(clients[0].model, clients[0].training)

    def client_update_many(self, payload: dict, clients: Sequence[ClientContext]) -> list[ClientUpdate]:
        """:meth:`client_update` for clients of one architecture as one batched computation
        (:func:`~algorithms.common.batched_training.train_local_batched`): same start weights, each client's
        own batch order, dropout masks and optimiser. The proximal term (FedProx) is built once, from the first
        client after the start weights are loaded, and serves every client: it may depend on the start weights
        and the hyperparameters, not on the client (a subclass whose term does must override this)."""
        if not clients:
            return []
        first = clients[0]
        start = weights_for(payload["weights"], first.architecture)
        set_flat_weights(first.model, start)
        training = [c for c in clients if c.num_samples > 0]
        flat, losses = train_local_batched(
            first.model, [c.x for c in training], [c.y for c in training], first.training,
            [c.generator for c in training], [c.dropout_generator for c in training]
            if all(c.dropout_generator is not None for c in training) else None,
            extra_loss=self.proximal_term(first, payload),
            augment_generators=[c.augment_generator for c in training]) if training else (None, [])
        trained = {id(c): i for i, c in enumerate(training)}
        updates = []
        for c in clients:
            if id(c) not in trained:
                updates.append(self.client_update(payload, c))  # no samples: a zero delta, weight 0
                continue
            i = trained[id(c)]
            updates.append(ClientUpdate(weight=float(c.num_samples), tensors={"delta": flat[i] - start},
                                        metrics={"train_loss": losses[i]}))
        return updates

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate],
                  ctx: ServerContext) -> tuple[ServerState, dict]:
        if not isinstance(state.weights, dict):
            weights, opt_state = self.server_update(state.weights, updates, state.optimizer, ctx)
            return ServerState(weights=weights, optimizer=opt_state, extra=state.extra), {}
        groups = group_by_architecture(updates)
        weights, opt_state = dict(state.weights), dict(state.optimizer)
        for name, members in groups.items():
            weights[name], opt_state[name] = self.server_update(state.weights[name], members,
                                                                state.optimizer.get(name, {}), ctx)
        return ServerState(weights=weights, optimizer=opt_state, extra=state.extra), {}

    @staticmethod
    def server_update(weights: torch.Tensor, updates: Sequence[ClientUpdate], optimizer_state: dict,
                      ctx: ServerContext) -> tuple[torch.Tensor, dict]:
        """θ ← θ + η_s·v, v ← m·v + Δ, Δ the N_k-weighted mean of the updates' deltas (one architecture)."""
        mean = reduce_updates(updates)
        return server_step(weights, mean.tensors["delta"], optimizer_state, ctx.server_lr, ctx.server_momentum)
