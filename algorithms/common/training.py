"""The one local-training loop every method uses.

Data are tensors already in memory; batches are index slices drawn with a seeded generator, so no
DataLoader is built per client and the same seed gives the same batch order on any actor.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LocalTraining:
    epochs: int
    batch_size: int
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)

    def optimizer_defaults(self) -> dict:
        """The hyperparameters :meth:`make_optimizer`'s optimiser runs with (torch's ``defaults``, every default
        filled in): what the batched loop (:mod:`algorithms.common.batched_training`) steps with, so both loops
        share one definition of the optimiser."""
        return dict(self.make_optimizer([torch.zeros(1, requires_grad=True)]).defaults)


def epoch_batches(n: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """One epoch's batches of a client with ``n`` samples: slices of ``torch.randperm(n, generator=generator)``,
    ``batch_size`` each, the last one smaller. Both loops (:func:`train_local` and the batched one) draw their
    batch order here, one call per epoch, so the same generator gives the same batches."""
    order = torch.randperm(n, generator=generator)
    return [order[start:start + batch_size] for start in range(0, n, batch_size)]


def train_local(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: LocalTraining, generator: torch.Generator,
                extra_loss: Optional[Callable[[nn.Module], torch.Tensor]] = None,
                loss_fn: Callable = F.cross_entropy,
                on_step: Optional[Callable[[nn.Module], None]] = None,
                on_epoch_end: Optional[Callable[[nn.Module], None]] = None,
                optimizer_state: Optional[dict] = None) -> float:
    """Train ``model`` in place for ``cfg.epochs`` epochs; return the mean training loss over all batches.

    A fresh optimiser is made on every call (the reference code resets momentum every round). A persistent
    client passes its ``optimizer_state`` dict: a non-empty one is loaded first (momentum buffers, Adam moments),
    and the dict is replaced in place by the optimiser's state after training.
    ``extra_loss(model)`` is added to each batch's loss, e.g. FedProx's proximal term.
    ``on_step(model)`` runs after every optimiser step and ``on_epoch_end(model)`` after every epoch, e.g. to
    collect FedPA's iterate-averaged posterior samples; neither may change the model.

    :func:`algorithms.common.batched_training.train_local_batched` trains several clients at once with the same
    batch order (:func:`epoch_batches`) and optimiser (:meth:`LocalTraining.optimizer_defaults`); it is this loop
    up to float rounding (``clients.batched``).
    """
    model.train()
    optimizer = cfg.make_optimizer(model.parameters())
    if optimizer_state:
        optimizer.load_state_dict(optimizer_state)
    n = len(y)
    total, batches = 0.0, 0
    for _ in range(cfg.epochs):
        for idx in epoch_batches(n, cfg.batch_size, generator):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            if extra_loss is not None:
                loss = loss + extra_loss(model)
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
            batches += 1
            if on_step is not None:
                on_step(model)
        if on_epoch_end is not None:
            on_epoch_end(model)
    if optimizer_state is not None:
        optimizer_state.clear()
        optimizer_state.update(optimizer.state_dict())
    return total / max(batches, 1)
